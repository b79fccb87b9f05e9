"""The GPU-minded paths, checked on the CPU: embeddings without scatter-add gradients into small
tables, fused attention against the exact path, layers under lax.scan and rematerialisation
against the plain loop, per-layer dropout keys, the dropout PRNG choice, host-to-device prefetch.

Tolerances: fused vs exact 1e-5 max abs on float32 outputs and 1e-5 relative on gradients (the
issue's bar); bfloat16 2e-2 of the logits' scale. scan and remat give the loop's outputs exactly,
and its loss and gradients within 1e-6 (relative for the loss: another summation order). The CPU
attention layout against the compiler's: 1e-6 relative (1e-7 abs) on contexts and probabilities,
1e-5 (1e-6 abs) on gradients and the model's outputs; bfloat16 contexts within 1e-2.
"""

from __future__ import annotations

import re
import threading
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bertjax import BertConfig, BertForPreTraining, inputs, numerics
from bertjax.attention import exact_attention
from bertjax.io.weights import state_to_numpy
from bertjax.losses import pretraining_loss
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.prefetch import Prefetch
from bertjax.train.step import create_train_state, make_train_step
from parity.convert import flax_to_torch
from parity.tensors import gradient_errors, random_batch

# distinctive table sizes, so each one's gradient is recognisable in the HLO
CONFIG = BertConfig.from_preset("tiny", vocab_size=301, type_vocab_size=3,
                                max_position_embeddings=40)
KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions")


def _batch(config: BertConfig = CONFIG, seed: int = 1) -> dict[str, np.ndarray]:
    return random_batch(config, batch_size=3, seq_len=24, num_predictions=5, seed=seed)


def _loss_and_grads(model, batch, dropout_rng=None):
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(p):
        out = nnx.merge(graphdef, p)(*(batch[k] for k in KEYS), deterministic=dropout_rng is None,
                                     dropout_rng=dropout_rng)
        return pretraining_loss(out.mlm_logits, out.nsp_logits, batch)[0]

    value, grads = jax.jit(jax.value_and_grad(loss))(params)  # compiled whole, not op by op
    return float(value), state_to_numpy(grads)


def _backward_hlo(batch: dict[str, np.ndarray]) -> str:
    """The compiled (optimised) HLO of the pre-training loss's gradient on `batch`."""
    graphdef, params = nnx.split(BertForPreTraining(CONFIG, rngs=nnx.Rngs(0)), nnx.Param)

    def loss(p):
        out = nnx.merge(graphdef, p)(*(batch[k] for k in KEYS))
        return pretraining_loss(out.mlm_logits, out.nsp_logits, batch)[0]

    return jax.jit(jax.grad(loss)).lower(params).compile().as_text()


def _fused_body(hlo: str, name: str) -> str:
    """The computation that the fusion instruction `name` calls, as HLO text."""
    called = re.search(rf"%{re.escape(name)} = [^\n]*calls=%([\w.-]+)", hlo).group(1)
    start = hlo.index(f"%{called} ")
    return hlo[start:hlo.index("\n}", start)]


@pytest.mark.slow
def test_backward_pass_scatters_only_into_the_word_embeddings_and_never_the_logits():
    hlo = _backward_hlo(_batch())
    scattered = re.findall(r"= f32\[([\d,]+)\]\{[^}]*\} scatter\(", hlo)
    H = CONFIG.hidden_size
    assert f"{CONFIG.vocab_size},{H}" in scattered  # the word embeddings: a gather's gradient
    assert f"{CONFIG.type_vocab_size},{H}" not in scattered  # token types: a one-hot matmul
    assert f"{CONFIG.max_position_embeddings},{H}" not in scattered  # positions: a slice
    assert not [s for s in scattered if s.endswith(f",{H}") and s.count(",") == 1
                and s != f"{CONFIG.vocab_size},{H}"]
    # the cross-entropy's gradient is the softmax pass with one number per row subtracted in
    # place: a scatter of the logits' shape only onto that pass's output, never onto zeros that
    # are then added to it (autodiff's gradient of picking the label's logit)
    V = CONFIG.vocab_size
    assert len([s for s in scattered if s.endswith(f",{V}")]) == 1, scattered
    fusions = re.findall(rf"%([\w.-]+) = f32\[[\d,]+,{V}\]\{{[^}}]*\}} fusion\(%([\w.-]+),", hlo)
    onto = [operand for name, operand in fusions if "ROOT %scatter" in _fused_body(hlo, name)]
    assert len(onto) == 1 and _fused_body(hlo, onto[0]).count("exponential(") == 1, onto
    # and the MLM bias's gradient is a dot, not a reduction over the logits' rows
    assert not re.search(rf"= f32\[{V}\]\{{0\}} reduce\(", hlo)


@pytest.mark.parametrize("packed", [False, True])
def test_bfloat16_embedding_gradients_are_float32_scatter_adds(packed):
    """A bfloat16 model gathers its word rows (and packed rows' position rows) from the float32
    tables and casts them after: each gather's gradient is a float32 scatter-add. Cast first
    (nnx.Embed's order) it was a bfloat16 one, which a GPU serialises on the rows real text
    repeats (docs/benchmarks.md, "The pre-training job on a GPU"). Read off the program before XLA's
    passes (the jaxpr): a CPU's own would turn a bfloat16 scatter into a float32 one."""
    config = CONFIG.replace(dtype="bfloat16")
    batch = _batch(config)
    if packed:  # positions restarting inside a row: gathered from the table
        batch["position_ids"] = np.tile(np.arange(12), 2)[None].repeat(3, axis=0)
    graphdef, params = nnx.split(BertForPreTraining(config, rngs=nnx.Rngs(0)), nnx.Param)

    def loss(p):
        out = nnx.merge(graphdef, p)(*(batch[k] for k in KEYS),
                                     position_ids=batch.get("position_ids"))
        return pretraining_loss(out.mlm_logits, out.nsp_logits, batch)[0]

    H = config.hidden_size
    tables = {(shape[0], dtype) for name, shape, dtype in _primitives(
        jax.make_jaxpr(jax.grad(loss))(params).jaxpr) if name == "scatter-add" and shape[1:] == (H,)}
    expected = {(config.vocab_size, "float32")} | (
        {(config.max_position_embeddings, "float32")} if packed else set())
    assert tables == expected, tables


def _primitives(jaxpr: Any) -> list[tuple[str, tuple[int, ...], str]]:
    """(primitive, first operand's shape, its dtype) of every equation, nested jaxprs too."""
    out = []
    for eqn in jaxpr.eqns:
        aval = eqn.invars[0].aval if eqn.invars else None
        out.append((eqn.primitive.name, tuple(getattr(aval, "shape", ())),
                    str(getattr(aval, "dtype", ""))))
        for value in eqn.params.values():
            for sub in value if isinstance(value, (tuple, list)) else (value,):
                inner = getattr(sub, "jaxpr", sub)
                if hasattr(inner, "eqns"):
                    out += _primitives(inner)
    return out


def test_kernel_gradients_copy_no_transposed_output_gradient():
    """Dense layers and the tied decoder see their inputs as one (rows, features) matrix
    (`numerics.rows_dot_general`), so a kernel's gradient contracts one row axis. Contracting
    (B, S) made XLA CPU copy the output's gradient transposed, (features, B, S): the
    intermediate layer's and the MLM logits' the largest (8 and 20 ms of the CPU bench's step)."""
    batch = _batch()
    hlo = _backward_hlo(batch)
    (B, S), P = batch["input_ids"].shape, batch["masked_positions"].shape[1]
    shapes = set(re.findall(r"= f32\[([\d,]+)\]\{[^}]*\} (?:fusion|copy|transpose)\(", hlo))
    for features, rows in ((CONFIG.intermediate_size, (B, S)), (CONFIG.vocab_size, (B, P))):
        transposed = {f"{features},{rows[0]},{rows[1]}", f"{features},{rows[0] * rows[1]}"}
        assert not shapes & transposed, (features, shapes & transposed)


def test_rows_dot_general_is_the_dense_contraction():
    x = jax.random.normal(jax.random.key(0), (3, 4, 5))
    kernel = jax.random.normal(jax.random.key(1), (5, 6))
    dense = (((2,), (0,)), ((), ()))
    np.testing.assert_array_equal(np.asarray(numerics.rows_dot_general(x, kernel, dense)),
                                  np.asarray(jax.lax.dot_general(x, kernel, dense)))
    with pytest.raises(ValueError, match="dense layer's contraction"):
        numerics.rows_dot_general(x, kernel.T, (((1,), (1,)), ((), ())))


@pytest.mark.slow
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_attention_equals_the_exact_path(dtype):
    config = CONFIG.replace(dtype=dtype)
    exact = BertForPreTraining(config.replace(attn_implementation="exact"), rngs=nnx.Rngs(0))
    fused = BertForPreTraining(config.replace(attn_implementation="fused"), rngs=nnx.Rngs(0))
    batch = _batch(config)
    forward = nnx.jit(lambda model, *args: model(*args))  # compiled, as in training
    a, b = forward(exact, *(batch[k] for k in KEYS)), forward(fused, *(batch[k] for k in KEYS))
    assert b.attentions is None
    for field in ("mlm_logits", "nsp_logits", "sequence_output"):
        x, y = (np.asarray(getattr(o, field), np.float32) for o in (a, b))
        bound = 1e-5 if dtype == "float32" else 2e-2 * float(np.abs(x).max())
        assert float(np.abs(x - y).max()) <= bound, field
    if dtype == "float32":
        la, ga = _loss_and_grads(exact, batch)
        lb, gb = _loss_and_grads(fused, batch)
        assert abs(la - lb) <= 1e-5 and max(gradient_errors(gb, ga).values()) <= 1e-5


@pytest.mark.slow
def test_fused_attention_rules():
    batch = _batch()
    fused = BertForPreTraining(CONFIG.replace(attn_implementation="fused",
                                              attention_probs_dropout_prob=0.1), rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match="applies no dropout to attention probabilities"):
        fused(*(batch[k] for k in KEYS), deterministic=False, dropout_rng=jax.random.key(0))
    out = fused(*(batch[k] for k in KEYS), output_attentions=True)  # asked for: exact path
    assert len(out.attentions) == CONFIG.num_hidden_layers
    np.testing.assert_allclose(np.asarray(out.attentions[0]).sum(-1), 1.0, atol=1e-6)
    left_padded = np.array([[0, 1, 1, 1], [1, 1, 1, 0]], np.int32)
    with pytest.raises(ValueError, match=r"attention_mask rows \[0\] are not right padding"):
        fused(np.ones((2, 4), np.int32), None, left_padded)
    # auto on a CPU is the exact path: a left-padded mask is read as a mask, not as lengths
    auto = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    exact = BertForPreTraining(CONFIG.replace(attn_implementation="exact"), rngs=nnx.Rngs(0))
    ids = np.arange(1, 9, dtype=np.int32).reshape(2, 4)
    np.testing.assert_array_equal(np.asarray(auto(ids, None, left_padded).sequence_output),
                                  np.asarray(exact(ids, None, left_padded).sequence_output))


@pytest.mark.slow
@pytest.mark.parametrize("changes", [{"scan_layers": True}, {"remat": True},
                                     {"scan_layers": True, "remat": True}])
def test_scan_and_remat_change_nothing_but_the_program(changes):
    config = CONFIG.replace(hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1)
    plain = BertForPreTraining(config, rngs=nnx.Rngs(0))
    # the same seed, the same weights: a scan model initialises its layers as the loop does and
    # stacks them once (tests/model/test_scan_stacked.py checks it holds only the (L, ...) stack)
    other = BertForPreTraining(config.replace(**changes), rngs=nnx.Rngs(0))
    batch = _batch(config)
    a = plain(*(batch[k] for k in KEYS), output_attentions=True, output_hidden_states=True)
    b = other(*(batch[k] for k in KEYS), output_attentions=True, output_hidden_states=True)
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    key = jax.random.key(5)  # dropout on: per-layer keys give the loop's masks under scan too
    la, ga = _loss_and_grads(plain, batch, key)
    lb, gb = _loss_and_grads(other, batch, key)
    # loss and gradients may differ in the last bits only: the scanned or rematerialised program
    # sums in another order on some CPUs and XLA versions (CI saw 1.5e-7 on a 0.44 word-embedding
    # entry; the heads-major CPU attention 4.8e-7 on a loss of 6.35)
    assert la == pytest.approx(lb, rel=1e-6, abs=0)
    assert max(gradient_errors(gb, ga).values()) <= 1e-6
    # the parameters keep their per-layer names: conversion and checkpoints are unchanged
    assert {k: v.shape for k, v in flax_to_torch(other).items()} == {
        k: v.shape for k, v in flax_to_torch(plain).items()}


def test_scan_traces_one_layer():
    def dots(config):
        model = BertForPreTraining(config, rngs=nnx.Rngs(0))
        batch = _batch(config)
        jaxpr = jax.make_jaxpr(lambda: model(*(batch[k] for k in KEYS)))()
        return str(jaxpr).count("dot_general"), "scan[" in str(jaxpr)

    deep = CONFIG.replace(num_hidden_layers=4)
    (loop, loop_scan), (scanned, has_scan) = dots(deep), dots(deep.replace(scan_layers=True))
    # q, k, v, output, a scores and a context product per attention slice, the MLP's two
    per_layer = 6 + 2 * (numerics.cpu_attention_chunks(len(_batch(deep)["input_ids"]), False) or 1)
    assert not loop_scan and has_scan
    assert loop - scanned == 3 * per_layer  # four layers traced once instead of four times


@pytest.mark.slow
@pytest.mark.parametrize("prng", ["threefry2x32", "rbg"])
def test_dropout_prng_choice(prng):
    config = CONFIG.replace(hidden_dropout_prob=0.2)
    oc = OptimConfig(learning_rate=1e-3)
    tx = make_optimizer(oc, 10)
    graphdef, state = create_train_state(BertForPreTraining(config, rngs=nnx.Rngs(0)), tx, 0, prng)
    assert state.rng.shape == ((2,) if prng == "threefry2x32" else (4,))
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(oc, 10), prng_impl=prng))
    batch = {k: jnp.asarray(v) for k, v in _batch(config).items()}
    _, m1 = step(state, batch)
    _, m2 = step(state, batch)
    _, m3 = step(state.replace(step=state.step + 1), batch)
    assert float(m1["loss"]) == float(m2["loss"])  # a function of (seed, step)
    assert float(m1["loss"]) != float(m3["loss"])  # new masks at the next step
    with pytest.raises(ValueError, match="unknown PRNG implementation 'philox'"):
        create_train_state(BertForPreTraining(config, rngs=nnx.Rngs(0)), tx, 0, "philox")


HANG_GUARD_S = 120.0  # what a hung iterator is given before it fails the test: not a speed bound


def _next_within(items: Prefetch, seconds: float = HANG_GUARD_S) -> str:
    """What `next(items)` does ("blocked" if it has not returned after `seconds`), in a thread
    so that a hanging iterator fails the test instead of hanging it."""
    result = ["blocked"]

    def call() -> None:
        try:
            result[0] = repr(next(items))
        except StopIteration:
            result[0] = "StopIteration"

    thread = threading.Thread(target=call, daemon=True)
    thread.start()
    thread.join(seconds)
    return result[0]


def test_prefetch_keeps_order_forwards_errors_and_stops():
    placed = []
    with Prefetch(iter(range(20)), lambda x: placed.append(x) or x * 10, size=3) as items:
        assert [next(items) for _ in range(20)] == [x * 10 for x in range(20)]
        with pytest.raises(StopIteration):
            next(items)
        assert _next_within(items) == "StopIteration"  # again: ends, never blocks

    def broken():
        yield 1
        raise OSError("shard 3 is unreadable")

    items = Prefetch(broken(), lambda x: x)
    assert next(items) == 1
    with pytest.raises(OSError, match="shard 3 is unreadable"):
        next(items)
    assert _next_within(items) == "StopIteration"
    endless = Prefetch(iter(int, 1), lambda x: x, size=2)  # an endless source, stopped early
    next(endless)
    endless.close()
    assert not [t for t in threading.enumerate() if t.name == "bertjax-prefetch"]


def test_auto_fuses_only_where_cudnn_takes_the_heads(monkeypatch):
    # cuDNN's attention refuses float32 q/k/v and head sizes that are not a multiple of 8 up to
    # 128 (JAX raises NotImplementedError): "auto" must take the exact path there, and an
    # explicit "fused" the XLA implementation. Decided here as on an NVIDIA GPU.
    assert not numerics.cudnn_attention_applies(jnp.bfloat16, 64)  # this CPU
    monkeypatch.setattr(numerics.jax, "default_backend", lambda: "gpu")
    applies = numerics.cudnn_attention_applies
    assert applies(jnp.bfloat16, 64) and applies(jnp.float16, 128)
    assert not applies(jnp.float32, 64) and not applies(jnp.bfloat16, 36)
    assert not applies(jnp.bfloat16, 256)
    fuse = numerics.use_fused_attention
    assert fuse("auto", False, False, cudnn=True) and not fuse("auto", False, False, cudnn=False)
    assert fuse("fused", False, False, cudnn=False)  # XLA's implementation
    assert not fuse("auto", True, False, cudnn=True) and not fuse("auto", False, True, cudnn=True)
    assert not fuse("exact", False, False, cudnn=True)
    base = BertConfig.from_preset("base")
    assert inputs.may_fuse_attention(base.replace(dtype="bfloat16"))
    assert not inputs.may_fuse_attention(base)  # float32: auto stays exact, any mask goes


@pytest.mark.slow
@pytest.mark.parametrize(("seq_len", "predictions"), [(16, 5), (16, 4), (15, 4)])
def test_cudnn_attention_gets_even_lengths_and_computes_the_same(
    monkeypatch: pytest.MonkeyPatch, seq_len: int, predictions: int
) -> None:
    """cuDNN's gradient refused odd query or key lengths on an H100 (the pre-training job's last
    layer at [CLS] + 20 masked rows): an odd length gets a row of zeros, a key past every
    sequence's length and a query whose output is dropped. Decided here as on an NVIDIA GPU,
    XLA computing in cuDNN's place (in float32: the exact path's numbers within 1e-5)."""
    monkeypatch.setattr(numerics, "cudnn_attention_applies", lambda dtype, head_dim: True)
    calls: list[tuple[str | None, int, int]] = []
    real = jax.nn.dot_product_attention

    def spy(q: jax.Array, k: jax.Array, v: jax.Array, *, implementation: str | None = None,
            **kwargs: Any) -> jax.Array:
        calls.append((implementation, q.shape[1], k.shape[1]))
        return real(q, k, v, implementation="xla", **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    config = BertConfig.from_preset("tiny", vocab_size=64)
    batch = random_batch(config, batch_size=3, seq_len=seq_len, num_predictions=predictions)
    models = {name: BertForPreTraining(config.replace(attn_implementation=name), rngs=nnx.Rngs(0))
              for name in ("exact", "auto")}
    with jax.default_matmul_precision("highest"):
        exact_loss, exact_grads = _loss_and_grads(models["exact"], batch)
        assert not calls
        fused_loss, fused_grads = _loss_and_grads(models["auto"], batch)
    even = [n + n % 2 for n in (seq_len, predictions + 1)]  # every key; [CLS] + the predictions
    assert calls == [("cudnn", even[0], even[0]), ("cudnn", even[1], even[0])]
    assert abs(fused_loss - exact_loss) <= 1e-5
    assert max(gradient_errors(fused_grads, exact_grads).values()) <= 1e-5


def _dot_operand_dtypes(jaxpr) -> list[tuple[str, ...]]:
    """The operand dtypes of every dot_general in `jaxpr` and the jaxprs inside it, in order."""
    found = []
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            found.append(tuple(str(v.aval.dtype) for v in eqn.invars))
        for value in eqn.params.values():
            inner = getattr(value, "jaxpr", None)
            if inner is not None and hasattr(inner, "eqns"):
                found += _dot_operand_dtypes(inner)
    return found


def _decoder_grads(decoder, h, table, g):
    _, vjp = jax.vjp(decoder, h, table)
    return vjp(g)


def test_tied_decoder_backward_runs_in_the_compute_dtype():
    rng = np.random.default_rng(0)
    h = jnp.asarray(rng.normal(size=(3, 5, 16)), jnp.bfloat16)  # (B, P, H)
    table = jnp.asarray(rng.normal(scale=0.1, size=(40, 16)), jnp.float32)  # (V, H)
    g = jnp.asarray(rng.normal(size=(3, 5, 40)), jnp.float32)  # (B, P, V) the logits' gradient

    def autodiff(h, table):  # what the decoder was before: float32 operands in the backward
        return jnp.einsum("bph,vh->bpv", h, table.astype(h.dtype),
                          preferred_element_type=jnp.float32)

    np.testing.assert_array_equal(np.asarray(numerics.tied_decoder(h, table)),
                                  np.asarray(autodiff(h, table)))  # the same forward
    dh, dt = _decoder_grads(numerics.tied_decoder, h, table, g)
    rh, rt = _decoder_grads(autodiff, h, table, g)
    assert dh.dtype == jnp.bfloat16 and dt.dtype == jnp.float32
    # bfloat16 operands (8 mantissa bits) against float32 ones: within 1e-2 of each one's scale
    for ours, ref in ((dh, rh), (dt, rt)):
        ours, ref = np.asarray(ours, np.float32), np.asarray(ref, np.float32)
        assert np.abs(ours - ref).max() <= 1e-2 * np.abs(ref).max()
    backward = jax.make_jaxpr(lambda g: _decoder_grads(numerics.tied_decoder, h, table, g))(g)
    # the forward's matmul, then the backward's two: every one takes bfloat16 operands
    assert _dot_operand_dtypes(backward.jaxpr) == [("bfloat16", "bfloat16")] * 3
    # float32 compute: the plain einsum over the (B * P, H) rows and autodiff's own backward;
    # the same forward, gradients up to float32 summation order (one row axis instead of two)
    h32 = h.astype(jnp.float32)
    np.testing.assert_array_equal(np.asarray(numerics.tied_decoder(h32, table)),
                                  np.asarray(autodiff(h32, table)))
    for ours, ref in zip(_decoder_grads(numerics.tied_decoder, h32, table, g),
                         _decoder_grads(autodiff, h32, table, g), strict=True):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-5, atol=1e-6)


def _attention_inputs(batch: int = 5, seq: int = 7, heads: int = 3, dim: int = 4):
    q, k, v = (jax.random.normal(jax.random.key(i), (batch, seq, heads, dim)) for i in range(3))
    lengths = np.array([seq, 3, 1, seq - 1, 5][:batch])
    mask = (np.arange(seq)[None, :] < lengths[:, None]).astype(np.int32)  # (B, S) right padding
    return q, k, v, jnp.asarray(mask)


def _halve_small(p: jax.Array) -> jax.Array:
    """A dropout stand-in that draws nothing and changes what it gets: applied to the wrong
    tensor, or its output returned as the probabilities, the comparison below fails."""
    return jnp.where(p > 0.2, 2 * p, 0.5 * p)


def _numpy_attention(q, k, v, mask):
    """The attention written out in float64 numpy, `_halve_small` on the probabilities."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    scores = np.einsum("bqad,bkad->baqk", q, k) / np.sqrt(q.shape[-1])  # (B, A, S, S)
    scores = np.where(np.asarray(mask, bool)[:, None, None, :], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    dropped = np.where(probs > 0.2, 2 * probs, 0.5 * probs)
    return np.einsum("baqk,bkad->bqad", dropped, v), probs  # (B, S, A, D), (B, A, S, S)


@pytest.mark.slow
@pytest.mark.parametrize("chunks", [1, 2, 3, 5, 7])
def test_sliced_heads_major_attention_is_the_plain_one(chunks):
    """The CPU layout (heads-major, the batch in slices: uneven ones, more slices than sequences)
    computes the compiler-laid-out einsums' context, probabilities and gradients, padding masked."""
    q, k, v, mask = _attention_inputs()

    def run(n):
        def loss(q, k, v):
            context, probs = exact_attention(q, k, v, mask, _halve_small, n)
            return jnp.sum(context * v) + jnp.sum(probs ** 2), (context, probs)

        # compiled, as the model runs it (op by op, each slice's operations compile on their own)
        return jax.jit(jax.grad(loss, argnums=(0, 1, 2), has_aux=True))(q, k, v)

    (grads, (context, probs)), (ref_grads, (ref_context, ref_probs)) = run(chunks), run(None)
    assert context.shape == (5, 7, 3, 4) and probs.shape == (5, 3, 7, 7)
    np_context, np_probs = _numpy_attention(q, k, v, mask)  # both layouts against float64 numpy
    np.testing.assert_allclose(np.asarray(context), np_context, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(probs), np_probs, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(np.asarray(context), np.asarray(ref_context), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(probs), np.asarray(ref_probs), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(np.asarray(probs).sum(-1), 1.0, rtol=1e-6)  # before the stand-in
    assert float(jnp.max(probs[2, :, :, 1:])) == 0.0  # one real key: the padding gets nothing
    for g, ref in zip(grads, ref_grads, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(ref), rtol=1e-5, atol=1e-6)


def test_sliced_attention_keeps_the_dtypes_and_takes_an_empty_batch():
    q, k, v, mask = _attention_inputs()
    q, k, v = (x.astype(jnp.bfloat16) for x in (q, k, v))
    attention = jax.jit(exact_attention, static_argnums=(4, 5))
    context, probs = attention(q, k, v, mask, _halve_small, 2)
    ref_context, ref_probs = attention(q, k, v, mask, _halve_small, None)
    assert context.dtype == jnp.bfloat16 and probs.dtype == jnp.float32  # float32 softmax
    np.testing.assert_allclose(np.asarray(context, np.float32),
                               np.asarray(ref_context, np.float32), rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(np.asarray(probs), np.asarray(ref_probs), rtol=1e-6, atol=1e-7)
    empty, empty_probs = attention(q[:0], k[:0], v[:0], mask[:0], _halve_small, 2)
    assert empty.shape == (0, 7, 3, 4) and empty_probs.shape == (0, 3, 7, 7)


def test_cpu_attention_chunks(monkeypatch):
    monkeypatch.setattr(numerics.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(numerics.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    assert numerics.cpu_attention_chunks(32, drops_probs=False) == 4  # one slice per core
    assert numerics.cpu_attention_chunks(3, drops_probs=False) == 3  # at most one per sequence
    assert numerics.cpu_attention_chunks(32, drops_probs=True) == 1  # dropout draws stay whole
    monkeypatch.setattr(numerics.jax, "device_count", lambda: 2)
    assert numerics.cpu_attention_chunks(32, drops_probs=False) == 1  # a sharded batch stays put
    monkeypatch.setattr(numerics.jax, "default_backend", lambda: "gpu")
    assert numerics.cpu_attention_chunks(32, drops_probs=False) is None  # the compiler's layout


@pytest.mark.slow
def test_model_attention_takes_the_cpu_layout_on_a_cpu(monkeypatch):
    """BERT on a (2-core) CPU computes its attention in two uneven slices of its batch of three (a
    scores and a context product per slice and layer), with the numbers of the plain layout."""
    monkeypatch.setattr(numerics.jax, "default_backend", lambda: "cpu")
    monkeypatch.setattr(numerics.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    config = CONFIG.replace(num_hidden_layers=1)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    args = [_batch(config)[k] for k in KEYS]
    assert len(args[0]) == 3

    def run() -> tuple[int, Any]:
        return (str(jax.make_jaxpr(lambda: model(*args))()).count("dot_general"),
                model(*args, output_attentions=True))

    (dots, out) = run()
    monkeypatch.setattr(numerics, "cpu_attention_chunks", lambda batch, drops_probs: None)
    (plain_dots, ref) = run()
    assert dots - plain_dots == 2  # one more scores and one more context product
    np.testing.assert_allclose(np.asarray(out.sequence_output), np.asarray(ref.sequence_output),
                               rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.asarray(out.attentions[0]), np.asarray(ref.attentions[0]),
                               rtol=1e-5, atol=1e-7)
