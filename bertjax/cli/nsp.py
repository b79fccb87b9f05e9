"""`bertjax nsp`: the probability that sentence B follows sentence A (next-sentence head)."""

from __future__ import annotations

import argparse

from bertjax.cli.model_options import add_model_argument, load_model, run_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("first", metavar="A", help="the first sentence")
    parser.add_argument("second", metavar="B", help="the sentence that may follow it")


def _nsp(args: argparse.Namespace) -> int:
    from bertjax.use.next_sentence import next_sentence_probability

    model, tokenizer = load_model(args, missing_heads="error")
    p = float(next_sentence_probability(model, tokenizer, [args.first], [args.second])[0])
    print(f"P(IsNext) = {p:.6f}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("nsp", _nsp, args)
