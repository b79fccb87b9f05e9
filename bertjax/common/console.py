"""Where a job's progress lines go: standard error, one flushed line each, so they interleave
with a progress bar and never mix into a command's results on standard output."""

from __future__ import annotations

import sys


def to_stderr(message: str) -> None:
    """Print `message` as one line on standard error."""
    print(message, file=sys.stderr, flush=True)


def say_unless(silent: bool, message: str) -> None:
    """`to_stderr(message)` unless `silent` (a benchmark's progress lines, `quiet=True`)."""
    if not silent:
        to_stderr(message)


def quiet(message: str) -> None:
    """Say nothing (what processes other than 0 say in a multi-process job)."""
