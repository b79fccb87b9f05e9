"""Settings dataclasses as options: each field is written once (name, type, default, help, range)
and read from there by the command line, a TOML/YAML/JSON config file and the Python API.

A settings class is a frozen dataclass. A field with `help` metadata (`option_field`) is an
option; a field whose type is a settings class is a section, its options named `section.field`.
Fields without help (a sub-command's mode, a derived value) are not options.

    option_field(default, help, ...)     a field carrying its option's help, choices and range
    options(klass)                       an Option per option of a settings class, sections nested
    parse_value(option, value, source)   a string or a loaded value as the option's type, checked
    build(klass, values, source=)        `klass` from {"section.field": value} over its defaults
    load_file(path, klass)               a TOML/YAML/JSON file of `klass`'s settings as
                                         {"section.field": value}, each value as written
    to_toml(values)                      nested {section: {field: value}} as TOML that
                                         `load_file` reads back

On the command line an option is `--` and its name with `_` written `-` (`--optim.learning-rate`,
`--batch-size`); in a file, the field's own name under its section's table. No framework import.
"""

from __future__ import annotations

import builtins
import dataclasses
import difflib
import json
import math
import tomllib
from collections.abc import Callable, Mapping
from pathlib import Path
from types import UnionType
from typing import Any, Union, get_args, get_origin, get_type_hints

from bertjax.common.fields import CHECKS, option_field
from bertjax.common.files import read_text
from bertjax.errors import InputError

__all__ = ["CHECKS", "CONFIG_SUFFIXES", "Option", "as_values", "build", "check", "expected",
           "flag_of", "flatten", "load_file", "nested", "option_field", "options", "parse_value",
           "sections", "to_toml", "unknown_option"]

CONFIG_SUFFIXES = {".toml": "TOML", ".json": "JSON", ".yaml": "YAML", ".yml": "YAML"}

@dataclasses.dataclass(frozen=True)
class Option:
    """One option of a settings class, read from its field, type hint and metadata."""

    name: str  # the field's dotted path: "train.steps", "batch_size"
    type: type  # bool, int, float, str or tuple (`X | None` gives X)
    default: Any
    help: str
    choices: tuple[str, ...] | None
    metadata: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    item: builtins.type = str  # a tuple's items: str, int, float, or tuple (pairs, left as read)
    optional: bool = False  # None is a value of it (its type is `X | None`)

    @property
    def flag(self) -> str:
        return flag_of(self)


def flag_of(option: Option) -> str:
    """The option's command-line name: its metadata's `flag`, else `--` + the name, `_` as `-`."""
    return option.metadata.get("flag") or "--" + option.name.replace("_", "-")


def _plain_type(hint: Any) -> tuple[type, type]:
    """(type, item type): (int, str) for `int` and `int | None`, (tuple, float) for
    `tuple[float, ...]`."""
    if get_origin(hint) in (UnionType, Union):
        hint = next(arg for arg in get_args(hint) if arg is not type(None))
    args = get_args(hint)
    item = (get_origin(args[0]) or args[0]) if args else str
    return get_origin(hint) or hint, item


def sections(klass: type) -> dict[str, type]:
    """The fields of settings class `klass` that are settings classes themselves."""
    hints = get_type_hints(klass)
    return {f.name: hints[f.name] for f in dataclasses.fields(klass)
            if dataclasses.is_dataclass(hints[f.name])}


def options(klass: type, defaults: Any = None, prefix: str = "", *,
            every_field: bool = False) -> list[Option]:
    """Every option of `klass` (sections' options named `section.field`), in field order, with
    its default from the instance `defaults` (else the field's); with `every_field`, its fields
    without help too (to parse a value of any field: `BertConfig` overrides)."""
    if defaults is None:
        defaults = klass()
    hints, nested = get_type_hints(klass), sections(klass)
    found: list[Option] = []
    for f in dataclasses.fields(klass):
        if f.name in nested:
            found += options(nested[f.name], getattr(defaults, f.name), f"{prefix}{f.name}.",
                             every_field=every_field)
        elif f.metadata.get("help") or every_field:
            kind, item = _plain_type(hints[f.name])
            found.append(Option(prefix + f.name, kind, getattr(defaults, f.name),
                                f.metadata.get("help", ""), f.metadata.get("choices"), f.metadata,
                                item, type(None) in get_args(hints[f.name])))
    return found


def unknown_option(name: str, source: str | None, valid: list[str]) -> InputError:
    """The error for an option name that does not exist, naming the closest valid ones."""
    close = difflib.get_close_matches(name, valid, n=3)
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    where = f"{source}: " if source else ""
    return InputError(f"{where}unknown option {name!r}{hint}; valid options are: "
                      f"{', '.join(valid)}")


# --- values ---------------------------------------------------------------------------------


def _parse_bool(value: Any) -> bool:
    if isinstance(value, str):
        if value.lower() not in ("true", "false", "1", "0", "yes", "no"):
            raise InputError(value)
        return value.lower() in ("true", "1", "yes")
    if not isinstance(value, bool | int) or value not in (0, 1):
        raise InputError(value)
    return bool(value)


def _parse_int(value: Any) -> int:
    if isinstance(value, bool):
        raise InputError(value)
    if isinstance(value, float) and not value.is_integer():
        raise InputError(value)
    if isinstance(value, str):
        number = float(value)  # accepts "1e3"
        if not number.is_integer():
            raise InputError(value)
        return int(number)
    return int(value)


def _parse_float(value: Any) -> float:
    if isinstance(value, bool):
        raise InputError(value)
    number = float(value)
    if not math.isfinite(number):
        raise InputError(value)
    return number


def _parse_str(value: Any) -> str:
    if not isinstance(value, str):
        raise InputError(value)
    return value


_PARSERS: dict[type, Callable[[Any], Any]] = {
    bool: _parse_bool, int: _parse_int, float: _parse_float, str: _parse_str,
}
_KINDS = {bool: "true or false", int: "an integer", float: "a finite number", str: "text"}


def _parse_tuple(value: Any, item: type) -> tuple:
    """A list in a file or a tuple; a string "a,b" (one command-line value) splits at commas.
    Items are parsed as `item`; pairs (`item` tuple) are kept as read, lists as tuples."""
    if isinstance(value, str):
        value = [v.strip() for v in value.split(",") if v.strip()]
    if not isinstance(value, list | tuple):
        raise InputError(value)
    if item is tuple:
        return tuple(tuple(v) if isinstance(v, list) else v for v in value)
    return tuple(_PARSERS[item](v) for v in value)


def expected(option: Option) -> str:
    """What the option takes, in words: "a positive integer", "one of a, b", "a list of
    numbers in (0, 1)"."""
    if option.choices is not None:
        return (f"one of {', '.join(map(str, option.choices))}" if option.type is str
                else f"a comma-separated subset of {', '.join(option.choices)}")
    kind = option.item if option.type is tuple else option.type
    words = _number_words(option.metadata, kind) if kind in (int, float) else _KINDS.get(kind, "text")
    if option.type is not tuple:
        return words
    if kind is tuple:
        return "a list of pairs"
    first, _, rest = words.partition(" ")  # "a number above 0" -> "a list of numbers above 0"
    noun, _, tail = rest.partition(" ")
    return f"a list of {noun}s" + (f" {tail}" if tail else "")


def _number_words(meta: Mapping[str, Any], kind: type) -> str:
    """"a positive integer", "an integer from 32 to 100,000", "a number in [0, 1)"."""
    low, high = meta.get("minimum"), meta.get("maximum")
    words = CHECKS[meta["check"]][1][kind is float] if meta.get("check") else ""
    join = " and" if words else ""
    words = words or ("an integer" if kind is int else "a finite number" if low is None and
                      high is None else "a number")
    if low is not None and high is not None:
        words += f"{join} from {low:,} to {high:,}"
    elif low is not None or high is not None:
        words += f"{join} >= {low:,}" if low is not None else f"{join} <= {high:,}"
    return words


def parse_value(option: Option, value: Any, source: str | None = None) -> Any:
    """`value` (a string from a command line, or a value loaded from a file) as the option's
    type, in its choices and range; otherwise an InputError naming `source`, the option and what
    it takes."""
    if value is None and option.optional:
        return None
    try:
        if option.type is tuple:
            parsed = _parse_tuple(value, option.item)
            if option.choices is not None:  # a subset: each name once, in the order given
                parsed = tuple(dict.fromkeys(parsed))
        else:
            parsed = _PARSERS[option.type](value)
        if not _accepts(option, parsed):
            raise InputError(value)
    except (TypeError, ValueError):
        where = f"{source}: {option.name}" if source else option.name
        raise InputError(f"{where} must be {expected(option)}, got {value!r}") from None
    return parsed


def _accepts(option: Option, value: Any) -> bool:
    """Whether a parsed value is in the option's choices and range."""
    meta = option.metadata
    items = value if option.type is tuple else (value,)
    if option.choices is not None:
        return bool(items) and all(v in option.choices for v in items)
    if (option.item if option.type is tuple else option.type) not in (int, float):
        return True
    low, high = meta.get("minimum"), meta.get("maximum")
    return all((not meta.get("check") or CHECKS[meta["check"]][0](v))
               and (low is None or v >= low) and (high is None or v <= high) for v in items)


def check(settings: Any) -> None:
    """InputError naming the first option of `settings` (sections included) whose value is not of
    its type, choices or range: for settings made in Python, which no parser has read."""
    for option in options(type(settings), settings):
        parse_value(option, option.default)  # `default` is the instance's value here


# --- building settings ----------------------------------------------------------------------


def nested(values: Mapping[str, Any]) -> dict[str, Any]:
    """{"a.b": 1} -> {"a": {"b": 1}}."""
    out: dict[str, Any] = {}
    for name, value in values.items():
        *path, leaf = name.split(".")
        node = out
        for part in path:
            node = node.setdefault(part, {})
        node[leaf] = value
    return out


def flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a": {"b": 1}} -> {"a.b": 1}."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        if isinstance(value, Mapping):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out


def build(klass: type, values: Mapping[str, Any], *, base: Any = None,
          source: str | None = None) -> Any:
    """`klass` with `values` ({"section.field": value}, strings or loaded values) over `base`'s
    (or the defaults'); every name is checked, every value parsed. A section that checks itself
    has its errors prefixed with the section's name."""
    base = klass() if base is None else base
    by_name = {o.name: o for o in options(klass)}
    fields = as_values(base)
    for name, value in values.items():
        if name not in by_name:
            raise unknown_option(name, source, list(by_name))
        _set(fields, name, parse_value(by_name[name], value, source))
    for name in values:  # a given option turns off the one it excludes, unless that is given
        excluded = by_name[name].metadata.get("excludes")
        sibling = f"{name.rpartition('.')[0]}.{excluded}".lstrip(".") if excluded else None
        if sibling is not None and sibling not in values:
            _set(fields, sibling, None)
    return _construct(klass, fields, source)


def _set(fields: dict[str, Any], name: str, value: Any) -> None:
    """`fields` (nested dicts) with the dotted `name` set to `value`."""
    *path, leaf = name.split(".")
    node = fields
    for part in path:
        node = node[part]
    node[leaf] = value


def as_values(settings: Any) -> dict[str, Any]:
    """A settings instance as nested dicts of its field values (sections as dicts)."""
    nested_types = sections(type(settings))
    return {f.name: (as_values(getattr(settings, f.name)) if f.name in nested_types
                     else getattr(settings, f.name)) for f in dataclasses.fields(settings)}


def _construct(klass: type, fields: dict[str, Any], source: str | None, prefix: str = "") -> Any:
    """`klass(**fields)`, sections built first; a section's own error names the section (its
    message names the field) and `source`."""
    nested_types = sections(klass)
    made = {name: (_construct(nested_types[name], value, source, f"{prefix}{name}.")
                   if name in nested_types else value) for name, value in fields.items()}
    try:
        return klass(**made)
    except InputError as err:
        message = f"{prefix}{err}"
        raise InputError(f"{source}: {message}" if source else message) from None


# --- files ------------------------------------------------------------------------------------


def load_file(path: str | Path, klass: type | None = None, what: str = "--config") -> dict[str, Any]:
    """A TOML (.toml), JSON (.json) or YAML (.yaml/.yml) config file as {"section.field": value};
    any problem is one InputError naming `what`, the file and the fix. YAML's plain scalars are
    read as the text written, so each value is read by its field's type (`parse_value`): YAML 1.1
    would make `seed: 0123` the octal 83 and `corpus: no` False. Given `klass`, a table where a
    value belongs, or a value where a section's table belongs, is an error naming the setting."""
    path = Path(path)
    text = read_text(path, what=what)  # missing, a directory, binary or not UTF-8: an error
    kind = CONFIG_SUFFIXES.get(path.suffix.lower())
    if kind is None:
        raise InputError(f"{what} {path}: unknown format {path.suffix or '(no suffix)'!r}; give "
                         "a .toml, .json, .yaml or .yml file")
    parse, errors = _file_parser(kind, f"{what} {path}")
    try:
        data = parse(text)
    except errors as err:
        reason = " ".join(str(err).split())  # YAML's are several lines
        raise InputError(f"{what} {path} is not valid {kind} ({reason}); fix the file") from None
    if data is None and kind == "YAML":
        data = {}
    if not isinstance(data, dict):
        raise InputError(f"{what} {path} must hold a table of options, not a "
                         f"{type(data).__name__}")
    return flatten(data) if klass is None else _flatten_settings(klass, data, f"{what} {path}")


def _flatten_settings(klass: type, data: Mapping[str, Any], where: str,
                      prefix: str = "") -> dict[str, Any]:
    """`flatten` along `klass`'s sections: a section must be a table, an option's value not (an
    unknown name is left for `build` to name, with the closest valid ones)."""
    nested_types = sections(klass)
    own = {o.name: o for o in options(klass) if "." not in o.name}  # this level's options
    out: dict[str, Any] = {}
    for key, value in data.items():
        name = f"{prefix}{key}"
        if key in nested_types:
            if not isinstance(value, Mapping):
                raise InputError(f"{where}: {name} is a section of options (a [{name}] table), "
                                 f"not a value: got {value!r}; write its options under [{name}]")
            out.update(_flatten_settings(nested_types[key], value, where, f"{name}."))
        elif key in own and isinstance(value, Mapping):
            raise InputError(f"{where}: {name} must be {expected(own[key])}, got a table "
                             f"{dict(value)!r}")
        elif isinstance(value, Mapping):
            out.update(flatten(value, f"{name}."))
        else:
            out[name] = value
    return out


def _file_parser(kind: str, where: str) -> tuple[Callable[[str], Any], tuple[type[Exception], ...]]:
    """(parse(text), the errors it raises for bad text) of a config format."""
    if kind == "TOML":
        return tomllib.loads, (tomllib.TOMLDecodeError,)
    if kind == "JSON":
        return json.loads, (json.JSONDecodeError,)
    try:
        import yaml  # optional dependency
    except ImportError:
        raise InputError(f"{where}: reading YAML needs PyYAML (pip install pyyaml); or give a "
                         ".toml or .json file") from None
    return lambda text: yaml.load(text, Loader=_text_scalars(yaml)), (yaml.YAMLError,)


def _text_scalars(yaml: Any) -> type:
    """PyYAML's safe loader with plain scalars left as text (null aside): no YAML 1.1 octal,
    sexagesimal or yes/no booleans; `parse_value` reads each by its field's type."""
    null = "tag:yaml.org,2002:null"

    class TextLoader(yaml.SafeLoader):
        yaml_implicit_resolvers = {
            first: [(tag, regexp) for tag, regexp in resolvers if tag == null]
            for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}

    return TextLoader


def to_toml(values: Mapping[str, Any]) -> str:
    """Nested {section: {field: value}} (top-level values first) as TOML that `load_file` reads
    back; None (an unset optional value) is left out, which reads back as None."""
    scalars = {k: v for k, v in values.items() if not isinstance(v, Mapping) and v is not None}
    lines = [f"{key} = {_toml_value(value)}" for key, value in scalars.items()]
    for section, fields in values.items():
        if isinstance(fields, Mapping):
            lines += ([""] if lines else []) + [f"[{section}]"]
            lines += [f"{key} = {_toml_value(value)}" for key, value in fields.items()
                      if value is not None]
    return "\n".join(lines) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, tuple | list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(value)  # strings, numbers and booleans are written as JSON writes them
