"""`pip install .` alone, into a clean virtual environment (no extras, so no PyTorch), is enough
to pre-train on the bundled corpus, use the result, and get every command's help."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bertjax.cli.main import COMMANDS

ROOT = Path(__file__).resolve().parents[2]
NOT_SOURCE = {"runs", "build", "dist", "data", "docs", "tests"}  # top level, with dot-names

# every command's --help in one process of the clean environment (each one imports its module)
EVERY_HELP = """
import sys
from bertjax.cli.main import COMMANDS, main
for name in list(COMMANDS) + ["bench train", "bench infer", "bench embed", "bench data",
                            "bench corpus"]:
    try:
        main([*name.split(), "--help"])
    except SystemExit as stop:
        if stop.code != 0:
            sys.exit(f"{name} --help exited {stop.code}")
print("every help ok")
"""


# the clean environment's processes may write bytecode whatever this one's PYTHONDONTWRITEBYTECODE
# says: pip installs it with --no-compile, so the first import of JAX writes the .pyc files the
# later commands read instead of compiling every module from source again
CLEAN_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def _run(args: list[str | Path], **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(a) for a in args], capture_output=True, text=True, env=CLEAN_ENV,
                          **kw)
    assert proc.returncode == 0, f"{args[:3]} exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    return proc


@pytest.mark.slow
def test_clean_venv_with_pip_install_dot_pretrains_and_helps(tmp_path: Path) -> None:
    src = tmp_path / "src"  # a copy, so the build leaves nothing in the checkout
    shutil.copytree(ROOT, src, ignore=lambda d, names: [
        n for n in names if (Path(d) == ROOT and (n in NOT_SOURCE or n.startswith(".")))
        or n.endswith(".egg-info") or n == "__pycache__"])
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", venv])
    python, bertjax = venv / "bin" / "python", venv / "bin" / "bertjax"
    # --no-compile: no .pyc written for the thousands of files of JAX, SciPy, ... (imports write
    # their own: CLEAN_ENV)
    _run([python, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-compile", src],
         timeout=900)
    missing = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True,
                             env=CLEAN_ENV)
    assert missing.returncode != 0 and "No module named 'torch'" in missing.stderr

    listed = _run([bertjax, "--help"], timeout=120).stdout  # the console script
    assert all(name in listed for name in COMMANDS)
    assert "every help ok" in _run([python, "-c", EVERY_HELP], timeout=300).stdout

    run = tmp_path / "run"
    out = _run([bertjax, "pretrain", "--model.preset=tiny", "--data.vocab-size=200",
                "--data.seq-len=32", "--data.max-predictions=5", "--data.batch-size=4",
                "--data.eval-batches=1", "--train.steps=2", "--train.eval-every=2",
                "--no-progress", f"--output-dir={run}"], timeout=600, cwd=tmp_path).stdout
    assert "done: 2 steps" in out
    filled = _run([bertjax, "fill-mask", run, "to be or not to [MASK]", "--top-k", "3"],
                  timeout=300, cwd=tmp_path).stdout
    assert filled.count("[MASK] 1:") == 1
    parity = subprocess.run([bertjax, "parity"], capture_output=True, text=True, timeout=120,
                            env=CLEAN_ENV)
    assert parity.returncode == 2 and "pip install 'bertjax[torch]'" in parity.stderr
