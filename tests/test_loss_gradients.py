"""The pre-training loss's gradient paths that the CPU step's speed depends on: a cross-entropy
whose gradient writes no scatter the size of the logits, and an MLM bias whose gradient is a
matmul instead of a reduction. Both must give optax's / autodiff's numbers.

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
from flax import nnx

from bertjax import BertConfig, BertForPreTraining, numerics
from bertjax.losses import cross_entropy, pretraining_loss
from parity.tensors import random_batch

CONFIG = BertConfig.from_preset("tiny", vocab_size=301)  # a distinctive vocabulary size
KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions")


def _logits_and_labels(shape: tuple[int, ...], vocab: int) -> tuple[jax.Array, jax.Array]:
    k1, k2 = jax.random.split(jax.random.key(0))
    logits = 3.0 * jax.random.normal(k1, (*shape, vocab), jnp.float32)
    return logits, jax.random.randint(k2, shape, 0, vocab)


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


def test_add_bias_gradient_equals_autodiff():
    x, _ = _logits_and_labels((3, 5), 301)
    bias = jax.random.normal(jax.random.key(1), (301,))
    g = jax.random.normal(jax.random.key(2), x.shape)
    np.testing.assert_array_equal(np.asarray(numerics.add_bias(x, bias)), np.asarray(x + bias))
    ours = jax.grad(lambda x, b: jnp.sum(numerics.add_bias(x, b) * g), argnums=(0, 1))(x, bias)
    plain = jax.grad(lambda x, b: jnp.sum((x + b) * g), argnums=(0, 1))(x, bias)
    for a, b in zip(ours, plain, strict=True):  # sums of 15 O(1) terms: 1e-6 relative
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-6, atol=1e-6)


def test_pretraining_backward_writes_no_scatter_of_the_logits_shape():
    model = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    batch = random_batch(CONFIG, batch_size=3, seq_len=24, num_predictions=5, seed=1)

    def loss(p):
        out = nnx.merge(graphdef, p)(*(batch[k] for k in KEYS))
        return pretraining_loss(out.mlm_logits, out.nsp_logits, batch)[0]

    hlo = jax.jit(jax.grad(loss)).lower(params).compile().as_text()
    scattered = re.findall(r"= f32\[([\d,]+)\]\{[^}]*\} scatter\(", hlo)
    V = CONFIG.vocab_size
    assert not [s for s in scattered if s.endswith(f",{V}")], scattered  # (B, P, V) or (B*P, V)
    # and the bias gradient is a dot, not a reduction over the logits' rows
    assert not re.search(rf"= f32\[{V}\]\{{0\}} reduce\(", hlo)
