"""The public names: flat, lazy (importing bertjax loads no JAX), each resolving to one object;
old names still working with a warning naming the new one."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import bertjax
import bertjax.data
import bertjax.io
import bertjax.tasks
import bertjax.train
import parity

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = (bertjax, bertjax.data, bertjax.io, bertjax.tasks, bertjax.train)


def test_importing_the_public_packages_loads_no_framework() -> None:
    """`python -X importtime -c "import bertjax"` lists no JAX, Flax, Optax or PyTorch module,
    and neither do the other public packages."""
    for package in ("bertjax", "bertjax.train", "bertjax.tasks", "bertjax.io", "bertjax.data"):
        out = subprocess.run([sys.executable, "-X", "importtime", "-c", f"import {package}"],
                             capture_output=True, text=True, check=True, cwd=ROOT)
        imported = {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "bertjax" in imported
        assert not imported & {"jax", "jaxlib", "flax", "optax", "torch"}, (package, imported)


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.__name__)
def test_every_public_name_resolves_and_is_listed(package) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no public name is a deprecated one
        for name in package.__all__:
            assert getattr(package, name) is not None, name
    assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'nope'"):
        _ = package.nope


@pytest.mark.parametrize("package", [bertjax, bertjax.io, bertjax.tasks, bertjax.train, parity],
                         ids=lambda p: p.__name__)
def test_the_lazy_names_are_the_imports_a_type_checker_reads(package) -> None:
    """Each lazy package's flat names are exactly the `if TYPE_CHECKING:` imports of its
    __init__.py (`bertjax.common.lazy.lazy_imports`), each the object of the module it names."""
    import importlib

    from bertjax.common.lazy import imported_under_type_checking

    imports = imported_under_type_checking(package.__file__)
    assert imports and set(imports) <= set(package.__all__)
    for name, module in imports.items():
        assert getattr(package, name) is getattr(importlib.import_module(module), name)


def test_one_object_per_name_across_the_layers() -> None:
    """The flat names are the objects of their modules, not copies."""
    import bertjax.jobs.finetune.config
    from bertjax.io.report import LoadReport
    from bertjax.jobs.finetune.job import finetune
    from bertjax.train.checkpoint import Checkpointer
    from bertjax.use.fill_mask import fill_mask

    assert bertjax.fill_mask is fill_mask and bertjax.finetune is finetune
    assert bertjax.LoadReport is bertjax.io.LoadReport is LoadReport
    assert bertjax.train.Checkpointer is Checkpointer
    assert bertjax.FinetuneConfig is bertjax.jobs.finetune.config.FinetuneConfig
    assert bertjax.Tokenizer is bertjax.data.Tokenizer


def test_a_custom_loop_needs_three_modules() -> None:
    """What a training script needs is in bertjax, bertjax.train and bertjax.data."""
    for name in ("BertForPreTraining", "BertConfig", "save_pretrained", "from_pretrained"):
        assert hasattr(bertjax, name), name
    for name in ("assemble", "OptimConfig", "make_strategy", "PRETRAINING", "Checkpointer",
                 "metrics_from_sums", "make_optimizer", "keep_freed_memory"):
        assert hasattr(bertjax.train, name), name
    for name in ("corpus_documents", "write_shards", "PretrainingBatches", "Tokenizer",
                 "read_examples", "read_tagged", "read_squad", "read_choices"):
        assert hasattr(bertjax.data, name), name
