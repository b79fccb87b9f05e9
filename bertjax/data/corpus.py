"""Corpora as streams of documents: what `--corpus SPEC` names, and `corpus_documents`.

A document is a list of sentences (non-empty strings). Every reader is a generator, so memory
never grows with the corpus. The readers live by format (`bertjax.data.shakespeare` and
`bertjax.data.formats`); every name they had here is still importable from here.

`corpus_documents(specs)` reads, one after the other:

* `"shakespeare"`: the bundled plays (`split` chooses train, eval or all);
* a file, read by its name (`bertjax.data.formats.files`): `.txt` (and any other name) BERT text,
  `.jsonl` JSON lines, `.json` one JSON document, `.parquet` Parquet, `.arrow` Arrow; the text
  formats also compressed (`.gz`, `.bz2`, `.zst`, e.g. `wiki.jsonl.zst`);
* a directory: a dataset `datasets` saved there (`save_to_disk`), else its files with those
  suffixes, recursively, sorted (a saved dataset inside it is read whole, in its own order);
* a glob (quoted, so that the shell leaves it): the files it matches, sorted;
* a `datasets.Dataset` or `IterableDataset` (its `text_field` column);
* several of these, in a list or tuple;
* any other iterable (a generator, a list of lists, ...): the corpus itself, each item a text (a
  `str`, split into sentences), a document (a list of sentence strings) or a record (a dict with
  a `text_field` string). A list or tuple of strings is a list of specs, never of texts: pass
  `iter(texts)` or `iterable_documents(texts)` for texts.

`text_field` is the field of JSON records and the column of Parquet, Arrow and `datasets` rows
that holds a document's text.

Bad input is found before any work where it can be: `corpus_documents` resolves every spec and
checks the start of every file when it is called (the first 64 KiB of text, decompressed; the
footer of a Parquet file; the schema of an Arrow file; the columns of a Dataset; the first item of
an iterable). A missing path is a FileNotFoundError; a glob matching nothing, a directory without
corpus files, a binary, corrupt, non-UTF-8 or empty file, a missing or non-text column and a JSON
record without the text field are ValueErrors naming the file (and line) and what to do; a format
whose optional package is missing says how to install it (`pip install 'bertjax[corpora]'`).
"""

from __future__ import annotations

import glob
import itertools
import os
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path

from bertjax.data.formats import MissingDependencyError
from bertjax.data.formats.columnar import (
    arrow_documents,
    check_dataset,
    dataset_documents,
    dataset_kind,
    parquet_documents,
    saved_dataset_files,
)
from bertjax.data.formats.files import (
    CORPUS_SUFFIXES,
    SUFFIXES_HINT,
    TEXT_SUFFIXES,
    check_corpus_file,
    file_documents,
    is_corpus_file,
)
from bertjax.data.formats.iterables import item_document, iterable_documents
from bertjax.data.formats.text import (
    BOM,
    FORMAT_HINT,
    Document,
    check_text_file,
    json_documents,
    jsonl_documents,
    split_sentences,
    text_documents,
)
from bertjax.data.shakespeare import (
    EVAL_PLAYS,
    SHAKESPEARE,
    SPLITS,
    parse_play,
    play_scenes,
    shakespeare_documents,
    shakespeare_genres,
    shakespeare_play_files,
    shakespeare_plays,
    shakespeare_scenes,
    shakespeare_speech_documents,
    shakespeare_speeches,
    spoken_scenes,
)
from bertjax.errors import InputError

__all__ = [
    "BOM", "CORPUS_HELP", "CORPUS_SUFFIXES", "EVAL_PLAYS", "SHAKESPEARE", "SPLITS", "TEXT_SUFFIXES",
    "Document",
    "MissingDependencyError", "arrow_documents", "check_text_file", "corpus_documents",
    "dataset_documents", "iterable_documents", "json_documents", "jsonl_documents",
    "parquet_documents", "parse_play", "play_scenes", "resolve_corpus_files",
    "shakespeare_documents", "shakespeare_genres", "shakespeare_play_files", "shakespeare_plays",
    "shakespeare_scenes", "shakespeare_speech_documents", "shakespeare_speeches",
    "split_sentences", "spoken_scenes", "text_documents",
]

# What a corpus option takes (`bertjax vocab|data --corpus`, `bertjax bench data --corpus`).
CORPUS_HELP = ("'shakespeare' (default), files, directories or globs (quoted) of UTF-8 BERT-format "
               "text (one sentence per line, blank line between documents), JSON lines (.jsonl: "
               "one record per line), JSON (.json: one document, a list of records or one record; "
               "read whole), Parquet (.parquet) or Arrow (.arrow; a directory `datasets` saved "
               "with save_to_disk); text, JSON lines and JSON also compressed (.gz, .bz2, .zst, "
               "e.g. wiki.jsonl.zst); a directory gives its files of these suffixes. Parquet, "
               "Arrow and .zst need pip install 'bertjax[corpora]'")

Source = Callable[[], Iterator[Document]]  # the documents of one checked spec, read when called



def corpus_paths(specs: object) -> list[Path]:
    """The paths a corpus given as specs reads, without reading them: each spec's file or
    directory, a glob's matches. Documents given in Python, datasets, 'shakespeare' and paths
    that do not exist add none (what an output must keep out of: `bertjax.common.input_overlap`)."""
    if isinstance(specs, str | os.PathLike):
        specs = [specs]
    if not isinstance(specs, list | tuple):
        return []
    paths: list[Path] = []
    for spec in specs:
        if not isinstance(spec, str | os.PathLike) or str(spec) == SHAKESPEARE:
            continue
        if any(c in str(spec) for c in "*?["):
            paths += [Path(p) for p in glob.glob(str(spec), recursive=True)]
        elif os.path.lexists(spec):
            paths.append(Path(spec))
    return paths


def resolve_corpus_files(spec: str | os.PathLike, *, text_field: str = "text") -> list[Path]:
    """Files named by a path, a directory (recursively) or a glob; in reading order, never empty.

    Each file's start is checked (`check_corpus_file`): a file its reader cannot read, a named
    file that is empty, or a directory or glob whose files are all empty is a ValueError naming
    it (empty files among others are skipped); a missing path is a FileNotFoundError."""
    spec = str(spec)
    if any(c in spec for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True)
                       if Path(p).is_file() and not _is_saved_metadata(Path(p)))
        if not files:
            raise InputError(f"corpus glob {spec!r} matches no files; check the pattern (and "
                             "quote it, so that the shell does not expand it)")
        return _with_text(files, f"every file corpus glob {spec!r} matches", text_field)
    path = Path(spec)
    if path.is_dir():
        saved = saved_dataset_files(path)
        if saved is not None:
            return _with_text(saved, f"the dataset saved in {path}", text_field)
        files = _directory_files(path)
        if not files:
            raise InputError(
                f"corpus directory {path} holds no {SUFFIXES_HINT} files and no dataset saved "
                f"by datasets; put the corpus in such files ({FORMAT_HINT}) or name the files"
            )
        return _with_text(files, f"every corpus file in corpus directory {path}", text_field,
                          directory=path)
    if path.is_file():
        return _with_text([path], f"corpus file {path}", text_field)
    texts = " (a list holds specs; to read texts given in Python, pass iter(texts))" if (
        len(spec.split()) > 1) else ""
    raise FileNotFoundError(
        f"corpus {spec!r} does not exist; pass an existing file, directory or glob, "
        f"or {SHAKESPEARE!r}{texts}"
    )


def _directory_files(root: Path) -> list[Path]:
    """A directory's corpus files, sorted by path; a dataset saved in a subdirectory stands at its
    directory's place, its files in its own order (and its .json metadata is not read)."""
    found: list[tuple[Path, list[Path]]] = []
    for directory, subdirectories, names in os.walk(root):
        here = Path(directory)
        saved = saved_dataset_files(here) if here != root else None
        if saved is not None:
            found.append((here, saved))
            subdirectories.clear()
            continue
        found.extend((here / n, [here / n]) for n in names
                     if is_corpus_file(here / n) and (here / n).is_file())
    return [file for _, files in sorted(found) for file in files]


def _is_saved_metadata(path: Path) -> bool:
    """Whether `path` is the state.json or dataset_info.json of a saved dataset (no corpus)."""
    return (path.name in ("state.json", "dataset_info.json")
            and saved_dataset_files(path.parent) is not None)


def _with_text(files: list[Path], what: str, text_field: str,
               directory: Path | None = None) -> list[Path]:
    """`files` without the empty ones (each checked); ValueError naming `what` if all are. In a
    `directory` of several kinds of files, one that cannot be read as a corpus may be no part of
    it (a config.json beside the texts): the error says how to leave it out."""
    kept = []
    for file in files:
        try:
            if check_corpus_file(file, text_field):
                kept.append(file)
        except ValueError as err:
            raise _hint_other_files(err, file, files, directory) from None
    if not kept:
        raise InputError(f"{what} is empty: no document (no rows, or nothing but white space); "
                         f"give text: {FORMAT_HINT}")
    return kept


def corpus_documents(
    specs: object,
    *,
    text_field: str = "text",
    split: str = "train",
    eval_plays: Sequence[str] = EVAL_PLAYS,
) -> Iterator[Document]:
    """Documents of one or several corpora (see the module docstring); `split` is Shakespeare's.

    Every spec is resolved and every file's start checked now (`resolve_corpus_files`), so a
    typo or a wrong file fails at this call, before any work; the documents are read lazily."""
    sources = [_source(spec, text_field, split, eval_plays) for spec in _specs(specs)]
    return _documents(sources)


class _Items:
    """An iterable given as the corpus itself (its first item already taken, to check it)."""

    def __init__(self, first: object, rest: Iterator[object]) -> None:
        self.first, self.rest = first, rest


def _specs(specs: object) -> list[object]:
    """`specs` as a list of specs (paths, "shakespeare", datasets, or one `_Items`)."""
    if isinstance(specs, str | os.PathLike) or dataset_kind(specs):
        return [specs]
    if isinstance(specs, dict):
        raise InputError("a corpus cannot be one dict; pass records as an iterable of dicts, "
                         "e.g. [record]")
    if not isinstance(specs, Iterable):
        raise InputError(f"a corpus of type {type(specs).__name__} cannot be read; pass a path, "
                         f"glob or {SHAKESPEARE!r}, a datasets.Dataset, or an iterable of texts")
    items = iter(specs)
    first = next(items, _Items)
    if first is _Items:
        what = "no corpus given" if isinstance(specs, list | tuple) else "the corpus iterable is empty"
        raise InputError(f"{what}; pass --corpus SPEC (a file, directory, glob or "
                         f"{SHAKESPEARE!r}) or documents")
    is_spec = isinstance(first, os.PathLike) or dataset_kind(first)
    if is_spec or (isinstance(specs, list | tuple) and isinstance(first, str)):
        return [first, *items]
    return [_Items(first, items)]


def _source(spec: object, text_field: str, split: str, eval_plays: Sequence[str]) -> Source:
    """Check one spec now; what reads its documents later."""
    if isinstance(spec, _Items):
        _check_first_item(spec.first, text_field)
        return lambda: iterable_documents(itertools.chain([spec.first], spec.rest), text_field)
    if dataset_kind(spec):
        check_dataset(spec, text_field)
        return lambda: dataset_documents(spec, text_field)
    if not isinstance(spec, str | os.PathLike):
        raise InputError(f"corpus spec {spec!r} is a {type(spec).__name__}; in a list, give paths, "
                         f"globs, {SHAKESPEARE!r} or datasets (several corpora), or pass the "
                         "documents themselves as the corpus, not in a list of specs")
    if str(spec) == SHAKESPEARE:
        shakespeare_plays(split, eval_plays)  # the package is installed, the split known
        return lambda: shakespeare_documents(split, eval_plays)
    files = resolve_corpus_files(spec, text_field=text_field)
    directory = Path(spec) if Path(spec).is_dir() else None
    return lambda: _files_documents(files, text_field, directory)


def _files_documents(files: list[Path], text_field: str, directory: Path | None
                     ) -> Iterator[Document]:
    for file in files:
        try:
            yield from file_documents(file, text_field)
        except ValueError as err:
            raise _hint_other_files(err, file, files, directory) from None


def _hint_other_files(err: ValueError, file: Path, files: list[Path],
                      directory: Path | None) -> ValueError:
    """`err` (about `file`), saying how to leave `file` out when it is one of several kinds of
    files in a corpus `directory`: a config.json beside the texts is no part of the corpus."""
    others = sorted({f.suffix for f in files if f.suffix != file.suffix})
    if directory is None or not others:
        return err
    glob = shlex.quote(f"{directory}/*{others[0]}")
    return type(err)(f"{err}; if {file.name} is no part of the corpus, name the corpus files "
                      f"instead of the directory (e.g. {glob}) or move {file.name} out")


def _check_first_item(first: object, text_field: str) -> None:
    """The first item of an iterable corpus is a text, document or record, and no path."""
    item_document(first, text_field, 0)
    if isinstance(first, str) and (first == SHAKESPEARE or (
            len(first.split()) == 1 and len(first) < 4096 and os.path.exists(first))):
        raise InputError(
            f"the corpus is an iterable of texts, but its first text {first!r} names a corpus; "
            "to read corpora by name pass a list of them (list(specs)); to read these strings as "
            "texts pass iterable_documents(texts)"
        )


def _documents(sources: list[Source]) -> Iterator[Document]:
    for source in sources:
        yield from source()
