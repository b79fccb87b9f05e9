"""Corpus file formats, one module each, and what they share.

    text.py        BERT text, JSON lines, JSON; what a document is
    compressed.py  .gz, .bz2 and .zst files, decompressed as they are read
    columnar.py    Parquet, Arrow (datasets' `save_to_disk`) and `datasets` objects
    iterables.py   documents from Python: texts, documents or records
    files.py       which reader reads a file (by its name) and how its start is checked

The optional packages a format needs (pyarrow, zstandard) are imported when a file of that format
is met, not when `bertjax.data` is imported: data loading stays light, and a corpus of plain text
needs neither.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from bertjax.errors import InputError

INSTALL_HINT = "pip install 'bertjax[corpora]'"


class MissingDependencyError(ImportError, InputError):
    """A corpus format's optional package is not installed (a ValueError too: bad input to a
    command, reported in one line)."""


def optional_import(module: str, needed_for: str) -> ModuleType:
    """Import `module` (pyarrow, zstandard, ...) or raise MissingDependencyError saying how to
    install it; `needed_for` names what needs it (e.g. "corpus file a.parquet (Parquet)")."""
    try:
        return importlib.import_module(module)
    except ImportError as err:
        package = module.split(".")[0]
        raise MissingDependencyError(
            f"{needed_for} needs the {package!r} package, which is not installed: "
            f"{INSTALL_HINT} (or pip install {package})", name=package,
        ) from err


# how files of the binary formats start -> (their name, the suffix that reads them)
MAGIC = {b"\x1f\x8b": ("gzip", ".gz"), b"BZh": ("bzip2", ".bz2"), b"\x28\xb5\x2f\xfd": ("zstd", ".zst"),
         b"PAR1": ("Parquet", ".parquet"), b"ARROW1": ("Arrow", ".arrow"),
         b"\xff\xff\xff\xff": ("Arrow stream", ".arrow")}


def sniff(head: bytes) -> tuple[str, str] | None:
    """(format, suffix) of a file that starts with `head`, for the binary formats bertjax reads
    (to name the suffix a misnamed file needs); None if it starts like none of them."""
    return next((found for magic, found in MAGIC.items() if head.startswith(magic)), None)
