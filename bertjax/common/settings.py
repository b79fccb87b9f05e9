"""Settings dataclasses as options: each field is written once (name, type, default, help,
choices) and read from there by the command line, a run's config file and its overrides.

No framework import: `bertjax pretrain --help` and the run configuration load without JAX.

    option_field(default, help, choices)   a dataclass field carrying its option's help
    field_options(klass)                   an `Option` per field of a settings dataclass
    parse_value(option, value)             a string (or a loaded JSON/TOML value) as its type
    unknown_option(name, source, valid)    the error for a name that is no option
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

__all__ = ["Option", "field_options", "option_field", "parse_value", "unknown_option"]


def option_field(default: Any, help: str, choices: tuple[str, ...] | None = None) -> Any:  # noqa: A002
    """A dataclass field whose metadata carries its option's help and choices."""
    return dataclasses.field(default=default, metadata={"help": help, "choices": choices})


@dataclasses.dataclass(frozen=True)
class Option:
    """One settings field as an option: read from the field, its type hint and its metadata."""

    name: str  # "section.field" for a run, the field's name elsewhere
    type: type  # bool, int, float, str or tuple (`X | None` gives X)
    default: Any
    help: str
    choices: tuple[str, ...] | None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # the field's own


def field_options(klass: type, *, prefix: str = "", defaults: Any = None,
                  skip: tuple[str, ...] = ()) -> list[Option]:
    """An Option per field of the dataclass `klass` not in `skip`, named `prefix + field`, its
    default taken from the instance `defaults` (else the field's)."""
    hints = get_type_hints(klass)
    return [
        Option(prefix + f.name, _plain_type(hints[f.name]),
               getattr(defaults, f.name) if defaults is not None else f.default,
               f.metadata.get("help", ""), f.metadata.get("choices"), f.metadata)
        for f in dataclasses.fields(klass) if prefix + f.name not in skip
    ]


def _plain_type(hint: Any) -> type:
    """int for `int` and `int | None`, tuple for `tuple[str, ...]`."""
    if get_origin(hint) in (UnionType, Union):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    return get_origin(hint) or hint


def unknown_option(name: str, source: str, valid: list[str]) -> ValueError:
    """The error for an option name that does not exist, naming the closest valid ones."""
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    return ValueError(
        f"{source}: unknown option {name!r}{hint}; valid options are: {', '.join(valid)}"
    )


def _parse_bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise ValueError(value)
        return value.lower() in ("true", "1", "yes")
    if not isinstance(value, bool | int) or value not in (0, 1):
        raise ValueError(value)
    return bool(value)


def _parse_int(value: Any) -> int:
    if isinstance(value, float) and not value.is_integer():
        raise ValueError(value)
    if isinstance(value, str):
        number = float(value)  # accepts "1e3"
        if not number.is_integer():
            raise ValueError(value)
        return int(number)
    return int(value)


def parse_value(option: Option, value: Any, source: str = "override") -> Any:
    """Convert a string or loaded value to the option's type, with a clear error."""
    kind = option.type
    try:
        if kind is bool:
            return _parse_bool(value)
        if kind is int:
            return _parse_int(value)
        if kind is float:
            return float(value)
        if kind is tuple:  # "a,b" on a command line, a list in a file
            return tuple(v.strip() for v in value.split(",")) if isinstance(value, str) else tuple(value)
        return str(value)
    except (TypeError, ValueError):
        raise ValueError(
            f"{source}: {option.name} must be {kind.__name__}, got {value!r}"
        ) from None
