"""Shared fixtures. Tests run on the CPU in float32 with the highest matmul precision."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
# the command line's glibc setting (bertjax.train.host_memory) stays out of the test processes, where a
# test calling `main` before any JAX use would otherwise apply it to the rest of its worker
os.environ.setdefault("BERTJAX_KEEP_FREED_MEMORY", "0")
# XLA's compiled programs are kept on disk for the run and shared by its processes (the xdist
# workers, which inherit this variable, and every command a test starts): most tests compile the
# same small steps again. A hit skips XLA's compilation only: bertjax's tracing and lowering still
# run, and the key is the lowered program with its compile options. Set JAX_COMPILATION_CACHE_DIR
# to keep a cache of your own, or to nothing to compile everything.
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
    _XLA_CACHE = tempfile.mkdtemp(prefix="bertjax-tests-xla-")
    os.environ["JAX_COMPILATION_CACHE_DIR"] = _XLA_CACHE
    atexit.register(shutil.rmtree, _XLA_CACHE, ignore_errors=True)  # by the process that made it
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
# Likewise the vocabulary and shards a pre-training run makes (bertjax.jobs.pretrain.data_cache):
# most runs here train on the bundled plays with one of a few vocabulary sizes, and a hit copies
# them instead of training the vocabulary and tokenising the plays again.
if "BERTJAX_DATA_CACHE" not in os.environ:
    _DATA = tempfile.mkdtemp(prefix="bertjax-tests-data-")
    os.environ["BERTJAX_DATA_CACHE"] = _DATA
    atexit.register(shutil.rmtree, _DATA, ignore_errors=True)
# What several test modules build alike (tests/use_helpers.py `built_once`: the tiny pre-training
# run) is built once for the whole run, by whichever process asks first, in a folder every xdist
# worker inherits; the others wait for it and copy it.
if "BERTJAX_TESTS_SHARED" not in os.environ:
    _SHARED = tempfile.mkdtemp(prefix="bertjax-tests-shared-")
    os.environ["BERTJAX_TESTS_SHARED"] = _SHARED
    atexit.register(shutil.rmtree, _SHARED, ignore_errors=True)


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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The files holding a slow test first, the rest in their order. scripts/test.sh hands whole
    files to the xdist workers (`--dist loadfile`: a module's fixtures are built once, not once per
    worker) in this order, so that a long file never starts last with the other worker idle."""
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: item.path not in slow)  # stable: in-file order unchanged


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None):
    """After each file's last test, JAX's in-process caches are dropped (`jax.clear_caches`).
    Every lowering makes an MLIR context, and those caches keep the lowered programs of up to
    about 2,048 functions alive, contexts with them (jax-ml/jax#16284), in a worker that runs
    dozens of files; making a context gets slower the more are alive, and a file rarely jits
    what another file did. The persistent compilation cache above is untouched."""
    yield
    if (nextitem is None or nextitem.path != item.path) and "jax" in sys.modules:
        sys.modules["jax"].clear_caches()
