"""The MODEL argument shared by the commands that use a trained BERT, and their warnings."""

from __future__ import annotations

import argparse
import sys
import warnings
from typing import Any

from bertjax.cli.argtypes import non_negative_int
from bertjax.cli.errors import CommandError, describe
from bertjax.errors import InputError

MODEL_HELP = ("a Hugging Face BERT directory (config.json; model.safetensors, pytorch_model.bin or a "
              "transformers-v4 flax_model.msgpack; tokenizer.json or vocab.txt), a Hugging Face "
              "Hub id (organisation/name: its cached or downloaded snapshot) or a `bertjax "
              "pretrain` run directory (its best checkpoint)")


def add_model_argument(parser: argparse.ArgumentParser, *, optional: bool = False) -> None:
    """MODEL, --step and --revision (`optional`: MODEL may be left out, for a command that can
    answer without one, as `finetune --print-config` does)."""
    parser.add_argument("model", metavar="MODEL", nargs="?" if optional else None, help=MODEL_HELP)
    parser.add_argument("--step", type=non_negative_int, default=None, metavar="N",
                        help="with a run directory: this checkpoint step instead of the best")
    parser.add_argument("--revision", default=None, metavar="REV",
                        help="with a Hub id: this branch, tag or commit instead of main")


def add_max_tokens_argument(parser: argparse.ArgumentParser, unit: str = "texts") -> None:
    """--max-tokens: pack the inputs into batches of that many token slots (`bertjax.use.packed`,
    the same results as unpacked within 1e-5)."""
    from bertjax.cli.argtypes import token_slots

    parser.add_argument("--max-tokens", type=token_slots, default=None, metavar="N",
                        help=f"pack the {unit} into rows (several per row, attention kept inside "
                             "each) and run batches of N token slots: rows as long as the inputs "
                             "(rounded up to 16, at least 64; the longest 2%% in rows of their "
                             "own), N // that many rows a batch, or as many as the inputs fill; the "
                             "same results, less padding (default: off; at most what the "
                             "memory holds)")


def add_batch_size_argument(parser: argparse.ArgumentParser, unit: str, default: int = 64) -> None:
    """--batch-size beside --max-tokens: None when not given, so that `batch_size_of` can
    refuse the two together (a packed batch is a number of token slots, not of inputs)."""
    from bertjax.cli.argtypes import positive_int

    parser.add_argument("--batch-size", type=positive_int, default=None, metavar="N",
                        help=f"{unit} per forward pass (default: {default}; not with --max-tokens)")
    parser.set_defaults(batch_size_default=default)


def batch_size_of(args: argparse.Namespace) -> int:
    """--batch-size, or its default; refused beside --max-tokens, where it would do nothing."""
    if args.batch_size is not None and args.max_tokens is not None:
        raise CommandError(f"--batch-size does nothing with --max-tokens (a batch is "
                           f"{args.max_tokens} token slots, holding the inputs that fit): leave "
                           "out one of them")
    return args.batch_size or args.batch_size_default


def load_model(args: argparse.Namespace, **kwargs: Any) -> Any:
    """(model, tokenizer) of `args.model` (resolved once: `model_source`), with the report too
    when `output_loading_info=True`; a missing, damaged or unusable directory is a CommandError
    of one line."""
    from bertjax.pretrained import from_pretrained

    source = model_source(args)
    try:
        return from_pretrained(source, step=args.step, **kwargs)
    except (OSError, InputError) as err:
        raise CommandError(one_line(describe(err))) from err


def model_source(args: argparse.Namespace) -> Any:
    """`args.model` at `args.revision` located once (`bertjax.io.source.locate`), kept on `args`
    for every later question about it; a bad MODEL is a CommandError of one line."""
    if not hasattr(args, "model_source"):
        from bertjax.io.source import locate

        try:
            args.model_source = locate(args.model, revision=args.revision)
        except (OSError, InputError) as err:
            raise CommandError(one_line(describe(err))) from err
    return args.model_source


def load_model_with(args: argparse.Namespace, head: str, fallback: str) -> tuple[Any, Any]:
    """`load_model` as the class the checkpoint says it is if that class has `head`, else as
    `fallback` (a class name): its heads must all be in the weights (`missing_heads="error"`), so
    a checkpoint without `head` is an error naming the fix, never a model with a random head."""
    from bertjax.heads import MODEL_CLASSES
    from bertjax.pretrained import checkpoint_class

    own = checkpoint_class(model_source(args))
    model_cls = own if head in own.head_modules else MODEL_CLASSES[fallback]
    return load_model(args, model_cls=model_cls, missing_heads="error")


def one_line(message: str, shown: int = 3) -> str:
    """A message listing problems one per indented line (a weights/config mismatch) as one line:
    its first line, the first `shown` problems, how many more, and any closing hint."""
    first, *rest = [line.strip() for line in message.strip().splitlines() if line.strip()] or [""]
    if not rest:
        return first
    hint = [] if message.splitlines()[-1].startswith(" ") else [rest.pop()]
    more = [f"and {len(rest) - shown} more"] if len(rest) > shown else []
    return "; ".join([first.rstrip(":"), *rest[:shown], *more, *hint])


def run_command(name: str, body: Any, args: argparse.Namespace) -> int:
    """`body(args)` with bertjax's warnings printed as one plain line each (its errors are
    printed by `bertjax.cli.main`)."""
    def show(message: Any, category: Any, *rest: Any, **kw: Any) -> None:
        print(f"bertjax {name}: warning: {message}", file=sys.stderr)

    with warnings.catch_warnings():
        warnings.filterwarnings("always", module=r"bertjax(\.|$)")  # bertjax's own, each shown
        warnings.showwarning = show
        return int(body(args) or 0)
