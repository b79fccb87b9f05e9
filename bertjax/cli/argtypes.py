"""argparse value types of the commands' own options: each parses and checks its value as a
setting's is (`bertjax.common.options.parse_value`: the same named ranges, words and messages),
so every command and every config file speak one vocabulary of value checks."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any

from bertjax.common.options import Option, expected, parse_value
from bertjax.errors import InputError


def value_type(kind: type, check: str | None = None, *, minimum: float | None = None,
               maximum: float | None = None) -> Callable[[str], Any]:
    """argparse's `type` for a value of `kind` (int or float) in the named range `check`
    (`bertjax.common.fields.CHECKS`) and/or [minimum, maximum]."""
    option = Option("value", kind, None, "", None,
                    {"check": check, "minimum": minimum, "maximum": maximum})

    def parse(text: str) -> Any:
        try:
            return parse_value(option, text)
        except InputError:
            raise argparse.ArgumentTypeError(f"expected {expected(option)}, got {text!r}") from None

    parse.__name__ = kind.__name__  # argparse's metavar and messages
    return parse


positive_int = value_type(int, "positive")  # an integer of at least 1
non_negative_int = value_type(int, "non_negative")  # an integer of at least 0
fraction = value_type(float, "fraction")  # a probability or a share of the data, in [0, 1]
positive_float = value_type(float, "positive")  # a tolerance, a rate, minutes: finite, above 0


def token_slots(text: str) -> int:
    """A positive integer no larger than the token slots a batch can hold in the memory this
    process may use (`bertjax.common.memory`): --max-tokens."""
    from bertjax.common.memory import TOKEN_BYTES_FLOOR, gib, largest_max_tokens, memory_limit

    value = positive_int(text)
    largest = largest_max_tokens()
    if value > largest:
        raise argparse.ArgumentTypeError(
            f"{value} is more token slots than a batch can hold in the memory this process may "
            f"use ({gib(memory_limit())}, at least {TOKEN_BYTES_FLOOR} bytes a slot); pass {largest} "
            "or less (a batch holds no more than its inputs fill, so a larger value gains "
            "nothing)")
    return value


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """A parser of integers in [low, high] (no upper bound when `high` is None)."""
    return value_type(int, minimum=low, maximum=high)
