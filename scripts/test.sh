#!/usr/bin/env bash
# The test command (README, "The two commands"): set up (idempotent), then lint, type checks, the documentation
# (its benchmark tables equal their JSON; the site builds in strict mode) and the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
. .venv/bin/activate
ruff check .
mypy  # bertjax, bert_torch and parity at the strictness pyproject.toml states
python -m bertjax.bench.tables --check README.md docs/*.md
NO_MKDOCS_2_WARNING=1 mkdocs build --strict --quiet
# whole files per worker, in the order tests/conftest.py gives (the slow ones first)
python -m pytest -n 2 --dist loadfile --no-loadscope-reorder -q "$@"
