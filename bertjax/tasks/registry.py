"""The fine-tuning tasks by name, for the command line and for Python alike: which kinds there
are, how each reads its examples from a file, the bundled Shakespeare tasks with their data, how
a validation share is held out, and the `Task` (with its labels) a kind fine-tunes with.

    train = read_task_examples("token-classification", "train.conll")
    task, labels = make_task("token-classification", train)
    model, tokenizer = bertjax.from_pretrained(path, model_cls=task.model_class, id2label=labels)

Importing this module imports no framework (the command line lists the kinds in its `--help`);
the task classes load when a task is made.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bertjax.data.labelled import GENRE_TASK
from bertjax.data.scene_tasks import CHARACTERS_TASK, NEXT_LINE_TASK, SPEAKERS_TASK
from bertjax.errors import InputError

if TYPE_CHECKING:
    from bertjax.tasks.task import Task

__all__ = ["BUNDLED", "KINDS", "Fields", "TaskOptions", "bundled_examples", "hold_out",
           "kind_of", "make_task", "read_task_examples"]

KINDS = ("classification", "token-classification", "question-answering", "multiple-choice")
BUNDLED = {GENRE_TASK: "classification", CHARACTERS_TASK: "token-classification",
           SPEAKERS_TASK: "question-answering", NEXT_LINE_TASK: "multiple-choice"}  # -> kind


@dataclasses.dataclass(frozen=True)
class Fields:
    """Where a file's records keep each part of an example (JSON lines or CSV columns)."""

    text: str = "text"
    pair: str = "text_pair"
    label: str = "label"
    tokens: str = "tokens"  # tagged .jsonl: the words
    tags: str = "tags"  # tagged .jsonl: their BIO tags
    context: str = "context"  # multiple choice
    choices: str = "choices"  # multiple choice


@dataclasses.dataclass(frozen=True)
class TaskOptions:
    """The settings of the tasks that have any (the others ignore them)."""

    label_all_pieces: bool = False  # token classification: every piece of a word, not its first
    doc_stride: int | None = None  # question answering: pieces two windows share (None: default)
    max_query_length: int = 64
    n_best: int = 20
    max_answer_length: int = 30
    null_threshold: float = 0.0  # trained on SQuAD v2.0: "" beats a span by more than this


def kind_of(name: str) -> str:
    """The kind of a task name: itself for a kind, the kind of a bundled task."""
    if name in KINDS:
        return name
    if name in BUNDLED:
        return BUNDLED[name]
    raise InputError(f"unknown task {name!r}; choose one of {', '.join((*KINDS, *BUNDLED))}")


def read_task_examples(kind: str, path: str | Path, *, what: str = "file",
                       fields: Fields = Fields()) -> list:  # noqa: B008 - frozen
    """The examples of `kind` in one file: labelled text (JSON lines or CSV), tagged sentences
    (CoNLL or JSON lines), SQuAD JSON or multiple-choice JSON lines."""
    kind = kind_of(kind)
    try:
        return _read_kind(kind, path, what, fields)
    except ValueError as err:
        other = guess_kind(path)
        if other is None or other == kind:
            raise
        raise InputError(f"{err}; {path} looks like {other} data: pass --task {other}") from None


def _read_kind(kind: str, path: str | Path, what: str, fields: Fields) -> list:
    from bertjax.data.choices import read_choices
    from bertjax.data.labelled import read_examples
    from bertjax.data.squad import read_squad
    from bertjax.data.tagging import read_tagged

    if kind == "token-classification":
        return read_tagged(path, what=what, tokens_field=fields.tokens, tags_field=fields.tags)
    if kind == "question-answering":
        return read_squad(path, what=what)
    if kind == "multiple-choice":
        return read_choices(path, what=what, context_field=fields.context,
                            choices_field=fields.choices, label_field=fields.label)
    return read_examples(path, what=what, text_field=fields.text, pair_field=fields.pair,
                         label_field=fields.label)


# the fields (by their default names) that say which kind of task a JSON record is made for
KIND_FIELDS = (("question-answering", {"data"}), ("multiple-choice", {"context", "choices"}),
               ("token-classification", {"tokens", "tags"}), ("classification", {"text"}))


def guess_kind(path: str | Path) -> str | None:
    """The kind of task a JSON or JSON-lines file's first record looks made for (a SQuAD file's
    `data`, a multiple-choice record's `context` and `choices`, ...); None if it is none of
    them, or no JSON. For messages only: the user's --task decides."""
    try:
        text = Path(path).read_text(encoding="utf-8")
        try:
            record = json.loads(text)
        except ValueError:
            record = json.loads(next(line for line in text.splitlines() if line.strip()))
    except (OSError, ValueError, StopIteration):
        return None
    if not isinstance(record, dict):
        return None
    return next((kind for kind, names in KIND_FIELDS if names <= record.keys()), None)


def bundled_examples(name: str, *, per_genre: int | None = 600, seed: int = 0
                     ) -> tuple[list, list, list]:
    """(train, validation, test) of a bundled task, held out by whole plays."""
    from bertjax.data import scene_tasks
    from bertjax.data.labelled import genre_examples

    if name not in BUNDLED:
        raise InputError(f"{name!r} is no bundled task; choose one of {', '.join(BUNDLED)}")
    if name == GENRE_TASK:
        return (genre_examples("train", per_genre=per_genre, seed=seed),
                genre_examples("validation"), genre_examples("test"))
    build: Any = {CHARACTERS_TASK: scene_tasks.character_tagging,
             SPEAKERS_TASK: scene_tasks.speaker_questions,
             NEXT_LINE_TASK: scene_tasks.next_line_choices}[name]
    return list(build("train")), list(build("validation")), list(build("test"))


def hold_out(kind: str, examples: Sequence[Any], fraction: float, seed: int
             ) -> tuple[list, list]:
    """(train, validation): `fraction` of `examples` held out at random by `seed`. Questions
    about one context stay on one side, so the model never trains on the passage a held-out
    question asks about."""
    from bertjax.data.labelled import split_examples

    by_context = (lambda e: e.context) if kind_of(kind) == "question-answering" else None
    return split_examples(examples, fraction, seed, group=by_context, unit="context")


def make_task(kind: str, train: Sequence[Any], options: TaskOptions = TaskOptions(),  # noqa: B008
              *, fields: Fields = Fields()) -> tuple[Any, tuple[str, ...] | None]:  # noqa: B008
    """The `Task` of `kind` and the labels its head predicts, read from the training examples
    (None where the head has no labels to name: question answering, multiple choice)."""
    kind = kind_of(kind)
    if kind == "question-answering":
        from bertjax.tasks.question_answering import Decoding, QuestionAnsweringTask

        decoding = Decoding(n_best=options.n_best, max_answer_length=options.max_answer_length,
                            null_threshold=options.null_threshold)
        # a model trained on questions with no answer may answer "" (SQuAD v2.0)
        version_2 = any(not e.answerable for e in train)
        return QuestionAnsweringTask(doc_stride=options.doc_stride,
                                     max_query_length=options.max_query_length,
                                     version_2=version_2, decoding=decoding), None
    if kind == "multiple-choice":
        from bertjax.tasks.multiple_choice import MultipleChoiceTask

        return MultipleChoiceTask(), None
    if kind == "token-classification":
        from bertjax.data.tagging import label_list
        from bertjax.tasks.token_classification import TokenClassificationTask

        task: Task = TokenClassificationTask(label_all_pieces=options.label_all_pieces)
        labels, field = label_list(train), fields.tags
    else:
        from bertjax.data.labelled import label_names
        from bertjax.tasks.classification import ClassificationTask

        task = ClassificationTask()
        labels, field = label_names(train), fields.label
    if len(labels) < 2:
        raise InputError(f"the training data has {len(labels)} label(s); a classifier needs 2 or "
                         f"more (field '{field}')")
    return task, labels
