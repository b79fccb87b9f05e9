"""Import structure as tests: no import circle among bertjax, bert_torch and parity; checkpoint
formats that never import the model; a model that imports no file format.

Imports are read from the source (AST) at any depth: an import inside a function closes a circle
as surely as one at the top, only later. `from a import b` imports the module `a.b` if there is
one, else the module `a` (b is a name in it); importing `a.b.c` from outside package `a.b` also
runs `a.b`'s `__init__`, so that counts as an import of `a.b` too.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("bertjax", "bert_torch", "parity")
# bertjax.errors imports nothing: the typed error every layer raises (the config's ranges too)
CORE = {"bertjax", "bertjax.config", "bertjax.model", "bertjax.heads", "bertjax.numerics",
        "bertjax.inputs", "bertjax.losses", "bertjax.lazy", "bertjax.attention", "bertjax.errors"}



def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _imports(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (source `source`) imports, anywhere in it."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                package = name.split(".") if is_package else name.split(".")[:-1]
                base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
            found |= {f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names}
    own = {name, *_ancestors(name)}  # packages already being imported when this module runs
    with_inits = found | {a for m in found for a in _ancestors(m)}
    return {m for m in with_inits if m in known and m not in own}


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """module -> the modules it imports, for every module of `packages` under `root`."""
    files = {_module_name(p, root): p for pkg in packages for p in (root / pkg).rglob("*.py")}
    known = set(files)
    return {name: _imports(path.read_text(), name, path.name == "__init__.py", known)
            for name, path in files.items()}


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every strongly connected group of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    circles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                circles.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(circles)


GRAPH = import_graph(ROOT, PACKAGES)


def test_no_import_circle_anywhere():
    circles = import_circles(GRAPH)
    assert not circles, "import circles (each group imports itself round):\n" + "\n".join(
        "  " + " <-> ".join(group) for group in circles)


def test_the_circle_search_finds_the_circle_this_tree_once_had(tmp_path):
    """model -> io.hf -> io.weights -> model, closed by imports inside functions, `from x import
    name` forms and a package `__init__`: each is found."""
    files = {
        "pkg/__init__.py": "",
        "pkg/model.py": "def save(m):\n    from pkg.io.hf import save_hf\n    return save_hf(m)\n",
        "pkg/io/__init__.py": "",
        "pkg/io/hf.py": "from pkg.io.weights import to_numpy\n",
        "pkg/io/weights.py": "def default():\n    from pkg.model import Bert\n",
        "pkg/data/__init__.py": "from pkg.data.shards import write\n",
        "pkg/data/shards.py": "from . import tokenizer\n",
        "pkg/data/tokenizer.py": "import pkg.use.encode\n",
        "pkg/use/__init__.py": "",
        "pkg/use/encode.py": "from pkg.data import tokenizer\n",  # the package __init__ runs
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert import_circles(import_graph(tmp_path, ("pkg",))) == [
        ["pkg.data", "pkg.data.shards", "pkg.data.tokenizer", "pkg.use.encode"],
        ["pkg.io.hf", "pkg.io.weights", "pkg.model"],
    ]


def test_checkpoint_formats_never_import_the_model():
    """Formats know names and arrays; the class comes in as an argument. Only the loading API
    (`io.pretrained`, where the default class lives) imports `bertjax.model`."""
    formats = [m for m in GRAPH if m.startswith("bertjax.io.") and m != "bertjax.pretrained"]
    assert {"bertjax.io.hf", "bertjax.io.weights", "bertjax.io.names"} <= set(formats)
    offenders = sorted(m for m in formats if {"bertjax.model", "bertjax.heads"} & GRAPH[m])
    assert not offenders, f"{offenders} import bertjax.model"


def test_the_model_core_imports_no_file_format():
    for module in sorted(CORE & set(GRAPH)):
        outside = sorted(GRAPH[module] - CORE)
        assert not outside, f"{module} imports {outside}, outside the model core"


def test_importing_the_formats_loads_neither_the_model_nor_a_framework_they_do_not_need():
    """At run time too: Hugging Face I/O is numpy and safetensors (no JAX, no PyTorch); the
    weight tables use Flax but never load `bertjax.model`."""
    code = (
        "import sys\n"
        "import bertjax.io.hf, bertjax.io.names, bertjax.files\n"
        "print(sorted(m for m in ('jax', 'flax', 'torch', 'bertjax.model') if m in sys.modules))\n"
        "import bertjax.io.weights\n"
        "print(sorted(m for m in ('torch', 'bertjax.model') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"], out.stdout
