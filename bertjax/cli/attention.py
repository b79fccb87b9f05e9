"""`bertjax attention`: one input's attention maps as PNG grids (one per layer) and one HTML page.

    bertjax attention MODEL "The cat sat on the mat." ["It was tired."] [--out attention/]

MODEL is a Hugging Face BERT directory or a `bertjax pretrain` run directory. Exit status: 0
done, 2 bad input (empty sentence, no such model, a directory that is not a model, bad layers).
"""

from __future__ import annotations

import argparse

from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model, run_command

DEFAULT_OUT = "attention"


def _layers(text: str) -> list[int]:
    """`--layers 1,3,5` -> [1, 3, 5] (1-based; checked against the model once it is loaded)."""
    try:
        layers = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a comma-separated list of layer numbers, e.g. 1,2,12") from None
    if not layers:
        raise argparse.ArgumentTypeError("no layer given; e.g. --layers 1,2")
    return layers


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("sentence_a", metavar="SENTENCE_A", help="the (first) sentence")
    parser.add_argument("sentence_b", metavar="SENTENCE_B", nargs="?", default=None,
                        help="an optional second sentence ([CLS] A [SEP] B [SEP])")
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help=f"output directory (default: {DEFAULT_OUT}/)")
    parser.add_argument("--layers", metavar="N,M,...", type=_layers, default=None,
                        help="layers to draw as PNGs, from 1 (default: all); the HTML page "
                             "always holds every layer")


def _attention(args: argparse.Namespace) -> int:
    for name, sentence in (("A", args.sentence_a), ("B", args.sentence_b)):
        if sentence is not None and not sentence.strip():
            raise CommandError(f"sentence {name} is empty")

    from bertjax.model import BertModel
    from bertjax.use.attention import attention_maps
    from bertjax.viz.attention import plot_all, write_html

    model, tokenizer = load_model(args, model_cls=BertModel)
    layers = model.config.num_hidden_layers
    bad = [n for n in args.layers or [] if not 1 <= n <= layers]
    if bad:
        raise CommandError(f"--layers {','.join(map(str, bad))}: {args.model} has layers 1 to {layers}")
    maps = attention_maps(model, tokenizer, args.sentence_a, args.sentence_b, name=str(args.model))
    try:
        pngs = plot_all(maps, args.out, args.layers)
        page = write_html(maps, f"{args.out}/attention.html")
    except OSError as err:
        raise CommandError(f"cannot write to {args.out}: {err}") from err
    print(f"{len(maps.tokens)} tokens: {' '.join(maps.tokens)}")
    for path in [*pngs, page]:
        print(path)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("attention", _attention, args)
