"""Writing files so that a crash never leaves a half-written one (write aside, then rename), and
reading a user's text file with an error that names it.

No framework import: the data pipeline, checkpoints and exports all use it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.common.input_overlap import Inputs, check_not_an_input
from bertjax.errors import InputError


@contextlib.contextmanager
def atomic_file(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside `path` (same suffix) to write; when the block ends cleanly
    it is renamed over `path`, on an exception it is removed and `path` is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(temporary_name(path.name, str(os.getpid())))
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def umask() -> int:
    """The process's umask. Read from /proc where Linux has it: setting the umask to learn it
    would, for an instant, change the mode of files other threads (Orbax's) create."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def follow_umask(path: str | os.PathLike) -> None:
    """Give the file `path` the mode `open()` gives a new file (0o666 less the umask): for
    writers that create their files private (safetensors writes 0600), so a model another user
    or a serving process must read is not."""
    os.chmod(path, 0o666 & ~umask())


def temporary_name(name: str, pid: str = "*") -> str:
    """The name `atomic_file` writes `name` under first (a glob of them with the default `pid`)."""
    path = Path(name)
    return f".{path.stem}.tmp-{pid}{path.suffix}"


def write_text_atomic(path: str | os.PathLike, text: str) -> None:
    """Write `text` (UTF-8) to a temporary file beside `path`, then rename it over `path`."""
    with atomic_file(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_npy_atomic(path: str | os.PathLike, array: Any) -> None:
    """Save `array` as .npy beside `path`, then rename it over `path`."""
    with atomic_file(path) as tmp, open(tmp, "wb") as f:
        np.save(f, array)


def write_json_atomic(path: str | os.PathLike, data: Any) -> None:
    """`data` as indented JSON, written aside then renamed. NaN and infinities (a run stopped
    before its first evaluation has no accuracy yet) are written as null: JSON has no such
    numbers, and `json.dumps` would write a bare NaN that other JSON readers refuse."""
    text = json.dumps(_finite(data), indent=2, sort_keys=True, allow_nan=False)
    write_text_atomic(path, text + "\n")


def _finite(data: Any) -> Any:
    """`data` with every non-finite float (at any depth of dicts, lists and tuples) as None."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _finite(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [_finite(v) for v in data]
    return data


@contextlib.contextmanager
def atomic_directory(path: str | os.PathLike, *, replace: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary directory beside `path`; when the block ends cleanly it becomes
    `path` (an existing directory is swapped out only with `replace`, and deleted once the new one
    is in place; a file at `path` is never replaced). On an exception the temporary directory is
    removed and `path` is untouched. A process killed between the two renames of a swap leaves
    the old directory aside, and one killed while writing leaves its temporary directory: the next
    call on `path` puts the old one back and removes the other.

    Whether an existing directory may be replaced is the caller's decision: check it first
    (`check_output_directory`), before any work."""
    path = Path(path)
    _recover_swapped_out(path)
    if path.exists() and not path.is_dir():
        raise FileExistsError(f"{path} is a file, not a directory; choose another path")
    if path.exists() and not replace:
        raise FileExistsError(f"{path} already exists")
    check_creatable(path)
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
            shutil.rmtree(old, ignore_errors=True)  # the new directory is in place either way
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _recover_swapped_out(path: Path) -> None:
    """Put back an old directory a killed swap left aside (if `path` is missing), drop others,
    and drop the temporary directories of killed processes."""
    leftovers = sorted(path.parent.glob(f".{path.name}.old-*"), key=lambda p: p.stat().st_mtime)
    if leftovers and not path.exists():
        os.replace(leftovers.pop(), path)
    for old in leftovers:
        shutil.rmtree(old, ignore_errors=True)
    for tmp in path.parent.glob(f".{path.name}.tmp-*"):  # half-made by a killed process
        pid = tmp.name.rpartition("-")[2]
        if tmp.is_dir() and pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(tmp, ignore_errors=True)


def _alive(pid: int) -> bool:
    """Whether a process `pid` exists (on this machine)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # it exists, under another user
        return True
    return True


def check_creatable(path: str | os.PathLike, what: str = "path", *, inside: bool = False) -> None:
    """Raise an OSError naming `what` and `path` if `path` could not be created (or renamed into
    place): a part of it is a file, or the nearest existing directory above it cannot be written.
    With `inside`, an existing directory `path` must be writable itself (files go in it). Leaves
    nothing behind (writability is probed with an empty directory, removed at once)."""
    path = Path(path)
    for parent in ([path] if inside and path.is_dir() else []) + list(path.parents):
        if not parent.exists():
            continue
        if not parent.is_dir():
            raise NotADirectoryError(f"{what} {path}: {parent} is a file, not a directory; "
                                     f"choose another {what}")
        try:
            os.rmdir(tempfile.mkdtemp(prefix=".bertjax-write-check-", dir=parent))
        except OSError as err:
            raise PermissionError(f"{what} {path}: cannot write in {parent} "
                                  f"({(err.strerror or str(err)).lower()}); check its permissions "
                                  f"or choose another {what}") from None
        return


def listing(names: list[str], limit: int = 5) -> str:
    """`names` for a message: the first `limit`, then how many more."""
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def directory_entries(path: str | os.PathLike, what: str, inputs: Inputs | None) -> list[str]:
    """The names in the output directory `path` (sorted; none: it is new or empty, free to write),
    once the checks every output directory takes have passed: not one of `inputs`, nor inside or
    holding one (`check_not_an_input`), creatable, not a file."""
    check_not_an_input(path, what, inputs)
    path = Path(path)
    check_creatable(path, what)
    if not path.exists() and not path.is_symlink():
        return []
    if not path.is_dir():
        raise FileExistsError(f"{what} {path} is a file, not a directory; choose another {what} "
                              "(a new or empty directory)")
    return sorted(p.name for p in path.iterdir())


def check_output_directory(
    path: str | os.PathLike,
    *,
    is_ours: Callable[[Path], bool],
    made_by: str,
    replace: bool = False,
    what: str = "--out",
    replace_hint: str = "pass --force to replace it",
    inputs: Inputs | None = None,
    foreign: Callable[[Path], list[str]] | None = None,
) -> None:
    """Raise FileExistsError (naming `what`, `path` and the fix) unless `path` may become a
    directory written by `made_by`: it is new, an empty directory, or - with `replace` - a
    directory `is_ours` recognises as one `made_by` wrote. Anything else is never replaced, so a
    mistyped path cannot lose a user's files; and never one that is, lies in or holds one of
    `inputs` (option -> the path(s) it reads; `check_not_an_input`). `foreign(path)`: the names
    `made_by` did not write, for the message (default: every name). Call it before any work."""
    names = directory_entries(path, what, inputs)
    path = Path(path)
    if not names:
        return
    if not is_ours(path):
        theirs = foreign(path) if foreign is not None else names
        raise FileExistsError(
            f"{what} {path} already holds files that {made_by} did not write ({listing(theirs)}); "
            f"choose another {what} (a new or empty directory): only a directory written by "
            f"{made_by} is ever replaced")
    if not replace:
        raise FileExistsError(f"{what} {path} already exists (written by {made_by}); "
                              f"{replace_hint}, or choose another {what}")


def check_output_file(
    path: str | os.PathLike,
    *,
    what: str = "--out",
    force: bool = False,
    inputs: Inputs | None = None,
    example: str = "out.txt",
) -> None:
    """Raise an OSError naming `what`, `path` and the fix unless `path` may be written as a
    file: new, or (with `force`) an existing file. Never one of `inputs` (option -> the path(s)
    it reads), nor a path inside or holding one (`check_not_an_input`, an InputError), even with
    `force`. A directory - or a name ending in "/", which names one - is never written as a
    file, and neither is a path whose parent is a file or cannot be written. Call it before any
    work, so a mistyped path fails before the work, not after it."""
    check_not_an_input(path, what, inputs)
    text = os.fspath(path)
    target = Path(text)
    if target.is_dir() or text.endswith(("/", os.sep)):
        kind = "is a directory" if target.is_dir() else "names a directory (it ends with /)"
        raise IsADirectoryError(f"{what} {text} {kind}; pass a file name such as "
                                f"{target / example}")
    check_creatable(target, what)
    if not target.exists() and not target.is_symlink():
        return
    if not force:
        raise FileExistsError(f"{what} {text} already exists; pass --force to replace it, or "
                              f"choose another {what}")


def read_text(path: str | os.PathLike, what: str = "file") -> str:
    """The UTF-8 text of `path`; a missing, unreadable, non-UTF-8 or binary file (a NUL byte,
    which no text holds) is a ValueError naming `what` (e.g. "--file") and the path, and what
    to do."""
    path = Path(path)
    if path.is_dir():
        raise InputError(f"{what} {path} is a directory; give a text file")
    if not path.is_file():
        raise InputError(f"{what} {path} does not exist; check the path")
    data = path.read_bytes()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        kind = "binary" if b"\0" in data[:8192] else "not UTF-8"
        raise InputError(f"{what} {path} is {kind} ({err.reason} at byte {err.start}); give a "
                         "UTF-8 text file") from None
    nul = text.find("\0")
    if nul >= 0:  # valid UTF-8, but no text has one: a binary file, or text pasted with one
        line = text.count("\n", 0, nul) + 1
        raise InputError(f"{what} {path} is binary, not text (a NUL byte on line {line}, at byte "
                         f"{len(text[:nul].encode())}); give a UTF-8 text file, or remove the "
                         "NUL bytes (tr -d '\\000' < IN > OUT)")
    return text
