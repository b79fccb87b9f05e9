"""The mirror does not drift (in the spirit of transformers' copy checker): `bertjax/model.py`
and `bert_torch/model.py`, `bertjax/heads.py` and `bert_torch/heads.py`,
`bertjax/modernbert.py` and `bert_torch/modernbert.py` hold the same classes in
the same order, and each class sets the same attributes in the same order in its constructor.
What is one framework's alone is listed here, with why; anything else that differs fails."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAIRS = [("bertjax/model.py", "bert_torch/model.py"), ("bertjax/heads.py", "bert_torch/heads.py"),
         ("bertjax/modernbert.py", "bert_torch/modernbert.py")]
# PyTorch's helper layers: float32-accumulating Linear and Embed stand in for nnx.Linear/nnx.Embed
TORCH_ONLY_CLASSES = {"Linear", "Embed"}
# Attributes of one framework alone: JAX's attention path choice (the mirror computes exactly
# one way, the parity reference) and the LayerNorm's output dtype (torch casts at the call)
FRAMEWORK_ONLY_ATTRIBUTES = {("BertAttention", "implementation"), ("LayerNorm", "out_dtype"),
                             ("ModernBertAttention", "implementation")}


def constructor_attributes(source: str) -> list[tuple[str, list[str]]]:
    """(class, the `self.x` names its `__init__` assigns, in order) for each top-level class."""
    found = []
    for node in ast.parse(source).body:
        if not isinstance(node, ast.ClassDef):
            continue
        names: list[str] = []
        for method in node.body:
            if isinstance(method, ast.FunctionDef) and method.name == "__init__":
                for statement in ast.walk(method):
                    targets = (statement.targets if isinstance(statement, ast.Assign) else
                               [statement.target] if isinstance(statement, ast.AnnAssign) else [])
                    names += [t.attr for t in targets if isinstance(t, ast.Attribute)
                              and isinstance(t.value, ast.Name) and t.value.id == "self"]
        found.append((node.name, [n for n in names
                                  if (node.name, n) not in FRAMEWORK_ONLY_ATTRIBUTES]))
    return found


def drift(ours: str, theirs: str) -> list[str]:
    """What differs between two sources' classes and their constructors' attributes."""
    a = constructor_attributes(ours)
    b = [c for c in constructor_attributes(theirs) if c[0] not in TORCH_ONLY_CLASSES]
    problems = []
    if [c for c, _ in a] != [c for c, _ in b]:
        problems.append(f"classes differ: {[c for c, _ in a]} vs {[c for c, _ in b]}")
    theirs_by_name = dict(b)
    problems += [f"{name}: {attrs} vs {theirs_by_name[name]}" for name, attrs in a
                 if name in theirs_by_name and attrs != theirs_by_name[name]]
    return problems


@pytest.mark.parametrize(("ours", "theirs"), PAIRS)
def test_the_two_trees_hold_the_same_classes_and_attributes_in_the_same_order(ours, theirs):
    assert drift((ROOT / ours).read_text(), (ROOT / theirs).read_text()) == []


def test_the_drift_check_sees_an_attribute_added_to_one_tree_and_classes_reordered():
    ours = (ROOT / "bertjax/heads.py").read_text()
    theirs = (ROOT / "bert_torch/heads.py").read_text()
    added = theirs.replace("        self.nsp_head = ", "        self.extra = None\n"
                           "        self.nsp_head = ", 1)
    assert drift(ours, added) and "extra" in drift(ours, added)[0]
    moved = theirs.replace("class BertForMaskedLM(", "class BertForMaskedLMX(", 1)
    assert drift(ours, moved)[0].startswith("classes differ")
