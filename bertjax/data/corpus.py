"""Corpora as streams of documents: what `--corpus SPEC` names, and `corpus_documents`.

A document is a list of sentences (non-empty strings). Every reader is a generator, so memory
never grows with the corpus. The readers live by format (`bertjax.data.shakespeare`,
`bertjax.data.formats.text`); every name they had here is still importable from here.

* `corpus_documents(spec)`: `"shakespeare"`, a file, a directory (its `*.txt`, `*.jsonl`, `*.json`
  files, recursively, sorted) or a glob; `.jsonl` files are JSON lines, `.json` files one JSON
  document, others BERT text.

Bad input is found before any work where it can be: `corpus_documents` resolves every spec and
checks the start of every file when it is called. A missing path is a FileNotFoundError; a glob
matching nothing, a directory without corpus files, a binary, non-UTF-8 or empty file, and a JSON
record without the text field are ValueErrors naming the file (and line) and what to do.
"""

from __future__ import annotations

import glob
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

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
    shakespeare_speeches,
    spoken_scenes,
)

__all__ = [
    "BOM", "EVAL_PLAYS", "SHAKESPEARE", "SPLITS", "TEXT_SUFFIXES", "Document", "check_text_file",
    "corpus_documents", "json_documents", "jsonl_documents", "parse_play", "play_scenes",
    "resolve_corpus_files", "shakespeare_documents", "shakespeare_genres", "shakespeare_play_files",
    "shakespeare_plays", "shakespeare_scenes", "shakespeare_speeches", "split_sentences",
    "spoken_scenes", "text_documents",
]

TEXT_SUFFIXES = (".txt", ".jsonl", ".json")


def resolve_corpus_files(spec: str | os.PathLike) -> list[Path]:
    """Files named by a path, a directory (recursively) or a glob; sorted, never empty.

    Each file's start is checked (`check_text_file`): a binary or non-UTF-8 file, a named file
    that is empty, or a directory or glob whose files are all empty is a ValueError naming it
    (empty files among others are skipped); a missing path is a FileNotFoundError."""
    spec = str(spec)
    if any(c in spec for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not files:
            raise ValueError(f"corpus glob {spec!r} matches no files; check the pattern (and "
                             "quote it, so that the shell does not expand it)")
        return _with_text(files, f"every file corpus glob {spec!r} matches")
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if not files:
            raise ValueError(
                f"corpus directory {path} holds no {'/'.join(TEXT_SUFFIXES)} files; put the "
                f"corpus in such files ({FORMAT_HINT}) or name the files"
            )
        return _with_text(files, f"every {'/'.join(TEXT_SUFFIXES)} file in corpus directory {path}")
    if path.is_file():
        return _with_text([path], f"corpus file {path}")
    raise FileNotFoundError(
        f"corpus {spec!r} does not exist; pass an existing file, directory or glob, "
        f"or {SHAKESPEARE!r}"
    )


def _with_text(files: list[Path], what: str) -> list[Path]:
    """`files` without the empty ones (each checked); ValueError naming `what` if all are."""
    kept = [f for f in files if check_text_file(f)]
    if not kept:
        raise ValueError(f"{what} is empty: no document (nothing but white space); give text: "
                         f"{FORMAT_HINT}")
    return kept


def corpus_documents(
    specs: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    text_field: str = "text",
    split: str = "train",
    eval_plays: Sequence[str] = EVAL_PLAYS,
) -> Iterator[Document]:
    """Documents of one or several corpora (see the module docstring); `split` is Shakespeare's.

    Every spec is resolved and every file's start checked now (`resolve_corpus_files`), so a
    typo or a wrong file fails at this call, before any work; the documents are read lazily."""
    specs = [specs] if isinstance(specs, str | os.PathLike) else list(specs)
    if not specs:
        raise ValueError(f"no corpus given; pass --corpus SPEC (a file, directory, glob or "
                         f"{SHAKESPEARE!r})")
    sources: list[str | list[Path]] = []
    for spec in specs:
        if str(spec) == SHAKESPEARE:
            shakespeare_plays(split, eval_plays)  # the package is installed, the split known
            sources.append(SHAKESPEARE)
        else:
            sources.append(resolve_corpus_files(spec))
    return _documents(sources, text_field, split, eval_plays)


def _documents(sources: list[str | list[Path]], text_field: str, split: str,
               eval_plays: Sequence[str]) -> Iterator[Document]:
    for source in sources:
        if source == SHAKESPEARE:
            yield from shakespeare_documents(split, eval_plays)
            continue
        for file in source:
            if file.suffix == ".jsonl":
                yield from jsonl_documents(file, text_field)
            elif file.suffix == ".json":
                yield from json_documents(file, text_field)
            else:
                yield from text_documents(file)
