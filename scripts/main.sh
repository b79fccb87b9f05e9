#!/usr/bin/env bash
# The README's main job: set up (idempotent), then run it on a fresh machine.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
bertjax parity --preset base "$@"
