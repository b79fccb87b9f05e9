"""Labelled text for sequence classification: JSON-lines or CSV files, splits, and the bundled
Shakespeare genre task.

A file holds one example per record with a `text`, an optional `text_pair` and a `label` (the
field names can be changed). Every problem is named with the file and line: a missing field, an
empty text, a record that does not parse.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import random
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bertjax.data.corpus import shakespeare_genres, shakespeare_speeches


@dataclasses.dataclass(frozen=True)
class Example:
    text: str
    text_pair: str | None
    label: str | None  # None in files to classify that carry no labels
    where: str  # "file:line", for messages


def read_examples(
    path: str | Path,
    *,
    text_field: str = "text",
    pair_field: str = "text_pair",
    label_field: str = "label",
    require_labels: bool = True,
) -> list[Example]:
    """Examples of a `.jsonl`/`.json` (one JSON object per line) or `.csv` (with a header) file;
    any other file is plain text, one example per non-empty line, without labels."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} does not exist")
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records = _json_lines(path)
    elif suffix == ".csv":
        records = _csv_rows(path)
    else:
        if require_labels:
            raise ValueError(f"{path}: labelled examples need a .jsonl or .csv file with a "
                             f"'{label_field}' field")
        records = [(f"{path}:{n}", {text_field: line})
                   for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
                   if line.strip()]
    examples = []
    for where, record in records:
        text = record.get(text_field)
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"{where}: no text in field '{text_field}' (fields: "
                             f"{', '.join(map(str, record)) or 'none'}); set --text-field")
        pair = record.get(pair_field)
        if pair is not None and (not isinstance(pair, str) or not pair.strip()):
            pair = None
        label = record.get(label_field)
        if label is None or str(label).strip() == "":
            if require_labels:
                raise ValueError(f"{where}: no label in field '{label_field}'; set --label-field")
            label = None
        examples.append(Example(text, pair, None if label is None else str(label).strip(), where))
    if not examples:
        raise ValueError(f"{path} holds no examples")
    return examples


def _json_lines(path: Path) -> list[tuple[str, dict]]:
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            raise ValueError(f"{path}:{n} is not a JSON object: {err}") from err
        if not isinstance(record, dict):
            raise ValueError(f"{path}:{n} is not a JSON object")
        out.append((f"{path}:{n}", record))
    return out


def _csv_rows(path: Path) -> list[tuple[str, dict]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        return [(f"{path}:{reader.line_num}", row) for row in reader]


def label_names(examples: Sequence[Example]) -> tuple[str, ...]:
    """The labels of `examples`, sorted: label id i is the i-th."""
    return tuple(sorted({e.label for e in examples if e.label is not None}))


def check_labels(examples: Sequence[Example], labels: Sequence[str], what: str) -> None:
    """Every label of `examples` must be one of `labels` (the training labels)."""
    unseen = [e for e in examples if e.label is not None and e.label not in labels]
    if unseen:
        names = sorted({e.label for e in unseen})
        raise ValueError(f"{what} has labels the model was not trained on: {', '.join(names)} (e.g. "
                         f"{unseen[0].where}); known labels: {', '.join(labels)}")


def split_examples(examples: Sequence[Example], fraction: float, seed: int
                   ) -> tuple[list[Example], list[Example]]:
    """(rest, held out): `fraction` of the examples, drawn at random with `seed`."""
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"the validation fraction must be in (0, 1), got {fraction}")
    order = list(range(len(examples)))
    random.Random(seed).shuffle(order)
    n = max(1, round(fraction * len(examples)))
    if n >= len(examples):
        raise ValueError(f"{len(examples)} examples are too few to hold {fraction:.0%} out")
    held = set(order[:n])
    return ([e for i, e in enumerate(examples) if i not in held],
            [e for i, e in enumerate(examples) if i in held])


def majority_baseline(train: Sequence[Example], test: Sequence[Example]) -> tuple[str, float]:
    """The most frequent training label and the accuracy of always predicting it on `test`."""
    label = Counter(e.label for e in train).most_common(1)[0][0]
    return label, sum(e.label == label for e in test) / len(test)


# --- the bundled task: which genre folder of the plays a speech comes from ------------------------

GENRE_TASK = "shakespeare-genres"
# Whole plays held out, one per genre each (test first: the two plays pre-training held out).
GENRE_HELD_OUT = {
    "test": ("twelfth-night", "hamlet", "henry-v", "measure-for-measure", "julius-caesar",
             "the-tempest"),
    "validation": ("as-you-like-it", "macbeth", "richard-ii", "troilus-and-cressida",
                   "coriolanus", "cymbeline"),
}
GENRE_MIN_WORDS = 20  # shorter speeches ("My lord?") say nothing about the genre


def genre_examples(split: str, *, per_genre: int | None = None, seed: int = 0) -> list[Example]:
    """Speeches of at least `GENRE_MIN_WORDS` words labelled with their play's genre; "test" and
    "validation" are whole held-out plays, "train" the rest. `per_genre` caps each genre's
    examples (drawn with `seed`), which also balances the training set."""
    genres = shakespeare_genres()
    if split == "train":
        held = {p for plays in GENRE_HELD_OUT.values() for p in plays}
        plays = [p for p in genres if p not in held]
    elif split in GENRE_HELD_OUT:
        plays = list(GENRE_HELD_OUT[split])
    else:
        raise ValueError(f"unknown split {split!r}; choose train, validation or test")
    by_genre: dict[str, list[Example]] = {}
    for play in plays:
        for n, speech in enumerate(shakespeare_speeches(play), 1):
            if len(speech.split()) >= GENRE_MIN_WORDS:
                example = Example(speech, None, genres[play], f"{play} speech {n}")
                by_genre.setdefault(genres[play], []).append(example)
    out = []
    for genre in sorted(by_genre):
        examples = by_genre[genre]
        if per_genre is not None and len(examples) > per_genre:
            examples = random.Random(f"{seed}-{genre}").sample(examples, per_genre)
        out.extend(examples)
    return out
