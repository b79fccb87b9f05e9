"""`optim.flatten`: clipping and the optimizer's moments over one vector of every gradient
(`bertjax.train.optim._flattened`), the same updates as per parameter within float32 summation
order (relative 1e-5 after three clipped, decayed steps), in far fewer operations."""

from __future__ import annotations

import re

import jax
import numpy as np
import pytest
from flax import nnx
from test_parallel import make_batches
from use_helpers import DATA_CACHE

from bertjax import BertConfig, BertForPreTraining
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.step import create_train_state, make_train_step

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

CONFIG = BertConfig.from_preset("tiny", vocab_size=128)


def _train(optimizer: str, flatten: bool, steps: int = 3):
    # a clip norm the gradients exceed, so the clipping acts; adamw decays the matrices
    oc = OptimConfig(optimizer=optimizer, learning_rate=1e-2, clip_norm=0.05,
                     weight_decay=0.1, flatten=flatten)
    tx = make_optimizer(oc, 10)
    graphdef, state = create_train_state(BertForPreTraining(CONFIG, rngs=nnx.Rngs(0)), tx, seed=0)
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(oc, 10)))
    batch = make_batches(1)[0]
    for _ in range(steps):
        state, _ = step(state, batch)
    return state, step, batch


@pytest.mark.parametrize("optimizer", ["adamw", "adam", "sgd"])
def test_flat_updates_are_the_per_parameter_ones(optimizer: str) -> None:
    flat, _, _ = _train(optimizer, flatten=True)
    leaves, _, _ = _train(optimizer, flatten=False)
    a, b = jax.tree.leaves(flat.params), jax.tree.leaves(leaves.params)
    start = jax.tree.leaves(create_train_state(
        BertForPreTraining(CONFIG, rngs=nnx.Rngs(0)), make_optimizer(OptimConfig(), 10), seed=0)[1].params)
    for x, y, x0 in zip(a, b, start, strict=True):
        moved = float(np.abs(np.asarray(y) - np.asarray(x0)).max())
        assert moved > 0  # every parameter took the updates being compared
        assert float(np.abs(np.asarray(x) - np.asarray(y)).max()) <= 1e-5 * max(moved, 1e-3)


def test_the_moments_are_one_vector_and_the_step_has_fewer_operations() -> None:
    flat, flat_step, batch = _train("adamw", flatten=True, steps=1)
    leaves, leaf_step, _ = _train("adamw", flatten=False, steps=1)
    n_params = sum(int(x.size) for x in jax.tree.leaves(flat.params))
    n_leaves = len(jax.tree.leaves(flat.params))
    assert sorted(x.shape for x in jax.tree.leaves(flat.opt_state) if x.ndim) == [(n_params,)] * 2

    def operations(step, state) -> int:  # fusions and other ops of the compiled step's entry
        text = step.lower(state, batch).compile().as_text()
        entry = text[text.index("\nENTRY"):]
        return len(re.findall(r"^\s+\S+ = .*? (?!parameter|bitcast|get-tuple-element|tuple)[a-z-]+\(",
                              entry[:entry.index("\n}")], flags=re.M))

    assert operations(flat_step, flat) < operations(leaf_step, leaves) - n_leaves


def test_lamb_refuses_it() -> None:
    with pytest.raises(ValueError, match="flatten takes adam, adamw or sgd"):
        OptimConfig(optimizer="lamb", flatten=True)


def test_a_flat_run_resumes_bitwise_and_only_flat(tmp_path) -> None:
    """The one-vector optimizer state goes through a checkpoint and back; a resume that asks
    for the per-parameter optimizer is refused by name."""
    from bertjax.jobs.pretrain.job import pretrain
    from bertjax.jobs.pretrain.start import PretrainError
    from bertjax.runs import config as rc
    from bertjax.train.saved import read_state

    def config(flatten: bool) -> rc.RunConfig:
        return rc.load(overrides={
            "model.preset": "tiny", "data.vocab_size": 300, "data.seq_len": 32,
            "data.max_predictions": 5, "data.batch_size": 4, "data.eval_batches": 1,
            "train.steps": 6, "train.eval_every": 6, "train.checkpoint_every": 3,
            "optim.flatten": flatten})

    quiet = {"progress": False, "log": lambda _: None, "data_cache": DATA_CACHE}
    pretrain(config(True), tmp_path / "ref", **quiet)

    def stop(step: int, metrics: dict) -> None:
        if step == 4:
            raise RuntimeError("stopped on purpose")

    with pytest.raises(RuntimeError, match="on purpose"):
        pretrain(config(True), tmp_path / "run", on_step=stop, **quiet)
    with pytest.raises(PretrainError, match="optim.flatten: saved True, requested False"):
        pretrain(config(False), tmp_path / "run", resume=True, **quiet)
    pretrain(config(True), tmp_path / "run", resume=True, **quiet)
    (step_a, a), (step_b, b) = (read_state(tmp_path / d / "checkpoints") for d in ("ref", "run"))
    assert step_a == step_b == 6
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
