"""Multiple-choice examples (SWAG-style): a context, two or more candidate continuations and the
index of the right one, one JSON object per line: `{"context": "...", "choices": ["...", ...],
"label": 0}` (field names can be changed). Every problem is a ValueError naming the file and line.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from bertjax.common.files import read_text
from bertjax.data.records import json_records
from bertjax.errors import InputError

MAX_CHOICES = 16  # a limit on C in the (B, C, S) inputs: each choice is a whole sequence


@dataclasses.dataclass(frozen=True)
class ChoiceExample:
    context: str
    choices: tuple[str, ...]
    label: int  # index of the right choice
    where: str  # "file:line", for messages


def read_choices(
    path: str | Path,
    *,
    what: str = "file",
    context_field: str = "context",
    choices_field: str = "choices",
    label_field: str = "label",
    max_choices: int = MAX_CHOICES,
) -> list[ChoiceExample]:
    """The examples of a `.jsonl` file. Refused, naming the file and line: a record that is not
    a JSON object, an empty context, fewer than 2 or more than `max_choices` choices, an empty
    choice, a label that is not an integer index of a choice; and a file with no examples."""
    path = Path(path)
    if path.suffix.lower() not in (".jsonl", ".json"):
        raise InputError(f"{what} {path}: multiple-choice examples are JSON lines (.jsonl) with "
                         f"'{context_field}', '{choices_field}' and '{label_field}'")
    out = []
    for where, record in json_records(path, read_text(path, what)):
        context = record.get(context_field)
        if not isinstance(context, str) or not context.strip():
            raise InputError(f"{where}: no text in field '{context_field}'")
        choices = record.get(choices_field)
        if not isinstance(choices, list) or not 2 <= len(choices) <= max_choices:
            raise InputError(f"{where}: field '{choices_field}' must be a list of 2 to "
                             f"{max_choices} strings")
        if not all(isinstance(c, str) and c.strip() for c in choices):
            raise InputError(f"{where}: every choice in '{choices_field}' must be non-empty text")
        label = record.get(label_field)
        if isinstance(label, bool) or not isinstance(label, int) or not 0 <= label < len(choices):
            raise InputError(f"{where}: field '{label_field}' must be the index of the right "
                             f"choice, an integer from 0 to {len(choices) - 1}; got {label!r}")
        out.append(ChoiceExample(context, tuple(choices), label, where))
    if not out:
        raise InputError(f"{what} {path} holds no examples")
    return out
