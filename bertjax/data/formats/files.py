"""Which reader reads a corpus file, by its name, and the check of its start before any work.

    .txt (and any other name)   BERT text          .parquet   Parquet
    .jsonl                      JSON lines         .arrow     Arrow (IPC file or stream)
    .json                       JSON (read whole)

A text format may be compressed: `.gz`, `.bz2` or `.zst` after its suffix (`wiki.jsonl.zst`). A
directory is read for these suffixes (`is_corpus_file`); a named file or a glob is read whatever
its suffix, as BERT text when no other one applies.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from bertjax.data.formats.columnar import (
    arrow_documents,
    check_arrow,
    check_parquet,
    parquet_documents,
)
from bertjax.data.formats.compressed import COMPRESSIONS, compression
from bertjax.data.formats.text import (
    Document,
    check_text_file,
    json_documents,
    jsonl_documents,
    text_documents,
)

TEXT_SUFFIXES = (".txt", ".jsonl", ".json")
COLUMNAR_SUFFIXES = (".parquet", ".arrow")
CORPUS_SUFFIXES = (*TEXT_SUFFIXES, *COLUMNAR_SUFFIXES,
                   *(text + packed for text in TEXT_SUFFIXES for packed in COMPRESSIONS))
# what a directory is read for, in messages
SUFFIXES_HINT = (f"{'/'.join(TEXT_SUFFIXES)} (or compressed: {'/'.join(COMPRESSIONS)}), "
                 f"{'/'.join(COLUMNAR_SUFFIXES)}")


def file_format(path: Path) -> str:
    """"parquet", "arrow", "jsonl", "json" or "text", by the file's name (a compression suffix
    is looked through: a.jsonl.gz is JSON lines)."""
    if path.suffix == ".parquet":
        return "parquet"
    if path.suffix == ".arrow":
        return "arrow"
    inner = path.with_suffix("") if compression(path) else path
    return {".jsonl": "jsonl", ".json": "json"}.get(inner.suffix, "text")


def is_corpus_file(path: Path) -> bool:
    """Whether a file in a corpus directory is read: its name ends in one of CORPUS_SUFFIXES."""
    return path.name.endswith(CORPUS_SUFFIXES)


def check_corpus_file(path: Path, text_field: str = "text") -> bool:
    """Whether a corpus file has documents, checking its start only (the footer of a Parquet
    file, the schema of an Arrow file, the first 64 KiB of text, decompressed); False for an
    empty one. A file its reader cannot read is a ValueError naming it and the fix."""
    kind = file_format(path)
    if kind == "parquet":
        return check_parquet(path, text_field)
    if kind == "arrow":
        return check_arrow(path, text_field)
    return check_text_file(path)


def file_documents(path: Path, text_field: str = "text") -> Iterator[Document]:
    """The documents of one corpus file, read by its format (`file_format`)."""
    kind = file_format(path)
    if kind == "parquet":
        return parquet_documents(path, text_field)
    if kind == "arrow":
        return arrow_documents(path, text_field)
    if kind == "jsonl":
        return jsonl_documents(path, text_field)
    if kind == "json":
        return json_documents(path, text_field)
    return text_documents(path)
