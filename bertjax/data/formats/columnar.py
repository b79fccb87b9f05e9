"""Columnar corpora: Parquet files, Arrow files (as `datasets`' `save_to_disk` writes them) and
`datasets.Dataset` / `IterableDataset` objects.

One row's text column (`text_field`) is one document, split into sentences as a JSON-lines record
is; a null or empty text is skipped. Rows are read `BATCH_ROWS` at a time: a Parquet file through a
buffered reader that holds part of one column chunk, never the whole file (a row group may be
larger than memory); an Arrow file one record batch at a time, as its writer made them (`datasets`
writes 1,000 rows per batch). Files are read, not memory-mapped, so what was read is freed.

Everything needs `pyarrow` (an optional dependency, imported when such a file is met); `datasets`
objects are recognised by their type's module and read through their own methods, so bertjax
never imports `datasets` itself. The start of every file is checked before any work
(`check_parquet`, `check_arrow`): a corrupt file, a missing or non-text column is a ValueError
naming the file and the fix.
"""

from __future__ import annotations

import contextlib
import json
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from bertjax.data.formats import optional_import
from bertjax.data.formats.text import Document, record_document, split_sentences
from bertjax.errors import InputError

BATCH_ROWS = 256  # rows turned into Python strings at a time
_READ_BUFFER = 1 << 20  # bytes a Parquet column is read in
_DATASET_KINDS = ("Dataset", "IterableDataset", "DatasetDict", "IterableDatasetDict")


# --- shared ----------------------------------------------------------------------------------


def _pyarrow(path: Path, what: str) -> Any:
    return optional_import("pyarrow", f"corpus file {path} ({what})")


def _is_text(pa: Any, kind: Any) -> bool:
    types = pa.types
    if types.is_dictionary(kind):
        kind = kind.value_type
    return (types.is_string(kind) or types.is_large_string(kind)
            or getattr(types, "is_string_view", lambda _: False)(kind))


def check_column(where: str, schema: Any, text_field: str, fix: str = "--text-field NAME") -> None:
    """Raise ValueError naming `where` unless `schema` (a pyarrow schema) has a text column
    `text_field`; the message lists the columns there are and says to pass `fix`."""
    pa = optional_import("pyarrow", where)
    names = list(schema.names)
    text = [n for n in names if _is_text(pa, schema.field(n).type)]
    if text_field not in names:
        raise InputError(
            f"{where} has no column {text_field!r} (its columns: {', '.join(names[:12]) or 'none'}"
            f"{'; text columns: ' + ', '.join(text[:12]) if text else ''}); pass {fix} to read "
            "another column"
        )
    kind = schema.field(text_field).type
    if not _is_text(pa, kind):
        raise InputError(
            f"{where}: column {text_field!r} holds {kind}, not text (text columns: "
            f"{', '.join(text[:12]) or 'none'}); pass {fix} naming a text column"
        )


def column_documents(column: Any) -> Iterator[Document]:
    """The documents of a pyarrow text array (one per non-empty value), `BATCH_ROWS` values
    turned into Python strings at a time."""
    for start in range(0, len(column), BATCH_ROWS):
        for text in column.slice(start, BATCH_ROWS).to_pylist():
            if text:
                document = split_sentences(text)
                if document:
                    yield document


@contextlib.contextmanager
def _format_errors(path: Path, what: str, fix: str) -> Iterator[None]:
    """pyarrow's errors about a file's bytes (inside the block) as one ValueError naming it."""
    pa = sys.modules["pyarrow"]
    try:
        yield
    except (pa.ArrowException, OSError) as err:
        if isinstance(err, OSError) and err.errno is not None:
            raise  # the disk or the path, not the data
        detail = " ".join(str(err).split())
        raise InputError(f"corpus file {path} is not a valid {what} file ({detail}); {fix}") from None


_PARQUET_FIX = ("write it again (pyarrow.parquet.write_table, pandas' to_parquet, datasets' "
                "to_parquet), or give a file of another format the suffix of that format")


# --- Parquet ---------------------------------------------------------------------------------


def _parquet_file(path: Path) -> Any:
    pq = optional_import("pyarrow.parquet", f"corpus file {path} (Parquet)")
    # buffered, not pre-buffered: a column chunk is read a buffer at a time, never whole
    return pq.ParquetFile(path, buffer_size=_READ_BUFFER, pre_buffer=False)


def check_parquet(path: Path, text_field: str) -> bool:
    """Whether a Parquet file has rows; ValueError naming it if it is not Parquet or lacks a text
    column `text_field`. Reads the footer only."""
    _pyarrow(path, "Parquet")
    if path.stat().st_size == 0:
        return False
    with _format_errors(path, "Parquet", _PARQUET_FIX), contextlib.closing(_parquet_file(path)) as f:
        check_column(f"corpus file {path}", f.schema_arrow, text_field)
        return f.metadata.num_rows > 0


def parquet_documents(path: str | Path, text_field: str = "text") -> Iterator[Document]:
    """One document per row of a Parquet file's text column `text_field`, streaming."""
    path = Path(path)
    _pyarrow(path, "Parquet")
    with _format_errors(path, "Parquet", _PARQUET_FIX), contextlib.closing(_parquet_file(path)) as f:
        check_column(f"corpus file {path}", f.schema_arrow, text_field)
        for batch in f.iter_batches(batch_size=BATCH_ROWS, columns=[text_field], use_threads=False):
            yield from column_documents(batch.column(0))


# --- Arrow files and datasets' save_to_disk directories --------------------------------------

_ARROW_FIX = ("save it again (datasets' save_to_disk, pyarrow.ipc.new_file or new_stream), or "
              "give a file of another format the suffix of that format")


@contextlib.contextmanager
def _arrow_batches(path: Path) -> Iterator[tuple[Any, Iterator[Any]]]:
    """(schema, record batches) of an Arrow IPC file or stream (which one: from its first
    bytes), read from the file one batch at a time."""
    pa = _pyarrow(path, "Arrow")
    with _format_errors(path, "Arrow", _ARROW_FIX), pa.OSFile(str(path)) as source:
        if source.read(6) == b"ARROW1":  # the file format (Feather v2); else a stream
            source.seek(0)
            reader = pa.ipc.open_file(source)
            yield reader.schema, (reader.get_batch(i) for i in range(reader.num_record_batches))
        else:
            source.seek(0)
            reader = pa.ipc.open_stream(source)
            yield reader.schema, iter(reader)


def check_arrow(path: Path, text_field: str) -> bool:
    """Whether an Arrow file has rows; ValueError naming it if it is not Arrow or lacks a text
    column `text_field`. Reads the schema and batches up to the first with rows."""
    if path.stat().st_size == 0:
        _pyarrow(path, "Arrow")
        return False
    with _arrow_batches(path) as (schema, batches):
        check_column(f"corpus file {path}", schema, text_field)
        return any(batch.num_rows for batch in batches)


def arrow_documents(path: str | Path, text_field: str = "text") -> Iterator[Document]:
    """One document per row of an Arrow file's text column `text_field`, a batch at a time."""
    path = Path(path)
    with _arrow_batches(path) as (schema, batches):
        check_column(f"corpus file {path}", schema, text_field)
        index = schema.get_field_index(text_field)
        for batch in batches:
            yield from column_documents(batch.column(index))


def saved_dataset_files(directory: Path) -> list[Path] | None:
    """The Arrow files of a `datasets` `save_to_disk` directory, in its order; None if
    `directory` is not one. A DatasetDict's directory is a ValueError naming its splits."""
    if (directory / "dataset_dict.json").is_file():
        splits = sorted(p.name for p in directory.iterdir() if (p / "state.json").is_file())
        raise InputError(
            f"corpus directory {directory} holds a DatasetDict saved by datasets (splits: "
            f"{', '.join(splits) or 'none'}); name one split's directory, e.g. "
            f"{directory / (splits[0] if splits else 'train')}"
        )
    state = directory / "state.json"
    if not (state.is_file() and (directory / "dataset_info.json").is_file()):
        return None
    fix = "save the dataset again with save_to_disk"
    try:
        listed = json.loads(state.read_text("utf-8"))["_data_files"]
        files = [directory / f["filename"] for f in listed]
    except (ValueError, KeyError, TypeError) as err:
        raise InputError(f"{state} is not the state.json `datasets` writes ({err!r}); {fix}") from None
    missing = [f.name for f in files if not f.is_file()]
    if missing or not files:
        raise InputError(f"{state} lists data files that are not there "
                         f"({', '.join(missing) or 'none listed'}); {fix}")
    return files


# --- datasets objects ------------------------------------------------------------------------


def dataset_kind(obj: object) -> str | None:
    """"Dataset", "IterableDataset", "DatasetDict" or "IterableDatasetDict" for an object of
    the `datasets` package (recognised without importing it), else None."""
    for cls in type(obj).__mro__:
        if cls.__module__.split(".")[0] == "datasets" and cls.__name__ in _DATASET_KINDS:
            return cls.__name__
    return None


def check_dataset(dataset: Any, text_field: str) -> None:
    """ValueError unless `dataset` is one `datasets` dataset with a text column `text_field`
    (an IterableDataset of unknown columns is checked row by row as it is read)."""
    kind = dataset_kind(dataset)
    if kind in ("DatasetDict", "IterableDatasetDict"):
        splits = list(dataset)
        raise InputError(f"a datasets.{kind} (splits: {', '.join(splits) or 'none'}) holds several "
                         f"datasets; pass one split, e.g. dataset[{(splits or ['train'])[0]!r}]")
    features = dataset.features
    if features is None:  # an IterableDataset whose columns are known only when read
        return
    check_column(f"the datasets.{kind}", features.arrow_schema, text_field,
                 fix="text_field=NAME (--text-field NAME)")


def dataset_documents(dataset: Any, text_field: str = "text") -> Iterator[Document]:
    """One document per row of a `datasets` Dataset or IterableDataset's `text_field`: a
    Dataset `BATCH_ROWS` rows at a time as Arrow (its memory-mapped files are not copied), an
    IterableDataset row by row as it streams."""
    if dataset_kind(dataset) == "Dataset":
        column = dataset.select_columns([text_field]).with_format("arrow")
        for table in column.iter(batch_size=BATCH_ROWS):
            for chunk in table.column(0).chunks:
                yield from column_documents(chunk)
        return
    yield from _row_documents(dataset, text_field, "the datasets.IterableDataset")


def _row_documents(rows: Iterable[Any], text_field: str, what: str) -> Iterator[Document]:
    for i, row in enumerate(rows):
        if isinstance(row, dict) and row.get(text_field, "") is None:
            continue  # a null text, as in a column
        document = record_document(row, text_field, f"row {i} of {what}")
        if document:
            yield document
