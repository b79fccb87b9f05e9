"""A command's options from its settings dataclass (`bertjax.common.options`), the same way for
every job: `bertjax pretrain`, `bertjax finetune` and each `bertjax bench` command.

    add_settings_arguments(parser, Settings)   --config FILE, --print-config and one option per
                                               setting (sections as groups)
    settings_from_args(args, Settings)         defaults <- --config FILE <- the options given
    print_config(settings)                     --print-config's TOML (read back by --config)

An option is `--name` with `_` written `-`, a section's `--section.name`; a bool is a switch
with its `--no-` form; a list takes "a,b"; `--config` reads TOML, YAML or JSON with the fields'
own names. Values are parsed and range-checked as argparse reads them, so a bad one is one line
(exit status 2) before any work.
"""

from __future__ import annotations

import argparse
import difflib
from collections.abc import Callable, Mapping
from typing import Any

from bertjax.common.options import (
    Option,
    build,
    expected,
    flag_of,
    load_file,
    nested,
    options,
    parse_value,
    sections,
    to_toml,
)
from bertjax.errors import InputError

CONFIG_DEST, PRINT_DEST = "config", "print_config"


def add_settings_arguments(
    parser: argparse.ArgumentParser,
    klass: type,
    *,
    defaults: Any = None,
    exclude: tuple[str, ...] = (),
    parsers: Mapping[str, Callable[[str], Any]] | None = None,
    notes: Mapping[str, str] | None = None,
) -> None:
    """`--config`, `--print-config` and an option per setting of `klass` not in `exclude` (by
    dotted name); `parsers` parse the items of repeatable options (`--set NAME=VALUE`); `notes`
    (by dotted name) follow an option's default in its help ("default: 0.4; modernbert: 0.3")."""
    parser.allow_abbrev = False  # --optim.learning must not silently mean --optim.learning-rate
    parser.add_argument("--config", metavar="FILE", dest=CONFIG_DEST, default=None,
                        help="read settings from a TOML, YAML or JSON file (options given "
                             "beside it win)")
    parser.add_argument("--print-config", action="store_true", dest=PRINT_DEST,
                        help="print the resolved settings as TOML (what --config reads) and exit")
    titles = {name: (klass_.__doc__ or "").strip().splitlines()[0]
              for name, klass_ in sections(klass).items()}
    groups: dict[str, Any] = {}
    for option in options(klass, defaults):
        if option.name in exclude:
            continue
        section = option.name.split(".")[0] if "." in option.name else None
        if section is not None and section not in groups:
            groups[section] = parser.add_argument_group(f"[{section}] options", titles[section])
        group = parser if section is None else groups[section]
        _add_option(group, option, (parsers or {}).get(option.name),
                    (notes or {}).get(option.name))


def _add_option(group: Any, option: Option, item_parser: Callable[[str], Any] | None,
                note: str | None = None) -> None:
    kwargs: dict[str, Any] = {"dest": option.name, "default": argparse.SUPPRESS,
                              "help": option_help(option, note)}
    if option.metadata.get("repeatable"):
        kwargs.update(action="append", type=item_parser, metavar=option.metadata.get("metavar"))
    elif option.type is tuple:  # several values, each one of them or a comma-separated few
        kwargs.update(nargs="+", type=_value_parser(option),
                      metavar=option.metadata.get("metavar") or _metavar(option))
    elif option.type is bool:
        kwargs["action"] = argparse.BooleanOptionalAction
    else:
        kwargs.update(type=_value_parser(option),
                      metavar=option.metadata.get("metavar") or _metavar(option))
    group.add_argument(flag_of(option), **kwargs)


def _metavar(option: Option) -> str:
    if option.choices is not None:
        return "{" + ",".join(option.choices) + "}"
    kind = option.item if option.type is tuple else option.type
    return {int: "INT", float: "FLOAT"}.get(kind, "TEXT")


def _value_parser(option: Option) -> Callable[[str], Any]:
    """argparse's `type`: the value parsed and checked, or its one-line error. A list's value
    is one or more of its items: names split at commas ("a,b"), free text (paths) never."""

    def parse(text: str) -> Any:
        value: Any = text
        if option.type is tuple and option.item is str and option.choices is None:
            value = [text]
        try:
            return parse_value(option, value)
        except InputError:
            raise argparse.ArgumentTypeError(f"expected {expected(option)}, got {text!r}") from None

    parse.__name__ = option.type.__name__  # argparse names it in its messages
    return parse


def option_help(option: Option, note: str | None = None) -> str:
    """The help and its default (and `note` after it), escaped for argparse: "tokens per
    sequence (default: 128)"."""
    meta = option.metadata
    if "default_help" in meta:
        default = meta["default_help"]
    elif "device_default" in meta:
        cpu, accelerator = (_show(v) for v in meta["device_default"])
        default = f"{cpu} on CPU, {accelerator} on GPU/TPU"
    else:
        default = _show(option.default) if option.default not in (None, ()) else None
    said = ([] if default is None else [f"default: {default}"]) + ([note] if note else [])
    text = f"{option.help} ({'; '.join(said)})" if said else option.help
    return text.replace("%", "%%")  # argparse %-formats help strings


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return ",".join(map(str, value))
    return str(value).lower() if isinstance(value, bool) else str(value)


def settings_from_args(args: argparse.Namespace, klass: type, *, base: Any = None,
                       exclude: tuple[str, ...] = ()) -> Any:
    """`klass` from `base` (default: its defaults), then `--config FILE`, then the options given
    (lists from repeatable options become tuples)."""
    settings = klass() if base is None else base
    path = getattr(args, CONFIG_DEST, None)
    if path is not None:
        values = load_file(path, klass)
        excluded = sorted(set(values) & set(exclude))
        if excluded:
            raise InputError(f"--config {path}: {', '.join(excluded)} is not a setting of this "
                             "command; leave it out of the file")
        settings = build(klass, values, base=settings, source=f"--config {path}")
    given = {o.name: _given(o, getattr(args, o.name)) for o in options(klass)
             if o.name not in exclude and hasattr(args, o.name)}
    return build(klass, given, base=settings) if given else settings


def _given(option: Option, value: Any) -> Any:
    """A parsed option as its setting: a list option's values (each parsed as a tuple) joined,
    a repeatable option's items as a tuple."""
    if option.metadata.get("repeatable"):
        return tuple(value)
    if option.type is tuple:
        return tuple(v for part in value for v in part)
    return value


def print_config(settings: Any, exclude: tuple[str, ...] = ()) -> str:
    """The settings' options (not `exclude`) as TOML that `--config` reads back (resolved where
    the class resolves its defaults: `to_dict()`)."""
    to_dict = getattr(settings, "to_dict", None)
    if callable(to_dict):
        return to_toml(to_dict())
    return to_toml(nested({o.name: o.default for o in options(type(settings), settings)
                           if o.name not in exclude}))


def explain_unknown(arguments: list[str], parser: argparse.ArgumentParser) -> str:
    """The error for options a command does not know: the closest of the ones its `parser`
    takes."""
    return _closest(arguments, sorted({s for a in parser._actions for s in a.option_strings}))


def explain_unknown_in(arguments: list[str], classes: list[type],
                       extra: tuple[str, ...] = ()) -> str:
    """`explain_unknown` for a command whose sub-commands take the settings of `classes`."""
    return _closest(arguments, sorted({flag_of(o) for klass in classes for o in options(klass)}
                                      | set(extra)))


def _closest(arguments: list[str], flags: list[str]) -> str:
    for argument in arguments:
        if not argument.startswith("--"):
            continue
        name = argument.split("=", 1)[0]
        if name in flags:  # another sub-command's
            return f"{name} is not an option of this command"
        if name.replace("_", "-") in flags:
            return (f"unknown option {name}: options are written with '-', not '_': "
                    f"{name.replace('_', '-')}")
        close = difflib.get_close_matches(name, flags, n=3)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        return f"unknown option {name}{hint}"
    return f"unrecognized arguments: {' '.join(arguments)}"
