"""Records of a user's JSON-lines or CSV file, each with its "file:line": reading stops at the
first malformed record with an InputError naming its line and what is wrong there.

A CSV is read strictly: every row has the header's fields, and a quote that is opened and not
closed is named at the line where it opened (a lenient reader swallows the lines after it into
one field, then blames some later line, or none).

No framework import.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from bertjax.data.formats.text import BOM  # as Excel starts a UTF-8 CSV
from bertjax.errors import InputError

_QUOTE_FIX = "close it, or write a quote inside a quoted field as two (\"\")"


def json_records(path: Path, content: str) -> list[tuple[str, dict]]:
    """("file:line", object) for each non-blank line of a JSON-lines file's `content`; a line
    that is not a JSON object is an InputError naming it, the column and the cause."""
    out = []
    for n, line in enumerate(content.splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise InputError(f"{path}:{n} is not a JSON object: {err.msg} (column {err.colno}); "
                             "write one JSON object per line") from None
        if not isinstance(record, dict):
            raise InputError(f"{path}:{n} is not a JSON object but {type(record).__name__} "
                             "JSON; write one JSON object per line")
        out.append((f"{path}:{n}", record))
    return out


def csv_records(path: Path, content: str) -> list[tuple[str, dict]]:
    """("file:line", {header field: value}) for each row of a CSV file (with a header) after the
    header; the first malformed row is an InputError naming its line and cause."""
    text = content.removeprefix(BOM)
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    rows: list[tuple[str, dict]] = []
    header: list[str] | None = None
    start = 1
    try:
        for row in reader:
            if row and header is None:
                header = row
            elif row:
                if len(row) != len(header or ()):
                    raise _field_count(path, start, reader.line_num, row, header or [], text)
                rows.append((f"{path}:{start}", dict(zip(header or (), row, strict=True))))
            start = reader.line_num + 1
    except csv.Error as err:
        raise _quote_error(path, start, reader.line_num, text, str(err)) from None
    return rows


def _field_count(path: Path, start: int, end: int, row: list[str], header: list[str],
                 text: str) -> InputError:
    """A row with more or fewer fields than the header: an unclosed quote if the row ran over
    several lines, else the row itself."""
    if end > start:
        opened = _open_quote_line(text, start)
        return InputError(f"{path}:{opened}: the quote opened on this line runs on to line {end}, "
                          f"taking the lines between into one field; {_QUOTE_FIX}")
    fields = "field" if len(row) == 1 else "fields"
    fix = ("put a field that holds a comma in double quotes" if len(row) > len(header) else
           "give every row the header's fields (an empty one as nothing between two commas)")
    return InputError(f"{path}:{start} has {len(row)} {fields}, but the header has "
                      f"{len(header)} ({', '.join(header)}); {fix}")


def _quote_error(path: Path, start: int, end: int, text: str, cause: str) -> InputError:
    """What the strict reader found wrong, at the line where the culprit quote opened."""
    opened = _open_quote_line(text, start)
    if "end of data" in cause:
        return InputError(f"{path}:{opened}: the quote opened on this line is never closed (the "
                          f"file ends inside it); {_QUOTE_FIX}")
    if opened < end:
        return InputError(f"{path}:{opened}: the quote opened on this line runs on to line {end}, "
                          f"taking the lines between into one field; {_QUOTE_FIX}")
    return InputError(f"{path}:{end} is not a CSV row ({cause}); a quoted field must end with its "
                      "closing quote, followed by a comma or the end of the line")


def _open_quote_line(text: str, start: int) -> int:
    """The line of the quote that the row starting at line `start` leaves open longest: the last
    quote opened on one line and still open at the next (`start` if there is none)."""
    lines = text.split("\n")[start - 1:]
    in_quote, at_field_start, opened, culprit = False, True, start, start
    for number, line in enumerate(lines, start):
        if in_quote and opened < number:
            culprit = opened
        i = 0
        while i < len(line):
            char = line[i]
            if in_quote and char == '"':
                if line[i + 1:i + 2] == '"':
                    i += 1  # "" inside a quoted field
                else:
                    in_quote = False
            elif not in_quote and char == '"' and at_field_start:
                in_quote, opened = True, number
            at_field_start = not in_quote and char == ","
            i += 1
        if not in_quote:
            return culprit
        at_field_start = False
    return opened
