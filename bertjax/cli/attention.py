"""`bertjax attention`: one input's attention maps as PNG grids (one per layer) and one HTML page.

    bertjax attention MODEL "The cat sat on the mat." ["It was tired."] [--out attention/]
    bertjax attention MODEL --file speech.txt [--out attention/]

MODEL is a Hugging Face BERT directory or a `bertjax pretrain` run directory. Text longer than
the model allows is cut (with a warning). The HTML page holds every weight, so it is written only
for inputs it can hold (`bertjax.viz.attention.html_token_limit`: 182 tokens of all-MiniLM-L6-v2,
129 of BERT-base); for longer ones only the PNGs are written, and a warning says so. Exit status:
0 done, 2 bad input (empty sentence, no such model, a directory that is not a model, bad layers,
an --out that cannot be written). --out is new or empty, or with --force a directory this
command wrote (its PNGs and page, nothing else): a folder of other files is never written into.
"""

from __future__ import annotations

import argparse
import re
import warnings
from pathlib import Path

from bertjax.cli.errors import CommandError, writing
from bertjax.cli.model_options import add_model_argument, load_model, run_command
from bertjax.cli.outputs import add_force_argument, model_input
from bertjax.common.files import atomic_directory, check_output_directory

DEFAULT_OUT = "attention"
# what `bertjax attention` writes in --out: nothing else is there in a directory it wrote
WRITTEN = re.compile(r"attention\.html|layer_\d{2,}\.png")


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
    parser.add_argument("sentence_a", metavar="SENTENCE_A", nargs="?", default=None,
                        help="the (first) sentence")
    parser.add_argument("sentence_b", metavar="SENTENCE_B", nargs="?", default=None,
                        help="an optional second sentence ([CLS] A [SEP] B [SEP])")
    parser.add_argument("--file", default=None,
                        help="take sentence A from this UTF-8 file (its whole text) instead")
    parser.add_argument("--out", metavar="DIR", default=DEFAULT_OUT,
                        help=f"output directory: new or empty (default: {DEFAULT_OUT}/)")
    add_force_argument(parser, kind="directory")
    parser.add_argument("--layers", metavar="N,M,...", type=_layers, default=None,
                        help="layers to draw as PNGs, from 1 (default: all); the HTML page "
                             "always holds every layer")


def _sentences(args: argparse.Namespace) -> tuple[str, str | None, str | None]:
    """(sentence A, sentence B or None, how messages name the text or None for the default)."""
    from bertjax.common.files import read_text

    if args.file is None:
        if args.sentence_a is None:
            raise CommandError("give SENTENCE_A (and optionally SENTENCE_B), or --file")
        for name, sentence in (("A", args.sentence_a), ("B", args.sentence_b)):
            if sentence is not None and not sentence.strip():
                raise CommandError(f"sentence {name} is empty")
        return args.sentence_a, args.sentence_b, None
    if args.sentence_a is not None:
        raise CommandError("give SENTENCE_A or --file, not both")
    text = read_text(args.file, "--file").strip()
    if not text:
        raise CommandError(f"--file {args.file} is empty; give a file that holds the text")
    return text, None, f"--file {args.file}"


def is_attention_directory(path: Path) -> bool:
    """Whether `path` holds nothing but pictures and a page `bertjax attention` wrote (by their
    names and the generator written in them), so replacing it loses nothing a user made."""
    from bertjax.viz.attention import written_here

    return all(p.is_file() and WRITTEN.fullmatch(p.name) and written_here(p)
               for p in path.iterdir())


def _attention(args: argparse.Namespace) -> int:
    sentence_a, sentence_b, text_name = _sentences(args)
    check_output_directory(args.out, is_ours=is_attention_directory,
                           made_by="`bertjax attention`", replace=args.force,
                           inputs={"MODEL": model_input(args.model), "--file": args.file})

    from bertjax.model import BertModel
    from bertjax.use.attention import attention_maps
    from bertjax.viz.attention import html_too_large, plot_all, write_html

    model, tokenizer = load_model(args, model_cls=BertModel)
    layers = model.config.num_hidden_layers
    bad = [n for n in args.layers or [] if not 1 <= n <= layers]
    if bad:
        raise CommandError(f"--layers {','.join(map(str, bad))}: {args.model} has layers 1 to {layers}")
    maps = attention_maps(model, tokenizer, sentence_a, sentence_b, name=str(args.model),
                          text_name=text_name)
    too_large = html_too_large(maps)
    out = Path(args.out)
    with writing("--out", args.out), atomic_directory(out, replace=True) as aside:
        written = [out / p.name for p in plot_all(maps, aside, args.layers)]
        if not too_large:
            written.append(out / write_html(maps, aside / "attention.html").name)
    if too_large:
        warnings.warn(f"{too_large}: wrote the PNGs only, no attention.html (shorten the text "
                      "for the page)", stacklevel=1)
    print(f"{len(maps.tokens)} tokens: {' '.join(maps.tokens)}")
    for path in written:
        print(path)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("attention", _attention, args)
