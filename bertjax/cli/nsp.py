"""`bertjax nsp`: the probability that sentence B follows sentence A (next-sentence head), for one
pair given on the command line and/or every line of a file (A, a tab, B)."""

from __future__ import annotations

import argparse

from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import (
    add_max_tokens_argument,
    add_model_argument,
    load_model_with,
    run_command,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_max_tokens_argument(parser, "sentence pairs")
    parser.add_argument("first", metavar="A", nargs="?", default=None, help="the first sentence")
    parser.add_argument("second", metavar="B", nargs="?", default=None,
                        help="the sentence that may follow it")
    parser.add_argument("--file", default=None,
                        help="also every non-empty line of this UTF-8 file: sentence A, a tab, "
                             "sentence B")


def _pairs(args: argparse.Namespace) -> tuple[list[str], list[str], list[str]]:
    """(first sentences, second sentences, their names for messages)."""
    from bertjax.common.files import read_text

    if args.first is not None and args.second is None:
        raise CommandError("give sentence B too (A and B), or a --file of pairs")
    for which, text in (("A", args.first), ("B", args.second)):
        if text is not None and not text.strip():
            raise CommandError(f"sentence {which} is empty; give its text")
    first, second, names = [], [], []
    if args.first is not None:
        first, second, names = [args.first], [args.second], ["the pair A + B"]
    if args.file:
        for number, line in enumerate(read_text(args.file, "--file").splitlines(), 1):
            if not line.strip():
                continue
            a, tab, b = line.partition("\t")
            if not tab:
                raise CommandError(f"{args.file}:{number} has no tab; write sentence A, a tab, "
                                   "then sentence B on each line")
            if "\t" in b:  # a third column would silently join sentence B
                raise CommandError(f"{args.file}:{number} has {line.count(chr(9))} tabs, not one; "
                                   "write sentence A, one tab, then sentence B (a tab inside a "
                                   "sentence: make it a space)")
            first.append(a)
            second.append(b)
            names.append(f"{args.file}:{number}")
    if not first:
        raise CommandError("give sentences A and B, or a --file of pairs" if not args.file else
                           f"--file {args.file} has no pairs; write sentence A, a tab, then "
                           "sentence B on each line")
    return first, second, names


def _nsp(args: argparse.Namespace) -> int:
    from bertjax.use.next_sentence import next_sentence_probability

    first, second, names = _pairs(args)
    model, tokenizer = load_model_with(args, "nsp_head", "BertForNextSentencePrediction")
    probabilities = next_sentence_probability(model, tokenizer, first, second, names=names,
                                              max_tokens=args.max_tokens)
    for name, p in zip(names, probabilities, strict=True):
        print(f"P(IsNext) = {float(p):.6f}" if len(names) == 1 else
              f"{name}: P(IsNext) = {float(p):.6f}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("nsp", _nsp, args)
