"""`bertjax bench WHAT`: benchmarks. `data`: tokenisation MB/s and masked sequences/s on one core.

Each benchmark is a sub-command with its own options; a training benchmark can be added as
another entry of BENCHMARKS.
"""

from __future__ import annotations

import argparse
import json

from bertjax.commands.vocab import add_corpus_arguments


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    add_corpus_arguments(parser)
    parser.add_argument("--vocab", default=None, metavar="PATH",
                        help="vocabulary to use (default: train one of --vocab-size first)")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-predictions", type=int, default=20)
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--steps", type=int, default=50, help="batches per timed repeat")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--cpu", type=int, default=None, help="core to pin to (default: first)")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")


def _run_data(args: argparse.Namespace) -> int:
    from bertjax.data.bench import run_data_benchmark

    result = run_data_benchmark(
        corpus=args.corpus, split=args.split, text_field=args.text_field, vocab=args.vocab,
        vocab_size=args.vocab_size, seq_len=args.seq_len, batch_size=args.batch_size,
        max_predictions=args.max_predictions, whole_word_mask=args.whole_word_mask,
        steps=args.steps, repeats=args.repeats, warmup=args.warmup, cpu=args.cpu,
    )
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


# name -> (help, add_arguments, run)
BENCHMARKS = {
    "data": ("data pipeline: tokenisation MB/s, masked sequences/s (one core)",
             _add_data_arguments, _run_data),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True)
    for name, (help_text, add, _) in BENCHMARKS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))


def run(args: argparse.Namespace) -> int:
    return BENCHMARKS[args.benchmark][2](args)
