"""Flat public names that import their module on first use (PEP 562).

    __getattr__, __dir__ = lazy_names(__name__, {"fill_mask": "bertjax.use.fill_mask"})

So `import bertjax` loads no JAX, while `bertjax.fill_mask` is one obvious name for the function.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(package: str, names: Mapping[str, str]
               ) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """(`__getattr__`, `__dir__`) for `package`: each of `names` (name -> module) is that module's
    attribute of the same name."""

    def getattr_(name: str) -> Any:
        if name in names:
            return getattr(importlib.import_module(names[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def dir_() -> list[str]:
        module = importlib.import_module(package)
        return sorted({*vars(module), *names})

    return getattr_, dir_
