"""Import structure as tests: no import circle among bertjax, bert_torch and parity, module by
module and package by package; the layers of bertjax in one order (each imports only those below
it); checkpoint formats that never import the model; a model that imports no file format;
framework-free layers that load no framework.

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

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("bertjax", "bert_torch", "parity")
# The model core: the top-level modules of bertjax (and what they may lean on).
CORE = {"bertjax", "bertjax.config", "bertjax.config.families", "bertjax.config.heads",
        "bertjax.config.checks", "bertjax.config.modernbert", "bertjax.model", "bertjax.modernbert",
        "bertjax.heads",
        "bertjax.numerics", "bertjax.inputs", "bertjax.losses", "bertjax.attention",
        "bertjax.errors"}
# bertjax's layers from the top down (docs/design.md draws them): a unit (a sub-package, or a
# module at the top of bertjax) imports only units of later layers, never of its own or an earlier
# one. The package's own __init__ (the flat, lazy public names) imports only the model core's
# config and the errors; its names point anywhere, loaded on first use.
LAYERS: list[set[str]] = [
    {"bertjax.cli"},
    {"bertjax.bench"},
    {"bertjax.jobs"},
    {"bertjax.tasks"},
    {"bertjax.viz"},
    {"bertjax.use"},
    {"bertjax.pretrained"},
    {"bertjax.io"},
    {"bertjax.runs"},
    {"bertjax.train"},
    {"bertjax.data"},
    {"bertjax.heads"},
    {"bertjax.modernbert"},  # ModernBERT's encoder beside BERT's, on its layers and numerics
    {"bertjax.model"},
    {"bertjax.attention", "bertjax.losses"},
    {"bertjax.inputs"},
    {"bertjax.numerics"},
    {"bertjax"},  # the flat names: only config and errors at import, the rest when first used
    {"bertjax.config"},
    {"bertjax.common"},
    {"bertjax.errors"},
]
MAX_TOP_MODULES = 10  # modules at the top of bertjax/, __init__.py included



def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _ancestors(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


def _type_checking_only(tree: ast.AST) -> set[int]:
    """The nodes under `if TYPE_CHECKING:`: imports for the type checker, never run (a package's
    flat names, `bertjax.common.lazy.lazy_imports`)."""
    return {id(inner) for node in ast.walk(tree) if isinstance(node, ast.If)
            and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING")
            for stmt in node.body for inner in ast.walk(stmt)}


def _imports(source: str, name: str, is_package: bool, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (source `source`) imports, anywhere in it but
    under `if TYPE_CHECKING:`."""
    found = set()
    tree = ast.parse(source)
    typing_only = _type_checking_only(tree)
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
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


def unit_of(module: str) -> str:
    """The unit a module belongs to: `bertjax.io.hf` -> `bertjax.io`, `bertjax.model` itself."""
    return ".".join(module.split(".")[:2])


def unit_graph(graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """unit -> the other units its modules import (the package-level graph)."""
    units: dict[str, set[str]] = {}
    for module, imported in graph.items():
        unit = unit_of(module)
        units.setdefault(unit, set()).update(
            u for u in map(unit_of, imported) if u != unit and u != "bertjax")
    return units


UNITS = unit_graph({m: {d for d in deps if d.startswith("bertjax")}
                    for m, deps in GRAPH.items() if m.startswith("bertjax")})


def test_no_import_circle_anywhere():
    circles = import_circles(GRAPH)
    assert not circles, "import circles (each group imports itself round):\n" + "\n".join(
        "  " + " <-> ".join(group) for group in circles)


def test_no_import_circle_between_packages():
    """A file-level search misses a loop between packages whose files never loop: io.runs ->
    train.saved while train.optim -> io.names is one."""
    circles = import_circles(UNITS)
    assert not circles, "package circles:\n" + "\n".join("  " + " <-> ".join(c) for c in circles)


def test_the_package_circle_search_finds_one_made_of_files_that_do_not_loop():
    graph = {"pkg.io.runs": {"pkg.train.saved"}, "pkg.train.saved": set(),
             "pkg.train.optim": {"pkg.io.names"}, "pkg.io.names": set()}
    assert import_circles(graph) == []
    assert import_circles(unit_graph(graph)) == [["pkg.io", "pkg.train"]]


def upward_imports(units: dict[str, set[str]]) -> list[str]:
    """The imports of `units` that do not run down LAYERS (to the same layer or one above)."""
    layer = {unit: i for i, names in enumerate(LAYERS) for unit in names}
    assert set(units) <= set(layer), f"no layer for {set(units) - set(layer)}"
    return sorted(f"{unit} ({layer[unit]}) imports {other} ({layer[other]})"
                  for unit, imported in units.items() for other in imported
                  if layer[other] <= layer[unit])


def test_every_unit_has_its_layer_and_imports_only_layers_below_it():
    upward = upward_imports(UNITS)
    assert not upward, "imports that do not run downward:\n  " + "\n  ".join(upward)


def test_the_layer_check_catches_an_upward_import():
    """A made-up edge: the model core importing a checkpoint format."""
    units = {unit: set(imported) for unit, imported in UNITS.items()}
    units["bertjax.model"].add("bertjax.io")
    assert upward_imports(units) == ["bertjax.model (13) imports bertjax.io (7)"]


def test_the_top_of_the_package_holds_at_most_ten_modules():
    top = sorted(p.name for p in (ROOT / "bertjax").glob("*.py"))
    assert len(top) <= MAX_TOP_MODULES, top


def test_each_package_says_what_lives_there_and_what_it_may_import():
    for init in sorted((ROOT / "bertjax").glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse(init.read_text())) or ""
        assert len(doc.split()) >= 12, f"{init.parent.name}/__init__.py: no docstring"
        assert "import" in doc, f"{init.parent.name}/__init__.py does not say what it may import"


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
        outside = sorted(m for m in GRAPH[module] - CORE if not m.startswith("bertjax.common"))
        assert not outside, f"{module} imports {outside}, outside the model core"


FRAMEWORK_FREE = ["bertjax.data", "bertjax.runs", "bertjax.common", "bertjax.errors",
                  "bertjax.config", "bertjax.jobs.stop"]
FRAMEWORKS = ("jax", "flax", "optax", "orbax", "torch", "transformers")


def _source_imports(path: Path) -> set[str]:
    """Every module name a file imports, anywhere in it (inside functions too)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
    return found


@pytest.mark.parametrize("package", FRAMEWORK_FREE)
def test_framework_free_layers_name_no_framework_anywhere(package):
    """Not even inside a function, where a run-time check would not look."""
    base = ROOT / package.replace(".", "/")
    files = sorted(base.rglob("*.py")) if base.is_dir() else [base.with_suffix(".py")]
    for path in files:
        named = sorted(m for m in _source_imports(path) if m.split(".")[0] in FRAMEWORKS)
        assert not named, f"{path.relative_to(ROOT)} imports {named}"


@pytest.mark.parametrize("package", FRAMEWORK_FREE)
def test_framework_free_layers_load_no_framework(package):
    """Their whole tree imported in a fresh process: no JAX, Flax, Optax, Orbax or PyTorch."""
    modules = sorted(m for m in GRAPH if m == package or m.startswith(package + "."))
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print(sorted(m for m in ('jax', 'flax', 'optax', 'orbax', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.strip() == "[]", (package, out.stdout, out.stderr[-2000:])


def test_importing_the_formats_loads_neither_the_model_nor_a_framework_they_do_not_need():
    """At run time too: Hugging Face I/O is numpy and safetensors (no JAX, no PyTorch); the
    weight tables use Flax but never load `bertjax.model`."""
    code = (
        "import sys\n"
        "import bertjax.io.hf, bertjax.io.names, bertjax.common.files\n"
        "print(sorted(m for m in ('jax', 'flax', 'torch', 'bertjax.model') if m in sys.modules))\n"
        "import bertjax.io.weights\n"
        "print(sorted(m for m in ('torch', 'bertjax.model') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=ROOT)
    assert out.stdout.split("\n")[:2] == ["[]", "[]"], out.stdout
