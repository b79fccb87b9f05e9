"""The one rule every writer checks before any work: an output never lands on an input.

An output path (a file or a directory a command writes or replaces) is refused - with or without
`--force`, which replaces an earlier output, never an input - when it is one of the paths the
command reads (a model directory, a run, `--file`, a corpus), lies inside one of them, or holds
one. However it is spelt: `..`, symbolic links and trailing slashes are resolved, and a hard link
to an input's file is recognised by its device and inode. A directory input counts with every
file in it, so a Hub snapshot's files (links to the cache's blobs) count as their blobs too.

No framework import.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from bertjax.errors import InputError

PathLike = str | os.PathLike
# option (how messages name it: "--file", "MODEL") -> the path(s) it reads; None: not given
Inputs = Mapping[str, PathLike | Iterable[PathLike] | None]


def check_not_an_input(path: PathLike, what: str, inputs: Inputs | None) -> None:
    """Raise InputError naming `what`, `path`, the input and the fix if writing `path` could
    change one of `inputs` (see the module docstring). Inputs that do not exist are skipped:
    their readers name them."""
    shown = os.fspath(path)
    spellings = _spellings(Path(shown))
    identity = _identity(Path(shown))
    for label, source in _sources(inputs or {}):
        real = Path(os.path.realpath(source))
        for spelling in spellings:
            if spelling == real:
                raise InputError(f"{what} {shown} is the {label} this command reads: writing it "
                                 f"would replace your input; choose another {what}")
            if real in spelling.parents and real.is_dir():  # under a file: nothing can be made
                raise InputError(f"{what} {shown} lies inside {label} {source}, which this "
                                 f"command reads: writing there would change your input; "
                                 f"choose another {what}, outside it")
            if spelling in real.parents:
                raise InputError(f"{what} {shown} holds {label} {source}, which this command "
                                 f"reads: writing {what} would replace your input; choose "
                                 f"another {what}")
        for file in _files(source) if identity is not None else ():
            linked = identity is not None and _identity(file) == identity
            if linked or Path(os.path.realpath(file)) in spellings:
                how = "a hard link to" if linked else "the same file as"
                raise InputError(f"{what} {shown} is {how} {file}, which this command reads "
                                 f"({label}): writing it would replace your input; choose "
                                 f"another {what}")


def _sources(inputs: Inputs) -> Iterator[tuple[str, Path]]:
    """(label, path) of every input that exists."""
    for label, given in inputs.items():
        paths = [given] if given is None or isinstance(given, str | os.PathLike) else list(given)
        for path in paths:
            if path is not None and os.path.lexists(path):
                yield label, Path(path)


def _spellings(path: Path) -> set[Path]:
    """The places writing `path` touches: where it leads (every link followed) and the entry
    itself (its directory resolved, a link at `path` not followed: that is what a rename
    replaces)."""
    resolved = Path(os.path.realpath(path))
    if path.name in ("", ".", ".."):
        return {resolved}
    return {resolved, Path(os.path.realpath(path.parent)) / path.name}


def _identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path` (links followed), None if there is none (or it is
    a directory: replacing one renames it away, which changes no file a link in it shares)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return None if path.is_dir() else (stat.st_dev, stat.st_ino)


def _files(source: Path) -> Iterator[Path]:
    """`source` if it is a file, else every file under it (links to files included)."""
    if not source.is_dir():
        yield source
        return
    for directory, _, names in os.walk(source):
        for name in names:
            yield Path(directory) / name
