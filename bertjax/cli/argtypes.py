"""argparse value types shared by the command line's parsers."""

from __future__ import annotations

import argparse
from collections.abc import Callable


def _checked(text: str, convert: Callable[[str], float], accept: Callable[[float], bool],
             expected: str) -> float:
    """`convert(text)` if it parses and `accept`s, else argparse's error naming the value."""
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if not accept(value):
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


def positive_int(text: str) -> int:
    """An integer of at least 1."""
    return int(_checked(text, int, lambda v: v >= 1, "a positive integer"))


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


def non_negative_int(text: str) -> int:
    """An integer of at least 0."""
    return int(_checked(text, int, lambda v: v >= 0, "an integer >= 0"))


def probability(text: str) -> float:
    """A float in [0, 1): a dropout rate."""
    return _checked(text, float, lambda v: 0.0 <= v < 1.0, "a probability in [0, 1)")


def fraction(text: str) -> float:
    """A float in [0, 1]: a probability or a share of the data."""
    return _checked(text, float, lambda v: 0.0 <= v <= 1.0, "a number in [0, 1]")


def finite_float(text: str) -> float:
    """Any finite float (no nan, no inf): a threshold."""
    return _checked(text, float, lambda v: abs(v) < float("inf"), "a finite number")


def positive_float(text: str) -> float:
    """A finite float above 0: a tolerance, a learning rate."""
    return _checked(text, float, lambda v: 0.0 < v < float("inf"), "a number above 0")


def int_range(low: int, high: int | None = None) -> Callable[[str], int]:
    """A parser of integers in [low, high] (no upper bound when `high` is None)."""
    expected = f"an integer from {low} to {high}" if high is not None else f"an integer >= {low}"

    def parse(text: str) -> int:
        return int(_checked(text, int, lambda v: v >= low and (high is None or v <= high),
                            expected))

    parse.__name__ = "int"  # argparse's metavar and messages
    return parse


def float_range(low: float, high: float) -> Callable[[str], float]:
    """A parser of finite floats in [low, high]."""
    expected = f"a number from {low:g} to {high:g}"

    def parse(text: str) -> float:
        return _checked(text, float, lambda v: low <= v <= high, expected)

    parse.__name__ = "float"  # argparse's metavar and messages
    return parse


def subset_of(allowed: tuple[str, ...]) -> Callable[[str], tuple[str, ...]]:
    """A parser of comma-separated names from `allowed` ("a,b"), in the order given, deduplicated."""

    def parse(text: str) -> tuple[str, ...]:
        items = tuple(dict.fromkeys(t.strip() for t in text.split(",") if t.strip()))
        bad = [t for t in items if t not in allowed]
        if bad or not items:
            raise argparse.ArgumentTypeError(
                f"{', '.join(map(repr, bad)) or 'nothing'} given; choose a comma-separated subset "
                f"of {', '.join(allowed)}")
        return items

    return parse
