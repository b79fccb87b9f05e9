"""The architecture as a test: one folder per layer, imports that run one way.

Every import of a bertjax module by another (at module level or inside a function) must go to
the same layer or one below it; `bertjax.data` imports no framework. The layers, top to bottom:

    cli                      the command line
    api                      bertjax/__init__.py, bertjax/pretrained.py (from_pretrained)
    train, tasks, bench      jobs: pre-training, fine-tuning, benchmarks
    io, use, viz             checkpoint formats; using a loaded model; pictures
    core                     config, model, heads, numerics, inputs, losses
    data, plumbing           corpora to batches (no framework); bertjax/common/files.py, bertjax/config.py,
                             bertjax/train/host_memory.py, settings.py, lazy.py, console.py

One exception, named: the run directory's schema (`RUN_SCHEMA`: what a `bertjax pretrain` run
holds and how it is configured, no framework) lives with the training job, and reading a run's
model (`bertjax.io.runs`) needs it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "bertjax"
FRAMEWORKS = ("jax", "flax", "optax", "orbax", "torch", "transformers")

RANKS = {"cli": 5, "api": 4, "train": 3, "tasks": 3, "bench": 3, "io": 2, "use": 2, "viz": 2,
         "core": 1, "data": 0, "plumbing": 0}
TOP_LEVEL = {"__init__": "api", "pretrained": "api", "files": "plumbing", "config": "plumbing",
             "host_memory": "plumbing", "settings": "plumbing", "lazy": "plumbing",
             "console": "plumbing",
             "model": "core", "attention": "core", "heads": "core", "numerics": "core",
             "inputs": "core", "losses": "core"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def layer(module: str) -> str:
    """The layer of a module named `bertjax...`; a new top-level module must be placed above."""
    parts = module.split(".")
    if len(parts) == 1:
        return "api"
    if parts[1] in RANKS:
        return parts[1]
    if parts[1] in TOP_LEVEL:
        return TOP_LEVEL[parts[1]]
    raise AssertionError(f"{module} is in no layer: add it to a folder or to TOP_LEVEL")


def imports(path: Path) -> set[str]:
    """Every module `path` imports, anywhere in the file (absolute imports only: the house style)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            assert node.level == 0, f"{path}: relative import of {node.module}"
            found.add(node.module)
            found |= {f"{node.module}.{a.name}" for a in node.names}  # `from bertjax import x`
    return found


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for p in PACKAGE.rglob("*.py")}

    def targets(found: set[str]) -> set[str]:
        # `from bertjax import numerics` imports bertjax.numerics, not the package's public API
        return {m for m in found if m in modules
                and not (m in ("bertjax", "bertjax.train") and any(
                    other.startswith(m + ".") and other in modules for other in found))}

    return {name: targets(imports(path)) - {name} for name, path in modules.items()}


GRAPH = _graph()
RUN_SCHEMA = {"bertjax.runs.layout", "bertjax.runs.config", "bertjax.train.schedule",
              "bertjax.train.choices"}


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_imports_run_down_the_layers(module: str) -> None:
    mine = RANKS[layer(module)]
    upward = sorted(m for m in GRAPH[module] if RANKS[layer(m)] > mine and m not in RUN_SCHEMA)
    assert not upward, f"{module} ({layer(module)}) imports a layer above it: {upward}"


def test_data_imports_no_framework() -> None:
    for path in (PACKAGE / "data").rglob("*.py"):
        frameworks = sorted(m for m in imports(path) if m.split(".")[0] in FRAMEWORKS)
        assert not frameworks, f"{path.name} imports {frameworks}"


def test_the_check_catches_what_it_is_for() -> None:
    """The layer table, on a made-up edge (import circles: tests/test_architecture.py)."""
    assert layer("bertjax.cli.main") == "cli" and layer("bertjax.model") == "core"
    assert RANKS[layer("bertjax.io.hf")] > RANKS[layer("bertjax.model")]
    GRAPH["bertjax.model"].add("bertjax.io.hf")
    try:
        with pytest.raises(AssertionError, match="imports a layer above"):
            test_imports_run_down_the_layers("bertjax.model")
    finally:
        GRAPH["bertjax.model"].discard("bertjax.io.hf")
