"""The `bertjax` command line: one sub-command per module under `bertjax.cli`.

Each command module defines `add_arguments(parser)` and `run(args) -> int`, and is imported only
when its command runs, so `bertjax --help` stays fast. A module may also define
`explain_unknown(arguments) -> str`, the error for options it does not know (e.g. to name the
closest valid one).
"""

from __future__ import annotations

import argparse
import importlib
import sys

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "parity": ("bertjax.cli.parity", "compare bertjax with the PyTorch mirror, tensor by tensor"),
    "vocab": ("bertjax.cli.vocab", "train a WordPiece vocabulary on a corpus"),
    "data": ("bertjax.cli.data", "tokenise a corpus once into memory-mapped shards"),
    "bench": ("bertjax.cli.bench", "benchmarks (data pipeline, training step)"),
    "pretrain": ("bertjax.cli.pretrain", "pre-train BERT with evaluation, checkpoints and resume"),
    "export": ("bertjax.cli.export", "write a run's model as a Hugging Face directory"),
    "fill-mask": ("bertjax.cli.fill_mask", "the most likely tokens for each [MASK]"),
    "nsp": ("bertjax.cli.nsp", "probability that sentence B follows sentence A"),
    "embed": ("bertjax.cli.embed", "sentence embeddings of lines of text (.npy)"),
    "similarity": ("bertjax.cli.similarity", "the lines nearest to a query"),
    "attention": ("bertjax.cli.attention", "attention maps as PNG grids and an HTML viewer"),
    "finetune": ("bertjax.cli.finetune", "fine-tune a sequence classifier"),
    "classify": ("bertjax.cli.classify", "predict labels with a fine-tuned classifier"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="bertjax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = next((a for a in argv if not a.startswith("-")), None)
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the command being run pays for its imports
            importlib.import_module(module).add_arguments(cmd)
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = build_parser(argv)
    args, unknown = parser.parse_known_args(argv)
    module = importlib.import_module(COMMANDS[args.command][0])
    if unknown:
        explain = getattr(module, "explain_unknown", None)
        parser.error(explain(unknown) if explain else f"unrecognized arguments: {' '.join(unknown)}")
    return int(module.run(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
