"""`bertjax fill-mask`: the most likely tokens for each [MASK] of each text."""

from __future__ import annotations

import argparse

from bertjax.cli.argtypes import positive_int
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import (
    add_max_tokens_argument,
    add_model_argument,
    load_model_with,
    run_command,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_max_tokens_argument(parser, "texts")
    parser.add_argument("texts", nargs="*", metavar="TEXT", help='e.g. "to be or not to [MASK]"')
    parser.add_argument("--file", default=None, help="also every non-empty line of this file")
    parser.add_argument("--top-k", type=positive_int, default=5, metavar="K",
                        help="predictions per [MASK], at most the vocabulary's size (default 5)")


def _fill(args: argparse.Namespace) -> int:
    from bertjax.common.files import read_text
    from bertjax.use.fill_mask import fill_mask, filled

    texts, names = list(args.texts), [f"text {i + 1}" for i in range(len(args.texts))]
    if args.file:
        for number, line in enumerate(read_text(args.file, "--file").splitlines(), 1):
            if line.strip():
                texts.append(line)
                names.append(f"{args.file}:{number}")
    if not texts:
        raise CommandError("give a TEXT with [MASK] or a --file of such lines"
                           if not args.file else f"--file {args.file} has no text; give one "
                           "text with [MASK] per line")
    model, tokenizer = load_model_with(args, "mlm_head", "BertForMaskedLM")
    if args.top_k > model.config.vocab_size:
        raise CommandError(f"--top-k {args.top_k} is more than the model's "
                           f"{model.config.vocab_size} tokens; pass --top-k "
                           f"{model.config.vocab_size} or less")
    results = fill_mask(model, tokenizer, texts, top_k=args.top_k, names=names,
                        max_tokens=args.max_tokens)
    for text, masks in zip(texts, results, strict=True):
        print(f"{text}\n  -> {filled(tokenizer, text, masks)}")
        for m, top in enumerate(masks, 1):
            shown = ", ".join(f"{p.token} {p.probability:.4f}" for p in top)
            print(f"  [MASK] {m}: {shown}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("fill-mask", _fill, args)
