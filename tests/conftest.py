"""Shared fixtures. Tests run on the CPU in float32 with the highest matmul precision."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the command line's glibc setting (bertjax.host_memory) stays out of the test processes, where a
# test calling `main` before any JAX use would otherwise apply it to the rest of its worker
os.environ.setdefault("BERTJAX_KEEP_FREED_MEMORY", "0")


@pytest.fixture
def unwritable_dir(tmp_path, monkeypatch):
    """A directory in which nothing can be made: `os.mkdir` under it fails with EACCES, as a
    read-only directory answers (the tests may run as root, which chmod does not stop)."""
    locked = tmp_path / "locked"
    locked.mkdir()
    real_mkdir = os.mkdir

    def read_only(path, *args, **kwargs):
        if str(path).startswith(str(locked)):
            raise PermissionError(13, "Permission denied", str(path))
        return real_mkdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "mkdir", read_only)
    return locked
