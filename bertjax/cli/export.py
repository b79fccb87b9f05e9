"""`bertjax export`: a model (a `bertjax pretrain` run's best checkpoint, or any MODEL) as a Hugging
Face directory that transformers and AutoTokenizer load.

OUT_DIR is checked before the model is loaded: it must be new, empty or an earlier export (which
is replaced); anything else is refused, naming what is there. The directory is written aside and
renamed into place, so a failure or Ctrl-C half-way leaves no half-made OUT_DIR (an earlier export
stays as it was).
"""

from __future__ import annotations

import argparse

from bertjax.cli.model_options import add_model_argument, load_model, run_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("out", metavar="OUT_DIR",
                        help="directory to write (config.json, model.safetensors, tokenizer.json, "
                             "vocab.txt, tokenizer_config.json): new, empty, or an earlier export "
                             "(replaced)")


def _export(args: argparse.Namespace) -> int:
    from bertjax.io.hf import check_export_directory
    from bertjax.pretrained import save_pretrained  # JAX loads when the command runs

    check_export_directory(args.out, what="OUT_DIR")  # before the (slow) load
    model, tokenizer = load_model(args)
    path = save_pretrained(model, args.out, tokenizer)
    print(f"wrote {path}: {type(model).__name__}, {model.config.num_hidden_layers} layers, "
          f"hidden {model.config.hidden_size}, vocabulary {tokenizer.vocab_size}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("export", _export, args)
