"""`bertjax convert`: any model bertjax reads (a Hugging Face directory or Hub id in safetensors,
`pytorch_model.bin` or transformers-v4 Flax msgpack, or a `bertjax pretrain` run) as a Hugging
Face directory of any BERT class (`--as`), which transformers and AutoTokenizer load.

OUT_DIR is checked before the model is loaded: it must be new or empty, or hold a model - anyone's,
bertjax's own included - and `--force` be given (it is then replaced); anything else is refused,
naming what is there, and so is any OUT_DIR that is, holds or lies in MODEL. The directory is
written aside and checked there (`bertjax.io.verify`) before it is renamed into place: bertjax
reloads it and must reproduce the model's outputs, and transformers (if installed) loads it with
no missing or unexpected weight and the same outputs. A failed check, an error or Ctrl-C leaves
no OUT_DIR (a model there stays as it was) and nothing beside it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from bertjax.cli.argtypes import non_negative_int
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model, model_source, run_command
from bertjax.cli.outputs import model_input
from bertjax.config.families import FAMILIES
from bertjax.config.heads import MODELS

# The classes `--as` offers: bertjax.heads.MODEL_CLASSES, named without importing JAX;
# transformers' names of them in each family are taken too.
CLASS_NAMES = tuple(MODELS)


def bertjax_class(name: str) -> tuple[str, str | None] | None:
    """(bertjax's class, the family transformers' `name` belongs to: None for bertjax's own
    names) for a name --as takes (`ElectraForPreTraining` -> BertForReplacedTokenDetection,
    electra); None for any other name."""
    if name in CLASS_NAMES:
        return name, None
    for family in FAMILIES.values():
        ours = family.bertjax_name(name)
        if ours != name and ours in CLASS_NAMES:
            return ours, family.model_type
    return None


def _class_name(text: str) -> str:
    """--as CLASS: one of `CLASS_NAMES`, or transformers' name of one (`bertjax_class`)."""
    if bertjax_class(text) is None:
        raise argparse.ArgumentTypeError(
            f"invalid choice: {text!r} (choose from {', '.join(map(repr, CLASS_NAMES))}, or "
            "transformers' name of one in the model's family: RobertaForMaskedLM, "
            "ElectraForPreTraining, ...)")
    return text


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("out", metavar="OUT_DIR",
                        help="directory to write (config.json, model.safetensors, tokenizer.json, "
                             "vocab.txt, tokenizer_config.json): new or empty, or one that holds "
                             "a model, with --force")
    parser.add_argument("--force", action="store_true",
                        help="replace OUT_DIR if it holds a model (anyone's; never MODEL itself, "
                             "nor a directory of other files)")
    parser.add_argument("--as", dest="as_class", type=_class_name, default=None, metavar="CLASS",
                        help="the class to write (default: the class the checkpoint is; a run: "
                             "BertForPreTraining): heads it lacks are freshly initialised, heads "
                             f"it has no place for are left out; one of {', '.join(CLASS_NAMES)}, "
                             "or transformers' name of one in the model's family "
                             "(ElectraForPreTraining is BertForReplacedTokenDetection)")
    parser.add_argument("--seed", type=non_negative_int, default=0, metavar="N",
                        help="seed of the heads --as adds that the checkpoint has no weights for "
                             "(default 0)")


def describe_source(report: Any) -> str:
    """What was read, from the load's report: the format (a run and its step) and the class."""
    if report.step is not None:
        return f"{report.format}, step {report.step}"
    formats = {"model.safetensors": "Hugging Face safetensors",
               "model.safetensors.index.json": "Hugging Face safetensors (sharded)",
               "pytorch_model.bin": "pytorch_model.bin",
               "flax_model.msgpack": "transformers-v4 Flax msgpack",
               "flax_model.msgpack.index.json": "transformers-v4 Flax msgpack (sharded)"}
    return formats.get(report.format, report.format or "Hugging Face directory")


def _convert(args: argparse.Namespace) -> int:
    from bertjax.common.files import atomic_directory
    from bertjax.heads import MODEL_CLASSES
    from bertjax.io.hf import check_export_directory
    from bertjax.io.verify import ExportCheckError, tensors_written, verify_export
    from bertjax.pretrained import checkpoint_class, save_pretrained  # JAX loads when run

    out = Path(args.out)
    inputs = {"MODEL": model_input(args.model)}
    check_export_directory(out, what="OUT_DIR", overwrite=args.force, force="--force",
                           inputs=inputs)  # before the (slow) load
    as_class, as_family = (bertjax_class(args.as_class) if args.as_class else None) or (None, None)
    config = model_source(args).config  # a Hugging Face directory's (a run's: after the load)
    if config is not None:
        _check_as_family(args, as_class, as_family, str(config.get("model_type", "bert")))
    model_cls = MODEL_CLASSES[as_class] if as_class else None
    model, tokenizer, report = load_model(args, model_cls=model_cls, seed=args.seed,
                                          output_loading_info=True)
    _check_as_family(args, as_class, as_family, model.config.model_type)
    source = describe_source(report)
    source += f", {checkpoint_class(model_source(args)).__name__}"
    with atomic_directory(out, replace=True) as written:  # renamed to OUT_DIR once checked
        save_pretrained(model, written, tokenizer)
        try:
            copied, loaded = verify_export(model, tokenizer, written)
        except ExportCheckError as err:
            raise CommandError(f"the directory written for {out} failed its check: {err}; {out} "
                               "was not written (a model there stays as it was)") from None
        tensors, parameters = tensors_written(written)
        check_export_directory(out, what="OUT_DIR", overwrite=args.force, force="--force",
                               inputs=inputs)  # still new, or a model --force replaces
    config, name = model.config, type(model).__name__
    print(f"wrote {out}: {name}, {config.num_hidden_layers} layers, hidden {config.hidden_size}, "
          f"vocabulary {tokenizer.vocab_size}")
    print(f"  source: {args.model} ({source})")
    print(f"  written: {name}, {tensors} tensors, {parameters:,} parameters")
    fresh, left_out = report.initialised_heads, report.left_out_heads
    print(f"  heads freshly initialised (seed {args.seed}): {', '.join(fresh)}"
          if fresh else "  heads freshly initialised: none")
    print(f"  heads left out: {', '.join(left_out) or 'none'}")
    print(f"  {copied}")
    print(f"  {loaded}")
    return 0


def _check_as_family(args: argparse.Namespace, as_class: str | None, as_family: str | None,
                     model_type: str) -> None:
    """--as given as transformers' name of another family's class than MODEL's: refused, naming
    the class of MODEL's family (convert changes the class, never the family)."""
    if as_class is None or as_family is None or as_family == model_type:
        return
    family = FAMILIES.get(model_type, FAMILIES["bert"])
    only = MODELS[as_class].families
    if only and model_type not in only:
        fix = f"a {model_type} model has no such class: choose another --as"
    else:
        fix = f"pass --as {family.class_name(as_class)}" + (
            f" (bertjax's name: {as_class})" if model_type != "bert" else "")
    raise CommandError(f"--as {args.as_class} is a class of the {as_family} family, but "
                       f"{args.model} is a {model_type} model, and convert keeps the model's "
                       f"family: {fix}")


def run(args: argparse.Namespace) -> int:
    return run_command("convert", _convert, args)
