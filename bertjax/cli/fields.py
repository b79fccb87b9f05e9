"""Command-line options derived from a settings dataclass, so each option is written once: its name,
type, default, help and choices are the field's (read by `bertjax.settings.field_options`).

A field with a `help` in its metadata is an option `--field-name` (dest: the field's name); other
metadata it may carry:

    choices         a str field: one of these; a tuple[str, ...] field: a comma-separated subset
    check           "positive", "non_negative" or "probability": the range the parser enforces
    device_default  (CPU, GPU/TPU): the default when the field is None, for --help
    default_help    how --help says the default when it is resolved later ("every core")
    flag, metavar   the option's name and metavar when not derived from the field's name
    repeatable      given once per value (action "append"); the parser comes from the caller

`bertjax pretrain` reads its sections the same way (`run_config.options`) but parses values later,
after its config file (`run_config.parse_value`), so it adds its `--section.field` options itself.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from bertjax.cli.argtypes import finite_float, non_negative_int, positive_int, probability, subset_of
from bertjax.settings import Option, field_options, parse_value

CHECKS: dict[str, Callable[[str], Any]] = {
    "positive": positive_int, "non_negative": non_negative_int, "probability": probability,
}


def command_options(klass: type, exclude: tuple[str, ...] = ()) -> list[Option]:
    """The fields of `klass` that are options (those with help), less `exclude`."""
    return [o for o in field_options(klass) if o.help and o.name not in exclude]


def add_field_arguments(
    parser: argparse.ArgumentParser,
    klass: type,
    *,
    exclude: tuple[str, ...] = (),
    parsers: Mapping[str, Callable[[str], Any]] | None = None,
) -> None:
    """Add an option for each field of the dataclass `klass` with help, except `exclude`;
    `parsers` gives the value parser of fields the metadata cannot describe (e.g. NAME=VALUE)."""
    parsers = parsers or {}
    for option in command_options(klass, exclude):
        flag = _flag(option)
        kwargs: dict[str, Any] = {"dest": option.name, "help": option_help(option)}
        if option.metadata.get("repeatable"):
            kwargs.update(action="append", default=[], type=parsers[option.name])
        else:
            kwargs.update(default=option.default, type=parsers.get(option.name) or _parser(option))
        if option.choices and option.type is str:
            kwargs["choices"] = option.choices  # argparse lists them in usage and errors
        else:
            kwargs["metavar"] = option.metadata.get(
                "metavar", flag.lstrip("-").replace("-", "_").upper())
        parser.add_argument(flag, **kwargs)


def _flag(option: Option) -> str:
    return option.metadata.get("flag", "--" + option.name.replace("_", "-"))


def _parser(option: Option) -> Callable[[str], Any] | None:
    """The argparse `type` of an option: its check, a subset of its choices, or its type."""
    if "check" in option.metadata:
        return CHECKS[option.metadata["check"]]
    if option.type is tuple:
        return subset_of(option.choices)
    if option.type is float:
        return finite_float  # no nan, no inf
    if option.type is int:
        return int  # argparse: "invalid int value: 'x'"
    if option.type is str:
        return None

    def parse(text: str) -> Any:  # bool ("true", "no", ...) as in a run's options
        try:
            return parse_value(option, text, _flag(option))
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    return parse


def option_help(option: Option) -> str:
    """The help and its default, escaped for argparse: "tokens per sequence (default: 128)"."""
    meta = option.metadata
    if "default_help" in meta:
        default = meta["default_help"]
    elif "device_default" in meta:
        cpu, accelerator = (_show(v) for v in meta["device_default"])
        default = f"{cpu} on CPU, {accelerator} on GPU/TPU"
    else:
        default = _show(option.default) if option.default not in (None, ()) else None
    text = option.help if default is None else f"{option.help} (default: {default})"
    return text.replace("%", "%%")  # argparse %-formats help strings


def _show(value: Any) -> str:
    return ",".join(value) if isinstance(value, tuple) else str(value)


def device_defaults_table(klass: type, exclude: tuple[str, ...] = ()) -> str:
    """The options of `klass` whose default depends on the device, as a table for --help."""
    rows = [(_flag(o), *(_show(v) for v in o.metadata["device_default"]))
            for o in command_options(klass, exclude) if "device_default" in o.metadata]
    width = max(len(r[0]) for r in [("option",), *rows]) + 2
    lines = [f"{'option':<{width}}{'CPU':<12}GPU / TPU"]
    lines += [f"{flag:<{width}}{cpu:<12}{accelerator}" for flag, cpu, accelerator in rows]
    return "\n".join("    " + line for line in lines)


def settings_from_args(klass: type, args: argparse.Namespace, **fixed: Any) -> Any:
    """`klass(**fixed, field=value...)` from the parsed options (absent ones keep their default;
    lists from repeatable options become tuples)."""
    values = {o.name: getattr(args, o.name) for o in command_options(klass)
              if hasattr(args, o.name)}
    values = {k: tuple(v) if isinstance(v, list) else v for k, v in values.items()}
    return klass(**fixed, **values)
