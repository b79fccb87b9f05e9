"""The pre-training loss's gradient paths that the CPU step's speed depends on: a cross-entropy
whose gradient writes no scatter the size of the logits, and an MLM bias whose gradient is a
matmul instead of a reduction. Both must give optax's / autodiff's numbers (that the compiled
backward pass holds no such scatter or reduction: tests/model/test_speed_paths.py).

Tolerances: the cross-entropy's value equals optax's exactly (same formula, the picked logit is
exact); gradients within 1e-6 (float32 summation order only).
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax import numerics
from bertjax.losses import argmax_is, cross_entropy


def _logits_and_labels(shape: tuple[int, ...], vocab: int) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    logits = 3.0 * jax.random.normal(k1, (*shape, vocab), jnp.float32)
    return logits, jax.random.randint(k2, shape, 0, vocab)


@pytest.mark.slow
@pytest.mark.parametrize(("shape", "vocab"), [((4, 7), 301), ((5,), 2)])  # MLM-like, NSP-like
def test_cross_entropy_equals_optax_value_and_gradient(shape: tuple[int, ...], vocab: int):
    logits, labels = _logits_and_labels(shape, vocab)
    ours = cross_entropy(logits, labels)
    theirs = optax.softmax_cross_entropy_with_integer_labels(logits, labels)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(theirs))
    weights = jnp.linspace(0.0, 1.0, labels.size).reshape(labels.shape)
    g_ours = jax.grad(lambda x: jnp.sum(cross_entropy(x, labels) * weights))(logits)
    g_theirs = jax.grad(lambda x: jnp.sum(
        optax.softmax_cross_entropy_with_integer_labels(x, labels) * weights))(logits)
    np.testing.assert_allclose(np.asarray(g_ours), np.asarray(g_theirs), rtol=0, atol=1e-6)


def test_cross_entropy_of_a_label_outside_the_vocabulary_picks_nothing():
    """-100 (transformers' ignore index), V or -3 (which NumPy indexing would wrap to V - 3): the
    loss is the logsumexp, its gradient the softmax (forward and backward agree), never a
    wrapped-around or NaN pick."""
    logits, _ = _logits_and_labels((4,), 11)
    labels = jnp.array([-100, 11, -3, 4])
    np.testing.assert_array_equal(np.asarray(cross_entropy(logits, labels))[:3],
                                  np.asarray(jax.nn.logsumexp(logits, -1))[:3])
    grads = jax.grad(lambda x: jnp.sum(cross_entropy(x, labels)))(logits)
    np.testing.assert_allclose(np.asarray(grads[:3]), np.asarray(jax.nn.softmax(logits[:3])),
                               rtol=0, atol=1e-6)


@pytest.mark.parametrize(("shape", "vocab"), [((6, 9), 301), ((40,), 2)])
def test_argmax_is_matches_argmax_with_ties(shape: tuple[int, ...], vocab: int):
    """Whole-number logits in a narrow range tie often; labels on every tied maximum, the first of
    them (argmax's pick) and elsewhere; a NaN row matches nothing."""
    k1, k2 = jax.random.split(jax.random.key(3))
    logits = jnp.round(2.0 * jax.random.normal(k1, (*shape, vocab)))  # ties in most rows
    top = logits == jnp.max(logits, -1, keepdims=True)
    labels = [jnp.argmax(logits, -1), jax.random.randint(k2, shape, 0, vocab),
              jnp.argmax(jnp.where(top, jnp.arange(vocab), -1), -1)]  # the last tied maximum
    assert int(jnp.sum(jnp.sum(top, -1) > 1)) > 0  # the ties are there
    for y in labels:
        np.testing.assert_array_equal(np.asarray(argmax_is(logits, y)),
                                      np.asarray(jnp.argmax(logits, -1) == y))
    nan_row = logits.at[(0,) * len(shape)].set(jnp.nan)
    assert not bool(argmax_is(nan_row, labels[0])[(0,) * len(shape)])


@pytest.mark.parametrize(("shape", "y_shape"), [((3, 5, 301), (301,)), ((4, 6, 8), (6, 8))])
def test_add_broadcast_gradient_equals_autodiff(shape, y_shape):
    """A bias over the last axis and the position rows over the batch axis."""
    x = jax.random.normal(jax.random.key(0), shape)
    y = jax.random.normal(jax.random.key(1), y_shape)
    g = jax.random.normal(jax.random.key(2), shape)
    np.testing.assert_array_equal(np.asarray(numerics.add_broadcast(x, y)), np.asarray(x + y))
    ours = jax.grad(lambda x, y: jnp.sum(numerics.add_broadcast(x, y) * g), argnums=(0, 1))(x, y)
    plain = jax.grad(lambda x, y: jnp.sum((x + y) * g), argnums=(0, 1))(x, y)
    for a, b in zip(ours, plain, strict=True):  # sums of at most 15 O(1) terms: 1e-6 relative
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)
    # bfloat16 rows: the gradient keeps y's dtype, summed in float32
    y16 = y.astype(jnp.bfloat16)
    _, vjp = jax.vjp(numerics.add_broadcast, x.astype(jnp.bfloat16), y16)
    dy = vjp(g.astype(jnp.bfloat16))[1]
    assert dy.dtype == jnp.bfloat16
    np.testing.assert_allclose(np.asarray(dy, np.float32), np.asarray(plain[1]), rtol=2e-2, atol=2e-2)


def test_layer_norm_equals_flax_and_sums_its_parameter_gradients_by_matmul():
    """`numerics.layer_norm` is Flax's two-pass LayerNorm (float32, outputs and every gradient
    within 1e-6), and autodiff sums the scale's and bias's gradients over (B, S) with no
    reduction: on a GPU such a reduction kept the residual stream in (S, H, B) order."""
    from flax import nnx

    x = 3 + 2 * jax.random.normal(jax.random.key(0), (3, 5, 16))
    g = jax.random.normal(jax.random.key(1), x.shape)
    flax_norm = nnx.LayerNorm(16, epsilon=1e-12, use_fast_variance=False, rngs=nnx.Rngs(0))
    scale = 1 + 0.1 * jax.random.normal(jax.random.key(2), (16,))
    bias = 0.1 * jax.random.normal(jax.random.key(3), (16,))
    flax_norm.scale[...], flax_norm.bias[...] = scale, bias
    graphdef, params = nnx.split(flax_norm)

    def theirs(x, params):
        return jnp.sum(nnx.merge(graphdef, params)(x) * g)

    def ours(x, scale, bias):
        return jnp.sum(numerics.layer_norm(x, scale, bias, 1e-12) * g)

    np.testing.assert_allclose(np.asarray(numerics.layer_norm(x, scale, bias, 1e-12)),
                               np.asarray(flax_norm(x)), rtol=1e-6, atol=1e-6)
    dx, dscale, dbias = jax.grad(ours, argnums=(0, 1, 2))(x, scale, bias)
    ref_x, ref_params = jax.grad(theirs, argnums=(0, 1))(x, params)
    for a, b in ((dx, ref_x), (dscale, ref_params["scale"][...]), (dbias, ref_params["bias"][...])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-5)
    jaxpr = str(jax.make_jaxpr(jax.grad(ours, argnums=(1, 2)))(x, scale, bias))
    assert "dot_general" in jaxpr
    assert not re.search(r"reduce_sum\[axes=\(0, 1\)", jaxpr), jaxpr  # (B, S) summed


def test_packed_rows_without_a_pair_have_nsp_loss_zero_in_both_frameworks():
    """Empty slots only (weights all 0): NSP's mean over no pair is 0, not 0/0 = NaN."""
    import torch

    from bert_torch.losses import nsp_loss
    from bertjax.losses import loss_from_sums

    sums = {"mlm_loss_sum": jnp.float32(2.0), "nsp_loss_sum": jnp.float32(0.0)}
    assert float(loss_from_sums(sums, jnp.float32(4), jnp.float32(0))) == 0.5
    logits, labels = torch.randn(2, 3, 2), torch.zeros(2, 3, dtype=torch.long)
    assert float(nsp_loss(logits, labels, torch.zeros(2, 3))) == 0.0
