"""How a setting is declared: `option_field` (a dataclass field carrying its option's help,
choices and range) and the named range `CHECKS`. Imports nothing, so a settings class anywhere
(`bertjax.config.BertConfig` included) declares its options without loading the options engine
(`bertjax.common.options`, which reads them)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

# check name -> (accepts a parsed number, what a value must be: an integer's words, a float's)
CHECKS: dict[str, tuple[Callable[[float], bool], tuple[str, str]]] = {
    "positive": (lambda v: v > 0, ("a positive integer", "a number above 0")),
    "non_negative": (lambda v: v >= 0, ("an integer >= 0", "a number >= 0")),
    "probability": (lambda v: 0.0 <= v < 1.0, ("", "a probability in [0, 1)")),
    "fraction": (lambda v: 0.0 <= v <= 1.0, ("", "a number in [0, 1]")),
    "open_fraction": (lambda v: 0.0 < v < 1.0, ("", "a number in (0, 1)")),
}


def option_field(default: Any, help: str, choices: tuple[str, ...] | None = None,  # noqa: A002
                 *, check: str | None = None, minimum: float | None = None,
                 maximum: float | None = None, **metadata: Any) -> Any:
    """A dataclass field that is an option. `choices` (a str: one of them; a tuple of str: a
    subset), `check` (a name in CHECKS) and `minimum`/`maximum` are enforced wherever a value comes
    from; `excludes` names a sibling option the two of which set one thing (a warm-up in steps or
    as a share): giving this one turns that one off (None) unless it is given too. Other metadata
    is for the command line (`flag`, `metavar`, `default_help`, `device_default`,
    `repeatable`)."""
    return dataclasses.field(default=default, metadata={
        "help": help, "choices": choices, "check": check, "minimum": minimum, "maximum": maximum,
        **metadata})


