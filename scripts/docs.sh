#!/usr/bin/env bash
# Build the documentation site (strict: a broken link, a missing page or an API name the reference
# cannot resolve fails it) into build/site; `bash scripts/docs.sh serve` serves it locally instead.
# The benchmark tables are re-rendered from docs/benchmarks/*.json first.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] || bash scripts/setup.sh
. .venv/bin/activate
export NO_MKDOCS_2_WARNING=1  # Material's banner about a future MkDocs, printed on every build
python -m bertjax.bench.tables README.md docs/*.md
if [ "${1:-build}" = "serve" ]; then
  mkdocs serve --strict
else
  mkdocs build --strict --quiet
fi
