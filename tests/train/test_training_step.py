"""The training core on one device: optimizer choices, BERT's decay mask, metrics of the step,
dropout keys, bfloat16 compute and the bad inputs the strategies refuse."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import nnx
from test_parallel import make_batches

from bertjax import BertConfig, BertForPreTraining
from bertjax.losses import pretraining_loss
from bertjax.train.optim import OptimConfig, decay_mask, learning_rate_schedule, make_optimizer
from bertjax.train.parallel import make_strategy
from bertjax.train.step import create_train_state, make_eval_step, make_train_step

VOCAB = 128


def _setup(optimizer: str = "adamw", dtype: str = "float32", dropout: float = 0.0, **optim):
    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, hidden_dropout_prob=dropout,
                                    attention_probs_dropout_prob=dropout, dtype=dtype)
    oc = OptimConfig(optimizer=optimizer, **{"learning_rate": 1e-3, **optim})
    tx = make_optimizer(oc, 50)
    graphdef, state = create_train_state(BertForPreTraining(config, rngs=nnx.Rngs(0)), tx, seed=0)
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(oc, 50), dropout=dropout > 0))
    return graphdef, state, step


def test_decay_mask_spares_exactly_biases_and_layernorm() -> None:
    _, state, _ = _setup()
    flat = jax.tree_util.tree_flatten_with_path(decay_mask(state.params))[0]
    spared = {jax.tree_util.keystr(p) for p, decay in flat if not decay}
    decayed = {jax.tree_util.keystr(p) for p, decay in flat if decay}
    assert all("bias" in p or "scale" in p for p in spared)
    assert all(("kernel" in p) or ("embedding" in p) for p in decayed)
    layers = 2  # tiny: per layer 6 biases (q, k, v, out, intermediate, output) + 2 LayerNorms
    # + embeddings LN (2), pooler bias, MLM transform bias, MLM LN (2), MLM output bias, NSP bias
    expected_spared = layers * (6 + 2 * 2) + 2 + 1 + 1 + 2 + 1 + 1
    assert len(spared) == expected_spared
    assert any("mlm_head']['bias" in p for p in spared)


@pytest.mark.slow
@pytest.mark.parametrize("optimizer", ["adamw", "adam", "lamb", "sgd"])
def test_every_optimizer_lowers_the_loss(optimizer: str) -> None:
    """Ten updates on one fixed batch: each optimizer must cut the training loss by >= 10%."""
    # LAMB scales each update by the layer's trust ratio |w|/|u|, SGD by the raw gradient: both
    # need a larger rate than Adam's 1e-3 to move as far in ten steps.
    _, state, step = _setup(optimizer, learning_rate=1e-3 if optimizer.startswith("adam") else 1e-2)
    batch = make_batches(1)[0]
    losses = []
    for _ in range(10):
        state, metrics = step(state, batch)
        losses.append(float(metrics["loss"]))
    assert int(state.step) == 10
    assert losses[-1] < 0.9 * losses[0], losses


@pytest.mark.slow
def test_step_metrics_match_the_loss_and_schedule() -> None:
    graphdef, state, step = _setup(warmup_steps=4, clip_norm=0.5)
    batch = make_batches(1)[0]

    @jax.jit  # compiled whole: op by op, JAX compiles every operation of the model anew
    def outputs(params):
        return nnx.merge(graphdef, params)(batch["input_ids"], batch["token_type_ids"],
                                           batch["attention_mask"], batch["masked_positions"])

    def loss_of(params):
        o = outputs(params)
        return pretraining_loss(o.mlm_logits, o.nsp_logits, batch)[0]

    out = outputs(state.params)
    loss, parts = pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
    raw_norm = float(optax.tree.norm(jax.jit(jax.grad(loss_of))(state.params)))
    schedule = learning_rate_schedule(OptimConfig(learning_rate=1e-3, warmup_steps=4), 50)
    for s in range(6):
        before = state.params
        state, m = step(state, batch)
        assert float(m["learning_rate"]) == pytest.approx(float(schedule(s)), rel=1e-6)
        if s == 0:  # warm-up starts at 0: the first update changes nothing but the step
            assert float(m["loss"]) == pytest.approx(float(loss), abs=1e-6)
            assert float(m["mlm_loss"]) == pytest.approx(float(parts["mlm_loss"]), abs=1e-6)
            assert jax.tree.all(jax.tree.map(jnp.array_equal, before, state.params))
            # the reported norm is the unclipped gradient's (the clip at 0.5 engages)
            assert float(m["grad_norm"]) == pytest.approx(raw_norm, rel=1e-5)
            assert raw_norm > 0.5
    assert float(m["tokens"]) == float(batch["attention_mask"].sum())
    # the accuracies of the last update, counted here from its parameters' own predictions
    o = outputs(before)
    w = np.asarray(batch["masked_weights"])
    right = np.argmax(np.asarray(o.mlm_logits), -1) == np.asarray(batch["masked_ids"])
    assert float(m["mlm_accuracy"]) == pytest.approx((right * w).sum() / w.sum(), abs=1e-6)
    nsp_right = np.argmax(np.asarray(o.nsp_logits), -1) == np.asarray(batch["next_sentence_label"])
    assert float(m["nsp_accuracy"]) == pytest.approx(nsp_right.mean(), abs=1e-6)


@pytest.mark.slow
def test_dropout_keys_depend_on_step_and_seed_only() -> None:
    """Same state + batch -> same update; a different step -> different dropout masks."""
    _, state, step = _setup(dropout=0.3)
    batch = make_batches(1)[0]
    a, ma = step(state, batch)
    b, mb = step(state, batch)
    assert float(ma["loss"]) == float(mb["loss"])
    shifted = state.replace(step=state.step + 7)
    _, mc = step(shifted, batch)
    assert abs(float(mc["loss"]) - float(ma["loss"])) > 1e-4


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_params_and_tracks_float32_loss() -> None:
    batch = make_batches(1)[0]
    _, s32, step32 = _setup(dtype="float32")
    _, s16, step16 = _setup(dtype="bfloat16")
    _, m32 = step32(s32, batch)
    s16, m16 = step16(s16, batch)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(s16.params))
    assert abs(float(m16["loss"]) - float(m32["loss"])) < 2e-2 * float(m32["loss"])


@pytest.mark.slow
def test_eval_step_sums_add_up_over_batches() -> None:
    graphdef, state, _ = _setup()
    eval_step = jax.jit(make_eval_step(graphdef))
    a, b = make_batches(2)
    both = {k: np.concatenate([a[k], b[k]]) for k in a}
    sa, sb, sab = eval_step(state.params, a), eval_step(state.params, b), eval_step(state.params, both)
    for k in sab:
        assert float(sa[k] + sb[k]) == pytest.approx(float(sab[k]), rel=1e-5), k


def test_batch_not_divisible_by_accumulation_is_refused() -> None:
    strategy = make_strategy("none")
    with pytest.raises(ValueError, match="batch size 10 is not divisible.*accumulation"):
        strategy.check_batch_size(10, grad_accum_steps=4)
    with pytest.raises(ValueError, match="unknown parallel strategy 'ddp'"):
        make_strategy("ddp")
