"""`bertjax choose`: which of several choices best continues a context, with a multiple-choice
model (`bertjax finetune --task multiple-choice`): each choice's probability."""

from __future__ import annotations

import argparse
import json

from bertjax.cli.argtypes import int_range
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model_with, run_command
from bertjax.errors import InputError

DEFAULT_MAX_LENGTH = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--context", required=True, help="the text the choices continue")
    parser.add_argument("--choice", action="append", default=[], metavar="TEXT",
                        help="a candidate (give two or more, each with --choice)")
    parser.add_argument("--max-length", type=int_range(5), default=None, metavar="TOKENS",
                        help="tokens per context + choice, longer pairs are cut; at most the "
                             f"model's positions (default: {DEFAULT_MAX_LENGTH}, or the model's "
                             "positions if fewer)")
    parser.add_argument("--json", action="store_true",
                        help="print [{choice, index, probability}], most probable first")


def _choose(args: argparse.Namespace) -> int:
    from bertjax.data.choices import MAX_CHOICES, ChoiceExample
    from bertjax.tasks.multiple_choice import predict_choices

    if not args.context.strip():
        raise CommandError("the context is empty; give its text")
    if not 2 <= len(args.choice) <= MAX_CHOICES or not all(c.strip() for c in args.choice):
        raise CommandError(f"give 2 to {MAX_CHOICES} non-empty choices, each with --choice")
    model, tokenizer = load_model_with(args, "choice_classifier", "BertForMultipleChoice")
    max_length = args.max_length or min(DEFAULT_MAX_LENGTH, model.config.max_sequence_length)
    example = ChoiceExample(args.context, tuple(args.choice), 0, "--context")
    try:
        probs = predict_choices(model, tokenizer, [example], max_length=max_length,
                                warn=True, option="--max-length")[0]
    except InputError as err:
        raise CommandError(str(err)) from err
    ranked = sorted(range(len(args.choice)), key=lambda i: -probs[i])
    rows = [{"choice": args.choice[i], "index": i, "probability": float(probs[i])} for i in ranked]
    if args.json:
        print(json.dumps(rows, ensure_ascii=False))
    else:
        for row in rows:
            print(f"{row['probability']:.4f}  [{row['index']}] {row['choice']}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("choose", _choose, args)
