"""`bertjax bench WHAT`: benchmarks. `data`: tokenisation MB/s and masked sequences/s on one core;
`train` / `infer`: the training step / inference forward of bertjax (float32, bfloat16),
transformers (eager, torch.compile) and bert_torch side by side (`bertjax.bench`).

Each benchmark is a sub-command with its own options: an entry of BENCHMARKS.
"""

from __future__ import annotations

import argparse
import inspect
import json

from bertjax.cli.corpus_options import add_corpus_arguments


def _add_data_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.bench.data import run_data_benchmark

    default = {k: p.default for k, p in inspect.signature(run_data_benchmark).parameters.items()}
    add_corpus_arguments(parser)
    parser.add_argument("--vocab", default=None, metavar="PATH",
                        help="vocabulary to use (default: train one of --vocab-size first)")
    for flag, help_text in (("vocab-size", "size of the vocabulary trained when --vocab is not "
                             "given"), ("seq-len", "tokens per sequence"),
                            ("batch-size", "sequences per batch"),
                            ("max-predictions", "masked positions per sequence"),
                            ("steps", "batches per timed repeat"), ("repeats", "timed repeats"),
                            ("warmup", "untimed repeats first")):
        name = flag.replace("-", "_")
        parser.add_argument(f"--{flag}", type=int, default=default[name],
                            help=f"{help_text} (default: {default[name]})")
    parser.add_argument("--whole-word-mask", action="store_true")
    parser.add_argument("--cpu", type=int, default=None, help="core to pin to (default: first)")
    parser.add_argument("--json", action="store_true", help="also print the numbers as JSON")


def _run_data(args: argparse.Namespace) -> int:
    from bertjax.bench.data import run_data_benchmark

    result = run_data_benchmark(
        corpus=args.corpus, split=args.split, text_field=args.text_field, vocab=args.vocab,
        vocab_size=args.vocab_size, seq_len=args.seq_len, batch_size=args.batch_size,
        max_predictions=args.max_predictions, whole_word_mask=args.whole_word_mask,
        steps=args.steps, repeats=args.repeats, warmup=args.warmup, cpu=args.cpu,
    )
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0


def _add_train_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.bench.options import add_arguments as add_bench_arguments

    add_bench_arguments(parser, "train")


def _add_infer_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.bench.options import add_arguments as add_bench_arguments

    add_bench_arguments(parser, "infer")


def _run_train(args: argparse.Namespace) -> int:
    from bertjax.bench.run import run_from_args

    return run_from_args(args, "train")


def _run_infer(args: argparse.Namespace) -> int:
    from bertjax.bench.run import run_from_args

    return run_from_args(args, "infer")


def _add_embed_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.bench.embed import add_arguments as add_embed_arguments

    add_embed_arguments(parser)


def _run_embed(args: argparse.Namespace) -> int:
    from bertjax.bench.embed import run as run_embed

    return run_embed(args)


# name -> (help, add_arguments, run)
BENCHMARKS = {
    "data": ("data pipeline: tokenisation MB/s, masked sequences/s (one core)",
             _add_data_arguments, _run_data),
    "train": ("training step (forward, backward, AdamW) tokens/s and MFU: bertjax fp32/bf16, "
              "transformers eager/compiled, bert_torch side by side", _add_train_arguments, _run_train),
    "infer": ("inference forward tokens/s and MFU: bertjax fp32/bf16, transformers "
              "eager/compiled, bert_torch side by side", _add_infer_arguments, _run_infer),
    "embed": ("sentences/s of `bertjax embed` (all-MiniLM-L6-v2, mean pooling) against "
              "transformers eager with the same batches", _add_embed_arguments, _run_embed),
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="benchmark", required=True)
    for name, (help_text, add, _) in BENCHMARKS.items():
        add(sub.add_parser(name, help=help_text, description=help_text))


def run(args: argparse.Namespace) -> int:
    return BENCHMARKS[args.benchmark][2](args)
