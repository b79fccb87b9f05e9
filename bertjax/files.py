"""Writing files so that a crash never leaves a half-written one: write aside, then rename.

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


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to a temporary file beside `path`, then rename it over `path`."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_npy_atomic(path: str | os.PathLike, array: Any) -> None:
    """Save `array` as .npy beside `path`, then rename it over `path`."""
    import numpy as np

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            np.save(f, array)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, sort_keys=True) + "\n")


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; when the block ends cleanly it becomes
    `path` (an existing `path` is swapped out only with `replace`, and deleted once the new one
    is in place). On an exception the temporary directory is removed and `path` is untouched."""
    path = Path(path)
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
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
