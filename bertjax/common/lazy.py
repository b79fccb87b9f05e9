"""Flat public names that import their module on first use (PEP 562), written as the explicit
imports a type checker and an editor read:

    from typing import TYPE_CHECKING
    if TYPE_CHECKING:
        from bertjax.use.fill_mask import Prediction, fill_mask
    __getattr__, __dir__, __all__ = lazy_imports(__name__, __file__)

So `import bertjax` loads no JAX, `bertjax.fill_mask` is one obvious name for the function, and
go-to-definition and mypy follow the same lines the run time imports from.
"""

from __future__ import annotations

import ast
import importlib
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any


def imported_under_type_checking(init_file: str | Path) -> dict[str, str]:
    """name -> module of every `from module import name` in the top-level `if TYPE_CHECKING:`
    block of `init_file`."""
    names: dict[str, str] = {}
    for node in ast.parse(Path(init_file).read_text()).body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING",
                                                                   "typing.TYPE_CHECKING"):
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    names |= {alias.asname or alias.name: stmt.module for alias in stmt.names}
    return names


def lazy_imports(package: str, init_file: str
                 ) -> tuple[Callable[[str], Any], Callable[[], list[str]], list[str]]:
    """(`__getattr__`, `__dir__`, the lazy names) of a package whose `__init__.py` (`init_file`)
    imports its flat names under `if TYPE_CHECKING:`: each is imported on first use."""
    names = imported_under_type_checking(init_file)
    return (*lazy_names(package, names), sorted(names))


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
