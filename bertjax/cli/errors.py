"""How the command line reports errors. Bad input is one line `bertjax COMMAND: error: ...` and
exit status 2: a command's `CommandError`, the library's `bertjax.InputError`, and an `OSError` or
`UnicodeDecodeError` about a file the user named. Anything else is a bug, in bertjax or a library
it uses: its traceback, a line asking for a report, and exit status 1. Set BERTJAX_TRACEBACK=1 to
see the traceback of bad input as well.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Iterator
from typing import NoReturn

from bertjax.errors import InputError

EXIT_BAD_INPUT = 2  # argparse's own convention
EXIT_FAILED = 1  # a bug, or a training failure (NaN loss, a failed row)
BUG_REPORT = ("this is a bug in bertjax or a library it uses, not a mistake in your input; "
              "please report it with the traceback above and the command that ran")
EXIT_INTERRUPTED = 130  # 128 + SIGINT, as a shell reports Ctrl-C

class CommandError(Exception):
    """Bad input to a command: printed as `bertjax COMMAND: error: ...`, exit status 2."""


# The errors that are about the user's input (a file the user named cannot be read, is not
# UTF-8); anything else is a bug and keeps its traceback.
USER_ERRORS: tuple[type[BaseException], ...] = (CommandError, InputError, OSError,
                                                UnicodeDecodeError)


def describe(err: BaseException) -> str:
    """One line for a user error; an OSError names its path and what to do about it."""
    if isinstance(err, UnicodeDecodeError):
        return (f"not UTF-8 text ({err.reason} at byte {err.start}); "
                "save the file as UTF-8 (or give a text file)")
    if isinstance(err, OSError) and err.strerror and err.filename is not None:
        fix = {
            FileNotFoundError: "check the path",
            FileExistsError: "remove it or choose another path",
            IsADirectoryError: "give a file, not a directory",
            NotADirectoryError: "a part of the path is a file, not a directory",
            PermissionError: "check its permissions or choose another path",
        }.get(type(err), "check the path")
        return f"{err.filename}: {err.strerror.lower()}; {fix}"
    return str(err) or type(err).__name__


def out_of_memory(err: BaseException) -> bool:
    """Whether `err` is an allocation that failed: NumPy's MemoryError, XLA's RESOURCE_EXHAUSTED
    or "Out of memory allocating ..." (an INTERNAL error on the CPU)."""
    text = str(err)
    return isinstance(err, MemoryError) or (
        type(err).__name__ in ("XlaRuntimeError", "JaxRuntimeError")
        and (text.startswith("RESOURCE_EXHAUSTED") or "Out of memory" in text))


def out_of_memory_fix(err: BaseException, args: argparse.Namespace | None) -> str:
    """The one line for an allocation that failed: what failed, and the option to lower."""
    detail = " ".join(str(err).split())[:160] or type(err).__name__
    max_tokens, batch_size = (getattr(args, name, None) for name in ("max_tokens", "batch_size"))
    if max_tokens is not None:
        fix = f"lower --max-tokens (it is {max_tokens})"
    elif batch_size is not None:
        fix = f"lower --batch-size (it is {batch_size})"
    elif hasattr(args, "batch_size"):
        fix = "pass a smaller --batch-size"
    else:
        fix = "give fewer or shorter inputs, or a smaller model"
    return f"ran out of memory ({detail}); {fix}"


def show_traceback() -> bool:
    """Whether to print the traceback of a user error too (BERTJAX_TRACEBACK=1)."""
    return os.environ.get("BERTJAX_TRACEBACK", "") not in ("", "0")


class OneLineParser(argparse.ArgumentParser):
    """argparse with its errors as one line naming `--help` (no usage block), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_BAD_INPUT, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


@contextlib.contextmanager
def writing(option: str, path: object) -> Iterator[None]:
    """An OSError inside the block becomes a CommandError naming `option` and `path`."""
    try:
        yield
    except OSError as err:
        raise CommandError(f"cannot write {option} {path}: {describe(err)}") from err


def print_error(command: str, message: str) -> None:
    print(f"bertjax {command}: error: {message}", file=sys.stderr)
