"""Writing files so that a crash never leaves a half-written one (write aside, then rename), and
reading a user's text file with an error that names it.

No framework import: the data pipeline, checkpoints and exports all use it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` (same suffix) to write; when the block ends cleanly
    it is renamed over `path`, on an exception it is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.tmp-{os.getpid()}{path.suffix}")
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to a temporary file beside `path`, then rename it over `path`."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_npy_atomic(path: str | os.PathLike, array: Any) -> None:
    """Save `array` as .npy beside `path`, then rename it over `path`."""
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; when the block ends cleanly it becomes
    `path` (an existing `path` is swapped out only with `replace`, and deleted once the new one
    is in place). On an exception the temporary directory is removed and `path` is untouched.
    A process killed between the two renames of a swap leaves the old directory aside: the next
    call on `path` puts it back first."""
    path = Path(path)
    _recover_swapped_out(path)
    if path.exists() and not replace:
        raise FileExistsError(f"{path} already exists")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        yield tmp
        if path.exists():
            old = path.parent / f".{path.name}.old-{os.getpid()}"
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)
                raise
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _recover_swapped_out(path: Path) -> None:
    """Put back an old directory a killed swap left aside (if `path` is missing), drop others."""
    leftovers = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if leftovers and not path.exists():
        os.replace(leftovers.pop(), path)
    for old in leftovers:
        shutil.rmtree(old, ignore_errors=True)


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of `path`; a missing, unreadable or non-UTF-8 file is a ValueError naming
    `what` (e.g. "--file") and the path, and what to do."""
    path = Path(path)
    if path.is_dir():
        raise ValueError(f"{what} {path} is a directory; give a text file")
    if not path.is_file():
        raise ValueError(f"{what} {path} does not exist; check the path")
    data = path.read_bytes()
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        kind = "binary" if b"\0" in data[:8192] else "not UTF-8"
        raise ValueError(f"{what} {path} is {kind} ({err.reason} at byte {err.start}); give a "
                         "UTF-8 text file") from None
