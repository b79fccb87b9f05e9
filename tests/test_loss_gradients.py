"""The pre-training loss's gradient paths that the CPU step's speed depends on: a cross-entropy
whose gradient writes no scatter the size of the logits, and an MLM bias whose gradient is a
matmul instead of a reduction. Both must give optax's / autodiff's numbers (that the compiled
backward pass holds no such scatter or reduction: tests/test_speed_paths.py).

Tolerances: the cross-entropy's value equals optax's exactly (same formula, the picked logit is
exact); gradients within 1e-6 (float32 summation order only).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from bertjax import numerics
from bertjax.losses import cross_entropy


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
