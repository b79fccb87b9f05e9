"""`bertjax export`: a model (a `bertjax pretrain` run's best checkpoint, or any MODEL) as a Hugging
Face directory that transformers and AutoTokenizer load."""

from __future__ import annotations

import argparse

from bertjax.cli.model_options import add_model_argument, load_model, run_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("out", metavar="OUT_DIR",
                        help="directory to write (config.json, model.safetensors, tokenizer.json, "
                             "vocab.txt, tokenizer_config.json); replaced if it holds a checkpoint")


def _export(args: argparse.Namespace) -> int:
    from bertjax.pretrained import save_pretrained  # JAX loads when the command runs

    model, tokenizer = load_model(args)
    path = save_pretrained(model, args.out, tokenizer)
    print(f"wrote {path}: {type(model).__name__}, {model.config.num_hidden_layers} layers, "
          f"hidden {model.config.hidden_size}, vocabulary {tokenizer.vocab_size}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("export", _export, args)
