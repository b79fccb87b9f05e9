"""The commands' compilation cache (`bertjax.cli.compile_cache`): a second command loads the
programs the first compiled, it can be turned off by a switch and by an environment variable,
and a damaged entry is compiled again, silently. Each case is a command in its own process, as a
user runs it (JAX reads the setting when it is imported)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from use_helpers import tiny_checkpoint

from bertjax.cli.compile_cache import ENV, FLAG, cache_directory

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
TEXT = "to be or not to [MASK]"


def _fill_mask(cache: Path | str | None, *extra: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}  # the tests'
    env.pop(ENV, None)
    if cache is not None:
        env[ENV] = str(cache)
    return subprocess.run([sys.executable, "-m", "bertjax.cli", *extra, "fill-mask",
                           str(tiny_checkpoint()), TEXT], env=env, capture_output=True, text=True,
                          timeout=600, cwd=ROOT)


def _entries(cache: Path) -> dict[str, bytes]:
    """The compiled programs (JAX's `-cache` files; `-atime` ones record their last use)."""
    return {p.name: p.read_bytes() for p in cache.rglob("*-cache") if p.is_file()}


def test_a_second_command_loads_what_the_first_compiled(tmp_path: Path) -> None:
    cache = tmp_path / "xla"
    first = _fill_mask(cache)
    assert first.returncode == 0, first.stderr[-2000:]
    entries = _entries(cache)
    assert entries, "the first command wrote no compiled program"
    second = _fill_mask(cache)
    assert second.returncode == 0 and second.stdout == first.stdout
    assert _entries(cache) == entries  # nothing compiled anew: every program came from the cache


@pytest.mark.parametrize("how", ["switch", "environment"])
def test_the_cache_can_be_turned_off(tmp_path: Path, how: str) -> None:
    cache = tmp_path / "xla"
    done = (_fill_mask(cache, FLAG) if how == "switch"
            else _fill_mask("0") if how == "environment" else None)
    assert done.returncode == 0, done.stderr[-2000:]
    assert not cache.exists() or not _entries(cache)
    assert cache_directory({ENV: "off"}) is None and cache_directory({ENV: "0"}) is None


def test_a_damaged_entry_is_compiled_again_silently(tmp_path: Path) -> None:
    cache = tmp_path / "xla"
    first = _fill_mask(cache)
    assert first.returncode == 0, first.stderr[-2000:]
    for path in _entries(cache):
        path = cache / path
        path.write_bytes(path.read_bytes()[: len(path.read_bytes()) // 2])  # cut short
    again = _fill_mask(cache)
    assert again.returncode == 0, again.stderr[-2000:]
    assert again.stdout == first.stdout
    assert "warning" not in again.stderr.lower() and "Traceback" not in again.stderr


def test_where_the_cache_is() -> None:
    assert cache_directory({ENV: "/data/xla"}) == Path("/data/xla")
    assert cache_directory({"XDG_CACHE_HOME": "/c"}) == Path("/c/bertjax/xla")
    assert cache_directory({}) == Path.home() / ".cache" / "bertjax" / "xla"
