"""`scan_layers` keeps the layers stacked: a scan model holds one `BertLayer` whose parameters are
(L, ...) and scans over them as held, with no stacking in the forward and no unstacking in the
backward; conversion, optimizer updates, checkpoints and `from_pretrained` name them per layer.

Tolerances: initialisation, conversion and the forward are exact (the same arithmetic); two
optimizer updates from the same parameters and gradients 1e-6 absolute (a wrong decay mask or a
trust ratio over all layers moves parameters by 1e-2); a scan run's resume is bitwise, as a loop
run's is; a run loaded as a loop model gives its logits to 1e-5 (XLA compiles the scanned layer as
one program and the loop's ops one by one, so float32 rounding may differ with the shapes).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from use_helpers import DATA_CACHE

import bertjax
from bertjax import BertConfig, BertForPreTraining
from bertjax.io.weights import (
    expected_shapes,
    model_from_numpy,
    model_to_numpy,
    saved_params_to_numpy,
    state_to_numpy,
)
from bertjax.jobs.pretrain.job import pretrain
from bertjax.losses import pretraining_loss
from bertjax.runs import config as rc
from bertjax.train.optim import OptimConfig, make_optimizer
from bertjax.train.saved import read_state
from parity.tensors import random_batch

L = 4
CONFIG = BertConfig.from_preset("tiny", num_hidden_layers=L, vocab_size=301,
                                hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
SCAN = CONFIG.replace(scan_layers=True)
KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions")


def _batch(config: BertConfig = CONFIG) -> dict[str, np.ndarray]:
    return random_batch(config, batch_size=3, seq_len=24, num_predictions=5, seed=1)


def _layer_leaves(model: nnx.Module) -> dict[tuple, np.ndarray]:
    """Flax path below `bert.layers` -> value, of every layer parameter."""
    flat = nnx.to_flat_state(nnx.state(model, nnx.Param))
    return {tuple(p[2:]): np.asarray(v[...]) for p, v in flat if tuple(p[:2]) == ("bert", "layers")}


def _ops_on(jaxpr: jax.extend.core.Jaxpr, shapes: set[tuple[int, ...]]) -> Counter:
    """Primitive -> how many equations, at any depth, read or write an array of one of `shapes`."""
    found: Counter = Counter()
    for eqn in jaxpr.eqns:
        avals = [v.aval for v in (*eqn.invars, *eqn.outvars)]
        if any(tuple(getattr(a, "shape", ())) in shapes for a in avals):
            found[eqn.primitive.name] += 1
        for sub in jax.extend.core.jaxprs_in_params(eqn.params):
            found += _ops_on(sub, shapes)
    return found


def test_scan_model_holds_each_layer_parameter_once_stacked_as_the_loop_initialised_it():
    loop = _layer_leaves(BertForPreTraining(CONFIG, rngs=nnx.Rngs(0)))
    scan = _layer_leaves(BertForPreTraining(SCAN, rngs=nnx.Rngs(0)))
    assert not [p for p in scan if isinstance(p[0], int)]  # no per-layer copies beside the stack
    assert set(scan) == {p[1:] for p in loop if p[0] == 0}
    for path, stacked in scan.items():
        assert stacked.shape == (L, *loop[(0, *path)].shape), path  # (L, ...)
        for i in range(L):
            np.testing.assert_array_equal(stacked[i], loop[(i, *path)], err_msg=str(path))
    assert sum(v.size for v in scan.values()) == sum(v.size for v in loop.values())


@pytest.mark.parametrize("remat", [False, True])
def test_scan_forward_and_backward_never_restack_the_parameters(remat):
    config = SCAN.replace(remat=remat)
    graphdef, params = nnx.split(BertForPreTraining(config, rngs=nnx.Rngs(0)), nnx.Param)
    batch = _batch(config)

    def loss(p):
        out = nnx.merge(graphdef, p)(*(batch[k] for k in KEYS), deterministic=False,
                                     dropout_rng=jax.random.key(5))
        return pretraining_loss(out.mlm_logits, out.nsp_logits, batch)[0]

    h, i = config.hidden_size, config.intermediate_size
    stacked = {(L, h, h), (L, h, i), (L, i, h)}  # every layer matrix, all layers at once
    program = jax.make_jaxpr(jax.value_and_grad(loss))(params).jaxpr
    # only the forward scan and its transpose touch them: they read the (L, ...) parameters and
    # write the (L, ...) gradients as held; no concatenate, slice or broadcast outside the scan
    assert _ops_on(program, stacked) == Counter({"scan": 2})
    # the check sees a restack: the old forward's jnp.stack of per-layer states
    loop = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    restack = jax.make_jaxpr(lambda states: jax.tree.map(lambda *x: jnp.stack(x), *states))(
        [nnx.state(m) for m in loop.bert.layers])
    restacked = _ops_on(restack.jaxpr, stacked)  # `stack` (or concatenate) in this JAX version
    assert "scan" not in restacked and sum(restacked.values()) >= 6  # q, k, v, output, MLP in, out


@pytest.mark.slow
def test_conversion_round_trip_between_scan_and_loop_models():
    scan = BertForPreTraining(SCAN, rngs=nnx.Rngs(3))
    arrays = model_to_numpy(scan)  # per-layer names, the loop model's shapes
    assert {k: v.shape for k, v in arrays.items()} == expected_shapes(CONFIG, BertForPreTraining)
    assert "bert.layers.3.attention.query.weight" in arrays
    loop = model_from_numpy(arrays, CONFIG, BertForPreTraining)
    batch = _batch()
    a = scan(*(batch[k] for k in KEYS), output_attentions=True, output_hidden_states=True)
    b = loop(*(batch[k] for k in KEYS), output_attentions=True, output_hidden_states=True)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    back = model_from_numpy(model_to_numpy(loop), SCAN, BertForPreTraining)  # stacked again
    for x, y in zip(jax.tree.leaves(nnx.state(back)), jax.tree.leaves(nnx.state(scan)),
                    strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _per_layer_scaled(arrays: dict[str, np.ndarray], power: float) -> dict[str, np.ndarray]:
    """Layer i's arrays times (i + 1) ** power: layers that differ, as trained ones do."""
    def factor(name: str) -> float:
        return (int(name.split(".")[2]) + 1.0) ** power if name.startswith("bert.layers.") else 1.0

    return {k: (v * factor(k)).astype(np.float32) for k, v in arrays.items()}


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw", "lamb"])
def test_an_optimizer_update_is_the_loops(optimizer):
    """The same parameters and gradients, held per layer or stacked, give the same update: weight
    decay spares the stacked LayerNorm and bias vectors, LAMB's trust ratio is each layer's."""
    params = _per_layer_scaled(model_to_numpy(BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))), 1)
    rng = np.random.default_rng(0)
    grads = _per_layer_scaled({k: rng.normal(size=v.shape) for k, v in params.items()}, -1)
    oc = OptimConfig(optimizer=optimizer, learning_rate=1e-2, weight_decay=0.5)
    tx = make_optimizer(oc, 10)
    after = []
    for config in (CONFIG, SCAN):
        p = nnx.state(model_from_numpy(params, config, BertForPreTraining), nnx.Param)
        g = nnx.state(model_from_numpy(grads, config, BertForPreTraining), nnx.Param)
        state = tx.init(p)
        for _ in range(2):
            updates, state = tx.update(g, state, p)
            p = optax.apply_updates(p, updates)
        after.append(state_to_numpy(p))
    assert set(after[0]) == set(after[1])
    for name in after[0]:
        np.testing.assert_allclose(after[1][name], after[0][name], rtol=0, atol=1e-6,
                                   err_msg=name)


def _run_config(steps: int) -> rc.RunConfig:
    return rc.load(None, {
        "model.preset": "tiny", "model.scan_layers": "true", "model.hidden_dropout_prob": "0.1",
        "data.vocab_size": "300", "data.seq_len": "32", "data.max_predictions": "5",
        "data.batch_size": "4", "data.eval_batches": "1", "train.steps": str(steps),
        "train.eval_every": "2", "train.checkpoint_every": "2", "train.log_every": "2"})


@pytest.mark.slow
def test_a_scan_run_resumes_and_loads_with_per_layer_names(tmp_path: Path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    pretrain(_run_config(4), whole, progress=False, log=lambda _: None, data_cache=DATA_CACHE)
    stopped = pretrain(_run_config(4), cut, progress=False, log=lambda _: None, time_limit_s=0.0,
                       data_cache=DATA_CACHE)
    assert stopped.steps == 2  # stopped at the first check, with a checkpoint
    resumed = pretrain(_run_config(4), cut, resume=True, progress=False, log=lambda _: None)
    assert resumed.resumed_from == 2 and resumed.steps == 4
    (step, a), (_, b) = read_state(whole / "checkpoints"), read_state(cut / "checkpoints")
    assert step == 4
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert a["params"]["bert"]["layers"]["attention"]["query"]["kernel"]["value"].shape[0] == 2

    saved = saved_params_to_numpy(a["params"])  # the stacked tree, named per layer
    model, _ = bertjax.from_pretrained(whole)
    assert model.config.scan_layers
    assert {k: v.shape for k, v in saved.items()} == expected_shapes(
        model.config.replace(scan_layers=False), BertForPreTraining)
    loaded = model_to_numpy(model)
    assert set(loaded) == set(saved)
    for name in saved:
        np.testing.assert_array_equal(loaded[name], saved[name], err_msg=name)
    loop, _ = bertjax.from_pretrained(whole, scan_layers=False)  # the same weights as a loop
    ids = np.arange(1, 25, dtype=np.int32).reshape(2, 12)
    # one program per layer against one op at a time: rounding may differ at these shapes
    np.testing.assert_allclose(np.asarray(loop(ids).mlm_logits),
                               np.asarray(model(ids).mlm_logits), rtol=0, atol=1e-5)
