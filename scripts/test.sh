#!/usr/bin/env bash
# The README's test command: set up (idempotent) and run lint plus the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
python -m pytest -n 2 -q "$@"
