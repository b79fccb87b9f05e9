"""argparse value types shared by the command line's parsers."""

from __future__ import annotations

import argparse


def positive_int(text: str) -> int:
    """An integer of at least 1, else argparse's error naming the value."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}")
    return value
