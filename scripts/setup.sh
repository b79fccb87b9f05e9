#!/usr/bin/env bash
# Create .venv and install bertjax with PyTorch, the test tools and the documentation builder.
# Without an NVIDIA GPU the CPU build of torch goes in first, so that the `torch>=2.4`
# requirement never pulls a multi-GB CUDA build. Everything else installs at the versions in
# scripts/constraints.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -d .venv ] || python3 -m venv .venv
. .venv/bin/activate
if ! python -c "import torch" 2>/dev/null; then
  if command -v nvidia-smi >/dev/null 2>&1; then
    pip install -q -c scripts/constraints.txt torch==2.13.0  # PyPI's CUDA build, the tested version
  elif ls "${PIP_FIND_LINKS:-/opt/wheels}"/torch-2.13.0+cpu-*.whl >/dev/null 2>&1; then
    # the CPU wheel this kind of machine carries on disk
    pip install -q -c scripts/constraints.txt torch==2.13.0
  else
    pip install -q torch --index-url https://download.pytorch.org/whl/cpu  # not all pins live there
  fi
fi
pip install -q -c scripts/constraints.txt -e '.[test,docs]'  # the tested versions
