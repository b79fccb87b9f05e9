"""Labelled text for sequence classification: JSON-lines or CSV files, splits, and the bundled
Shakespeare genre task.

A file holds one example per record with a `text`, an optional `text_pair` and a `label` (the
field names can be changed). Every problem is named with the file and line: a missing field, an
empty text, a record that does not parse.
"""

from __future__ import annotations

import dataclasses
import json
import random
from collections import Counter
from collections.abc import Callable, Hashable, Sequence
from pathlib import Path
from typing import TypeVar

from bertjax.common.files import read_text
from bertjax.data.corpus import shakespeare_genres, shakespeare_speeches
from bertjax.data.records import csv_records, json_records
from bertjax.errors import InputError

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class Example:
    text: str
    text_pair: str | None
    label: str | None  # the label's name (an integer label as its digits); None: unlabelled
    where: str  # "file:line", for messages


def read_examples(
    path: str | Path,
    *,
    text_field: str = "text",
    pair_field: str = "text_pair",
    label_field: str = "label",
    require_labels: bool = True,
    what: str = "file",
) -> list[Example]:
    """Examples of a `.jsonl`/`.json` (one JSON object per line) or `.csv` (with a header) file;
    any other file is plain text, one example per non-empty line, without labels.

    Labels are strings or integers, one type per file (a CSV's are strings; a JSON-lines file's
    keep their JSON type, so `1` and `"1"` are not mixed, and a float, a boolean, a list or an
    object is refused). Without `require_labels`, every example has a label or none has. Every
    problem is a ValueError naming the file (as `what`, e.g. "--train") or the file and line."""
    path = Path(path)
    content = read_text(path, what)
    suffix = path.suffix.lower()
    if suffix in (".jsonl", ".json"):
        records = json_records(path, content)
    elif suffix == ".csv":
        records = csv_records(path, content)
        _check_header(path, records, text_field, label_field)
    else:
        if require_labels:
            raise InputError(f"{what} {path}: labelled examples need a .jsonl or .csv file with a "
                             f"'{label_field}' field")
        records = [(f"{path}:{n}", {text_field: line})
                   for n, line in enumerate(content.splitlines(), 1) if line.strip()]
    labels = _LabelType(label_field)
    examples = []
    for where, record in records:
        text = _text(record, text_field, where, "--text-field")
        pair = record.get(pair_field)
        if pair is not None and not isinstance(pair, str):
            raise InputError(f"{where}: field '{pair_field}' is {_json_type(pair)}, not text; "
                             "give the second text as a string (or set --pair-field)")
        label = labels.read(record.get(label_field), where)
        if label is None and require_labels:
            if label_field in record:  # there, but null or blank: the field is the right one
                raise InputError(f"{where}: the label in field '{label_field}' is "
                                 f"{_empty(record[label_field])}; give this example its label, "
                                 "or leave the example out")
            raise InputError(f"{where}: no label in field '{label_field}' (fields: "
                             f"{_fields(record)}); set --label-field")
        examples.append(Example(text, pair if pair and pair.strip() else None, label, where))
    if not examples:
        raise InputError(f"{what} {path} holds no examples; give one example per line")
    _all_or_none_labelled(examples, label_field)
    return examples


def _check_header(path: Path, records: list[tuple[str, dict]], text_field: str,
                  label_field: str) -> None:
    """A CSV file whose first row names neither field: a file without a header row, whose first
    example was read as one."""
    header = list(records[0][1]) if records else []
    if header and text_field not in header and label_field not in header:
        raise InputError(
            f"{path}:1: the first row ({', '.join(header)}) was read as the header, and it names "
            f"no '{text_field}' or '{label_field}' field: a CSV file's first row names its "
            f"fields; add a header row ({text_field},{label_field}) above the examples, or set "
            "--text-field and --label-field to the names it has")


def _text(record: dict, field: str, where: str, option: str) -> str:
    text = record.get(field)
    if text is not None and not isinstance(text, str):
        raise InputError(f"{where}: field '{field}' is {_json_type(text)}, not text; give the "
                         f"text as a string (or set {option})")
    if field in record and (text is None or not text.strip()):
        raise InputError(f"{where}: the text in field '{field}' is {_empty(text)}; give this "
                         "example its text, or leave the example out")
    if text is None:
        raise InputError(f"{where}: no text in field '{field}' (fields: {_fields(record)}); "
                         f"set {option}")
    return text


def _empty(value: object) -> str:
    """How a missing value that is present is named: null (JSON), or empty."""
    return "null" if value is None else "empty"


def _fields(record: dict) -> str:
    return ", ".join(str(k) for k in record if k is not None) or "none"


def _json_type(value: object) -> str:
    """How a JSON value is named in messages: "a float (0.5)", "a list", ..."""
    if isinstance(value, bool):
        return f"a boolean ({json.dumps(value)})"
    if isinstance(value, (int, float)):
        return f"{'an integer' if isinstance(value, int) else 'a float'} ({value!r})"
    if isinstance(value, str):
        return "a string"
    return {list: "a list", dict: "an object"}.get(type(value), type(value).__name__)  # type: ignore[call-overload]


class _LabelType:
    """Checks each label of one file: a string or an integer, the same type throughout."""

    def __init__(self, field: str) -> None:
        self.field = field
        self.first: tuple[type, str] | None = None  # the type of the first label, and where

    def read(self, value: object, where: str) -> str | None:
        """The label's name, or None if the record has none (missing, null or blank)."""
        if value is None or (isinstance(value, str) and not value.strip()):
            return None
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            fix = (f"write {int(value)} or \"{value}\"" if isinstance(value, float)
                   and value.is_integer() else 'e.g. "positive" or 1')
            raise InputError(f"{where}: the label in field '{self.field}' is "
                             f"{_json_type(value)}; labels are strings or integers ({fix})")
        kind = type(value)
        if self.first is None:
            self.first = (kind, where)
        elif kind is not self.first[0]:
            names = {str: "a string", int: "an integer"}
            raise InputError(f"{where}: the label {value!r} is {names[kind]} but the label at "
                             f"{self.first[1]} is {names[self.first[0]]}; use one type of label "
                             "per file (all strings or all integers)")
        return value.strip() if isinstance(value, str) else str(value)


def _all_or_none_labelled(examples: Sequence[Example], field: str) -> None:
    labelled = next((e for e in examples if e.label is not None), None)
    unlabelled = next((e for e in examples if e.label is None), None)
    if labelled is not None and unlabelled is not None:
        raise InputError(f"{unlabelled.where}: no label in field '{field}', though "
                         f"{labelled.where} has one; label every example or none")


def label_names(examples: Sequence[Example]) -> tuple[str, ...]:
    """The labels of `examples`, sorted (integer labels by value: 2 before 10): label id i is the
    i-th."""
    names = {e.label for e in examples if e.label is not None}
    if all(_is_integer(n) for n in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


def _is_integer(name: str) -> bool:
    """Whether `name` is an integer's own spelling ("7", "-1"; not "07" or "1.0")."""
    try:
        return str(int(name)) == name
    except ValueError:
        return False


def check_labels(examples: Sequence[Example], labels: Sequence[str], what: str) -> None:
    """Every label of `examples` must be one of `labels` (the training labels)."""
    unseen = [e for e in examples if e.label is not None and e.label not in labels]
    if unseen:
        names = sorted({str(e.label) for e in unseen})
        raise InputError(f"{what} has labels the model was not trained on: {', '.join(names)} (e.g. "
                         f"{unseen[0].where}); known labels: {', '.join(labels)}")


def split_examples(examples: Sequence[T], fraction: float, seed: int,
                   group: Callable[[T], Hashable] | None = None, unit: str = "group"
                   ) -> tuple[list[T], list[T]]:
    """(rest, held out): `fraction` of the examples, drawn at random with `seed`, in their order.

    With `group`, examples of one group stay together (questions about one context), so that
    nothing held out was seen in training through its neighbours: groups are taken in random
    order, each that still fits within the fraction, so at most the fraction is held out (fewer
    when the groups do not add up to it) and, when every group is larger, the first smallest
    one. `unit` names a group in errors.
    """
    if not 0.0 < fraction < 1.0:
        raise InputError(f"the validation fraction must be in (0, 1), got {fraction}")
    n = max(1, round(fraction * len(examples)))
    if n >= len(examples):
        raise InputError(f"{len(examples)} examples are too few to hold {fraction:.0%} out")
    members: dict[Hashable, list[int]] = {}
    for i, e in enumerate(examples):
        members.setdefault(group(e) if group is not None else i, []).append(i)
    order = list(members)
    random.Random(seed).shuffle(order)
    held: list[int] = []
    for key in order:
        if len(held) + len(members[key]) <= n:
            held += members[key]
    if not held:  # every group is larger than the fraction
        held = members[min(order, key=lambda k: len(members[k]))]
    if len(held) == len(examples):
        raise InputError(f"{len(examples)} examples are all about one {unit}: none can be held "
                         f"out a {unit} at a time")
    chosen = set(held)
    return ([e for i, e in enumerate(examples) if i not in chosen],
            [e for i, e in enumerate(examples) if i in chosen])


def majority_baseline(train: Sequence[Example], test: Sequence[Example]) -> tuple[str, float]:
    """The most frequent training label and the accuracy of always predicting it on `test`."""
    label = str(Counter(e.label for e in train).most_common(1)[0][0])
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
        raise InputError(f"unknown split {split!r}; choose train, validation or test")
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
