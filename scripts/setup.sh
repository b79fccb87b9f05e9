#!/usr/bin/env bash
# Create .venv and install bertjax with PyTorch, the test tools and the documentation builder.
# Without an NVIDIA GPU the CPU build of torch goes in first, so that the `torch>=2.4`
# requirement never pulls a multi-GB CUDA build. Everything else installs at the versions in
# scripts/constraints.txt, through uv: the same set pip installs, in under half its time
# (docs/install.md); pip only installs uv itself.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
python -m pip install -q -c scripts/constraints.txt uv
# byte-compiled at install (in parallel), as pip does: a process that may not write bytecode
# (PYTHONDONTWRITEBYTECODE) would otherwise compile every import from source each time
install() { uv pip install -q --compile-bytecode "$@"; }
if ! python -c "import torch" 2>/dev/null; then
  wheels=${PIP_FIND_LINKS:-/opt/wheels}
  if command -v nvidia-smi >/dev/null 2>&1; then
    install -c scripts/constraints.txt torch==2.13.0  # PyPI's CUDA build, the tested version
  elif ls "$wheels"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    # the CPU wheel this kind of machine carries on disk (pip reads PIP_FIND_LINKS itself; uv not)
    install -c scripts/constraints.txt --find-links "$wheels" torch==2.13.0
  else
    install torch --index-url https://download.pytorch.org/whl/cpu  # not all pins live there
  fi
fi
install -c scripts/constraints.txt -e '.[test,docs]'  # the tested versions
