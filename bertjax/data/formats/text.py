"""Text corpus files: the original BERT format, JSON lines and JSON; what a document is.

A document is a list of sentences (non-empty strings). Every reader is a generator holding one
line (one JSON record) at a time, except `json_documents`, which reads its file whole.

* `text_documents(path)`: the original BERT format, one sentence per line and a blank line between
  documents.
* `jsonl_documents(path, text_field)`: one JSON object per line; its `text_field` string is one
  document, split into sentences like a speech (at `. ! ? ;` and at line breaks).
* `json_documents(path, text_field)`: a `.json` file is ONE JSON document, either a list of records
  or a single record (`{"text": ...}`), each record a document as in JSON lines; the file is read
  whole, so large corpora belong in `.jsonl`. (A `.json` file that holds JSON lines, as `datasets`
  writes them, is read as JSON lines.)

A file named `.gz`, `.bz2` or `.zst` (`x.jsonl.gz`) is decompressed as it is read
(`bertjax.data.formats.compressed`). `check_text_file` checks the start of a file before any work:
binary, non-UTF-8, corrupt and empty files are named with what to do.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bertjax.data.formats import sniff
from bertjax.data.formats.compressed import (
    compression,
    decompression_errors,
    open_binary,
    reencode_hint,
)
from bertjax.errors import InputError

Document = list[str]

BOM = "\ufeff"  # a byte-order mark, as Windows editors start UTF-8 files
HEAD_BYTES = 1 << 16  # how much of each corpus file is checked before any work
FORMAT_HINT = ("one sentence per line and a blank line between documents (.txt), or JSON lines "
               "(.jsonl)")

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")


def split_sentences(text: str) -> list[str]:
    """Split at whitespace following `.`, `!`, `?` or `;` and at line breaks; drop empty parts."""
    out: list[Any] = []
    for line in text.split("\n"):
        out.extend(s for s in (p.strip() for p in _SENTENCE_END.split(line)) if s)
    return out


def _decode(line: bytes, path: Path, offset: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, line, offset, err) from None


def _not_utf8(path: Path, data: bytes, offset: int, err: UnicodeDecodeError) -> InputError:
    kind = compression(path)
    where = "" if kind is None else " of its decompressed text"
    fix = (f"`iconv -f latin1 -t utf-8 {path.name} > fixed.txt`" if kind is None
           else reencode_hint(path, kind))
    return InputError(
        f"{path}: invalid UTF-8 at byte offset {offset + err.start}{where} "
        f"(byte 0x{data[err.start]:02x}); re-encode the file as UTF-8, e.g. {fix}"
    )


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, split at "\\n" only, streaming (decompressed as its
    name says)."""
    offset = 0
    with open_binary(path) as f, decompression_errors(path):
        for number, line in enumerate(f, 1):
            yield number, _decode(line, path, offset).rstrip("\r\n")
            offset += len(line)


def read_utf8(path: Path) -> str:
    """A whole UTF-8 file (lines joined with "\\n"); ValueError naming a non-UTF-8 byte."""
    return "\n".join(line for _, line in _lines(path))


def check_text_file(path: Path) -> bool:
    """Whether a corpus file has text; raise ValueError naming it for a binary or non-UTF-8 one.

    Only the first 64 KiB (decompressed) are checked here (the rest is checked as it is read), so
    a wrong file fails before any work however large it is. False: empty, or blank if that short."""
    if compression(path) is not None and path.stat().st_size == 0:
        return False  # (bz2 calls an empty file truncated)
    with open_binary(path) as f, decompression_errors(path):
        head = f.read(HEAD_BYTES)
        whole = not f.read(1)
    nul = head.find(b"\0")
    if nul >= 0:
        found = sniff(head) if compression(path) is None else None
        hint = (f"it starts like a {found[0]} file: name it {path.name}{found[1]} to read it as "
                "one, or " if found else "")
        raise InputError(
            f"corpus file {path} is binary, not text (a NUL byte at offset {nul}); {hint}"
            f"give UTF-8 text files: {FORMAT_HINT}"
        )
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=whole)
    except UnicodeDecodeError as err:
        raise _not_utf8(path, head, 0, err) from None
    return not whole or bool(text.removeprefix(BOM).strip())


def text_documents(path: str | os.PathLike) -> Iterator[Document]:
    """Original BERT format: one sentence per line, blank lines between documents."""
    document: Document = []
    for _, line in _lines(Path(path)):
        line = line.strip()
        if line:
            document.append(line)
        elif document:
            yield document
            document = []
    if document:
        yield document


def record_document(record: object, text_field: str, where: str) -> Document:
    """The sentences of one JSON record's `text_field` string; ValueError naming `where`."""
    if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
        found = (f"its fields: {', '.join(map(str, list(record)[:8])) or 'none'}"
                 if isinstance(record, dict) else f"it is a JSON {type(record).__name__}")
        raise InputError(
            f"{where}: record has no string field {text_field!r} ({found}); pass "
            "--text-field NAME to read another field"
        )
    return split_sentences(record[text_field])


def jsonl_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[Document]:
    """One document per JSON-lines record, from its `text_field` string, split into sentences."""
    path = Path(path)
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:  # a byte-order mark (Windows editors write one) is no JSON
            record = json.loads(line.removeprefix(BOM) if number == 1 else line)
        except json.JSONDecodeError as err:
            raise InputError(
                f"{path}:{number}: not valid JSON ({err.msg}); one object per line"
            ) from None
        document = record_document(record, text_field, f"{path}:{number}")
        if document:
            yield document


def json_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[Document]:
    """A `.json` file: ONE JSON document, a list of records or a single record, each record's
    `text_field` string one document. The file is read whole (use .jsonl for large corpora).
    A file of JSON lines named .json (as `datasets`' `to_json` writes) is read as JSON lines."""
    path = Path(path)
    text = read_utf8(path).removeprefix(BOM)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data" and text.lstrip().startswith("{"):
            yield from jsonl_documents(path, text_field)
            return
        raise InputError(
            f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); a .json corpus file "
            "is one JSON document, a list of records or one record (for one record per line, "
            "name the file .jsonl)"
        ) from None
    records = data if isinstance(data, list) else [data]
    for i, record in enumerate(records):
        where = f"{path}: record {i}" if isinstance(data, list) else str(path)
        document = record_document(record, text_field, where)
        if document:
            yield document
