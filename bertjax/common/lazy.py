"""Flat public names that import their module on first use (PEP 562), and old names that still
work with a warning naming the new one.

    __getattr__, __dir__ = lazy_names(__name__, {"fill_mask": "bertjax.use.fill_mask"},
                                      moved={"save_hf": ("bertjax.pretrained", "save_pretrained")})

So `import bertjax` loads no JAX, while `bertjax.fill_mask` is one obvious name for the function.
"""

from __future__ import annotations

import importlib
import warnings
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    package: str, names: Mapping[str, str], *, moved: Mapping[str, tuple[str, str]] | None = None,
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`: each of `names` (name -> module) is that module's
    attribute of the same name; each of `moved` (old name -> (module, new name)) is the new one,
    with a DeprecationWarning naming it."""
    moved = dict(moved or {})

    def getattr_(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        if name in moved:
            module, new = moved[name]
            where = package if new in names else module  # the new name where users find it
            warnings.warn(f"{package}.{name} is deprecated: use {where}.{new}",
                          DeprecationWarning, stacklevel=2)
            return getattr(importlib.import_module(module), new)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        module = importlib.import_module(package)
        return sorted({*vars(module), *names})

    return getattr_, dir_
