"""The `bertjax` command line: one sub-command per module under `bertjax.cli`.

Each command module defines `add_arguments(parser)` and `run(args) -> int`, and is imported only
when its command runs, so `bertjax --help` stays fast. A module may also define
`explain_unknown(arguments) -> str`, the error for options it does not know (e.g. to name the
closest valid one). A command with sub-commands of its own (`bench WHAT`) stores the chosen one in
`args.subcommand`. Bad input ends as one line and exit status 2 (`bertjax.cli.errors`), Ctrl-C
as exit status 130.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import logging
import sys
import traceback

from bertjax.cli.compile_cache import FLAG as COMPILE_CACHE_FLAG
from bertjax.cli.compile_cache import use_compile_cache
from bertjax.cli.errors import (
    BUG_REPORT,
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    USER_ERRORS,
    OneLineParser,
    describe,
    out_of_memory,
    out_of_memory_fix,
    print_error,
    show_traceback,
)
from bertjax.cli.interrupts import ctrl_c_blocked
from bertjax.train.host_memory import keep_freed_memory

# command name -> (module, one-line help)
COMMANDS: dict[str, tuple[str, str]] = {
    "parity": ("bertjax.cli.parity", "compare bertjax with the PyTorch mirror, tensor by tensor"),
    "vocab": ("bertjax.cli.vocab", "train a WordPiece vocabulary on a corpus"),
    "data": ("bertjax.cli.data", "tokenise a corpus once into memory-mapped shards"),
    "bench": ("bertjax.cli.bench", "benchmarks (data pipeline, training step)"),
    "pretrain": ("bertjax.cli.pretrain", "pre-train BERT with evaluation, checkpoints and resume"),
    "convert": ("bertjax.cli.convert", "any model as a Hugging Face directory of any BERT class, "
                                      "checked by reloading it (and by transformers)"),
    "fill-mask": ("bertjax.cli.fill_mask", "the most likely tokens for each [MASK]"),
    "nsp": ("bertjax.cli.nsp", "probability that sentence B follows sentence A"),
    "embed": ("bertjax.cli.embed", "sentence embeddings of lines of text (.npy)"),
    "similarity": ("bertjax.cli.similarity", "the lines nearest to a query"),
    "attention": ("bertjax.cli.attention", "attention maps as PNG grids and an HTML viewer"),
    "finetune": ("bertjax.cli.finetune", "fine-tune for classification, tagging, question "
                                         "answering or multiple choice"),
    "classify": ("bertjax.cli.classify", "predict labels with a fine-tuned classifier"),
    "answer": ("bertjax.cli.answer", "the answer to a question, found in a context"),
    "tag": ("bertjax.cli.tag", "named entities (token classification) in text"),
    "choose": ("bertjax.cli.choose", "which choice continues a context (multiple choice)"),
}


def build_parser(argv: list[str]) -> argparse.ArgumentParser:
    """The top-level parser (the command list, `--help`); the chosen command's options are added."""
    parser = OneLineParser(prog="bertjax", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _command(argv)
    for name, (module, help_text) in COMMANDS.items():
        cmd = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:  # only the command being run pays for its imports
            importlib.import_module(module).add_arguments(cmd)
    return parser


def _command(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


# commands that run no JAX computation: they keep glibc's defaults for their tokenizer threads
WITHOUT_JAX = {("vocab",), ("data",), ("bench", "data"), ("bench", "corpus")}
# jobs whose Ctrl-C goes to a StopRequest (`bertjax.cli.interrupts`): SIGINT is blocked before
# anything is imported, so that no thread hands it to Python's handler
STOPPABLE = {"pretrain"}


def _runs_jax(argv: list[str]) -> bool:
    """Whether the command in `argv` computes with JAX (decided before anything is imported)."""
    words = [a for a in argv if not a.startswith("-")]
    return not any(tuple(words[:len(c)]) == c for c in WITHOUT_JAX)


def _parse(argv: list[str]) -> tuple[argparse.Namespace, list[str], argparse.ArgumentParser]:
    """(options, unknown arguments, the command's parser). Options may come before, between or
    after the positional arguments (`fill-mask RUN --top-k 3 "text"`), as users type them."""
    name = _command(argv)
    if name not in COMMANDS or argv.index(name) != 0:
        parser = build_parser(argv)  # --help, a missing or unknown command: argparse's messages
        return (*parser.parse_known_args(argv), parser)
    module, help_text = COMMANDS[name]
    parser = OneLineParser(prog=f"bertjax {name}", description=help_text)
    importlib.import_module(module).add_arguments(parser)
    rest = argv[1:]
    if parser._subparsers is not None:  # `bench WHAT`: argparse cannot intermix sub-commands
        args, unknown = parser.parse_known_args(rest)
    else:
        args, unknown = parser.parse_known_intermixed_args(rest)
    args.command = name
    return args, unknown, parser


def main(argv: list[str] | None = None) -> int:
    """Run one command: its exit status, 2 for bad input (one line, no traceback), 1 for a bug (its
    traceback) or a failed run, 130 for Ctrl-C (also while the command's modules are imported)."""
    argv = sys.argv[1:] if argv is None else argv
    if _runs_jax(argv):
        keep_freed_memory()  # before JAX starts its threads: a CPU step reuses its memory
        argv = use_compile_cache(argv)  # before JAX is imported: it reads the setting then
    argv = [a for a in argv if a != COMPILE_CACHE_FLAG]
    name = " ".join(argv[:1]) or "bertjax"
    # Orbax logs its own bookkeeping (a read-only manager, a step saved without metrics) as
    # absl warnings, huggingface_hub each retry of an unreachable Hub: not the user's business at
    # a command line, where bertjax says the outcome once; errors still show
    for noisy in ("absl", "huggingface_hub"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    with ctrl_c_blocked() if _command(argv) in STOPPABLE else contextlib.nullcontext():
        return _run(argv, name)


def _run(argv: list[str], name: str) -> int:
    """`main` once the process is set up: parse, import the command, run it; errors as said."""
    args: argparse.Namespace | None = None
    try:
        args, unknown, parser = _parse(argv)
        module = importlib.import_module(COMMANDS[args.command][0])
        if unknown:
            from bertjax.cli.options import explain_unknown

            explain = getattr(module, "explain_unknown", None)  # a command's own (`bench`'s)
            parser.error(explain(unknown) if explain else explain_unknown(unknown, parser))
        name = " ".join(filter(None, (args.command, getattr(args, "subcommand", None))))
        return int(module.run(args) or 0)
    except USER_ERRORS as err:
        if show_traceback():
            traceback.print_exc()
        print_error(name, describe(err))
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"\nbertjax {name}: interrupted (Ctrl-C)", file=sys.stderr)
        return EXIT_INTERRUPTED
    except Exception as err:  # a bug: its traceback, and how to report it
        if out_of_memory(err):  # the input's size, not a bug: the option that sets it
            if show_traceback():
                traceback.print_exc()
            print_error(name, out_of_memory_fix(err, args))
            return EXIT_BAD_INPUT
        traceback.print_exc()
        print_error(name, BUG_REPORT)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
