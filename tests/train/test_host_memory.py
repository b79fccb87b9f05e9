"""`bertjax.train.host_memory.keep_freed_memory`: a jitted step stops page-faulting its temporaries.

The faults are counted by the kernel (`getrusage`), not timed: in a fresh process a jitted function
with a 64 MiB temporary runs 5 times, then 20 more with the minor page faults of each counted
against the temporary's pages. Without the setting every call faults all of them again (the block
is a fresh `mmap`). With it most calls fault none; glibc's heap still grows now and then (a small
allocation splits the freed block, so the next one is placed anew): 14-19 of 20 calls were quiet
in six runs, and a training step of the bench faulted in 16 of 100 steps.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import pytest

from bertjax.train import host_memory

PROBE = r"""
import json, resource, sys
from bertjax.train.host_memory import keep_freed_memory
done = keep_freed_memory()
import jax, jax.numpy as jnp
x = jnp.linspace(0.0, 1.0, 8192 * 2048, dtype=jnp.float32).reshape(8192, 2048)  # 64 MiB
w = jnp.ones((2048, 16), jnp.float32)
step = jax.jit(lambda x, w: jnp.sum(jnp.sin(x) @ w))  # sin(x) is a (8192, 2048) temporary
temp = step.lower(x, w).compile().memory_analysis().temp_size_in_bytes
for _ in range(5):
    step(x, w).block_until_ready()
faults = []
for _ in range(20):
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    step(x, w).block_until_ready()
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
print(json.dumps({"done": done, "temp_pages": temp / resource.getpagesize(), "faults": faults}))
"""

glibc_only = pytest.mark.skipif(
    platform.system() != "Linux" or platform.libc_ver()[0] != "glibc",
    reason="keep_freed_memory tunes glibc's malloc")


def _probe(disable: bool) -> dict:
    env = {**os.environ, "JAX_PLATFORMS": "cpu"}
    env[host_memory.DISABLE_ENV] = "0" if disable else "1"
    out = subprocess.run([sys.executable, "-c", PROBE], env=env, capture_output=True, text=True,
                         timeout=300, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@glibc_only
def test_kept_memory_is_not_faulted_again_each_call():
    kept = _probe(disable=False)
    assert kept["done"] == "kept"
    assert kept["temp_pages"] >= 16384  # the 64 MiB temporary
    quiet = [f for f in kept["faults"] if f < 0.05 * kept["temp_pages"]]
    assert len(quiet) >= 10, kept


@pytest.mark.slow
@glibc_only
def test_without_it_every_call_faults_its_temporaries_again():
    # the control: what the setting removes (a test that fails if the probe stops measuring it)
    system = _probe(disable=True)
    assert system["done"].startswith("disabled by")
    assert all(f > 0.5 * system["temp_pages"] for f in system["faults"]), system


def test_left_alone_where_an_accelerator_plugin_is_installed(monkeypatch):
    monkeypatch.setattr(host_memory, "_accelerator_plugin", lambda: "jax-cuda12-plugin")
    monkeypatch.delenv(host_memory.DISABLE_ENV, raising=False)
    called = []
    monkeypatch.setattr(host_memory.ctypes, "CDLL", lambda *a: called.append(a))
    assert host_memory.keep_freed_memory().startswith("accelerator plugin jax-cuda12-plugin")
    assert not called  # mallopt never reached


def test_jax_platforms_cpu_first_counts_as_no_accelerator(monkeypatch):
    monkeypatch.setenv("JAX_PLATFORMS", "cpu,cuda")
    assert host_memory._accelerator_plugin() is None


@pytest.mark.parametrize(("argv", "runs_jax"), [
    (["pretrain", "--preset", "mini"], True), (["bench", "train"], True),
    (["fill-mask", "RUN", "text"], True), (["vocab", "corpus.txt"], False),
    (["data", "--corpus", "x"], False), (["bench", "data"], False)])
def test_the_command_line_sets_it_first_for_commands_that_run_jax(monkeypatch, argv, runs_jax):
    from bertjax.cli import main as cli

    assert cli._runs_jax(argv) is runs_jax
    called = []
    monkeypatch.setattr(cli, "keep_freed_memory", lambda: called.append(True) or "kept")
    with pytest.raises(SystemExit):
        cli.main([*argv[:2 if argv[0] == "bench" else 1], "--help"])
    assert called == ([True] if runs_jax else [])
