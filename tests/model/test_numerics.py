"""The numerics contract, checked piece by piece against PyTorch and transformers.

Tolerance: 1e-6 max abs diff for element-wise functions on N(0, 3) inputs (float32).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from transformers.activations import ACT2FN

from bert_torch import numerics as tnum
from bert_torch.model import LayerNorm as TorchLayerNorm
from bertjax import numerics as jnum
from bertjax.config import ACTIVATIONS, BertConfig
from bertjax.model import LayerNorm

X = np.random.default_rng(0).normal(scale=3.0, size=(4, 64)).astype(np.float32)


@pytest.mark.parametrize("name", ACTIVATIONS)
def test_activation_matches_transformers_and_torch_mirror(name):
    ours = np.asarray(jnum.activation(name)(jnp.asarray(X)))
    hf = ACT2FN[name](torch.from_numpy(X)).numpy()
    mirror = tnum.activation(name)(torch.from_numpy(X)).numpy()
    assert np.abs(ours - hf).max() <= 1e-6
    assert np.abs(mirror - hf).max() <= 1e-6


def test_gelu_in_bfloat16_keeps_the_negative_tail():
    """bfloat16 in, bfloat16 out, computed in float32 and rounded once, as PyTorch: within one
    bfloat16 rounding (2^-8 relative, 1e-6 absolute where float32's own `1 + erf` cancels, below
    -5.4) of PyTorch's bfloat16 GELU. In bfloat16 arithmetic `1 + erf` cancels below -3, where
    GELU is still -0.004: 45% off at -3, 0 beyond."""
    x = np.linspace(-6.0, 6.0, 241).astype(np.float32)
    ours = jnum.activation("gelu")(jnp.asarray(x, jnp.bfloat16))
    theirs = tnum.activation("gelu")(torch.from_numpy(x).bfloat16()).float().numpy()
    assert ours.dtype == jnp.bfloat16
    ours = np.asarray(ours.astype(jnp.float32))
    assert np.all(np.abs(ours - theirs) <= 2.0**-8 * np.abs(theirs) + 1e-6)


def test_gelu_is_exact_not_the_tanh_approximation():
    exact = np.asarray(jnum.activation("gelu")(jnp.asarray(X)))
    tanh = np.asarray(jnum.activation("gelu_new")(jnp.asarray(X)))
    assert np.abs(exact - tanh).max() > 1e-4  # the trap is real and measurable


def test_layer_norm_uses_config_eps_and_two_pass_variance():
    config = BertConfig.from_preset("tiny", hidden_size=64, num_attention_heads=2)
    # a large common offset makes E[x^2]-E[x]^2 lose digits; two-pass variance does not
    x = (X + 1000.0).astype(np.float32)
    ours = np.asarray(LayerNorm(config, rngs=nnx.Rngs(0))(jnp.asarray(x)))
    ref = torch.nn.functional.layer_norm(torch.from_numpy(x).double(), (64,), eps=1e-12).numpy()
    mirror = TorchLayerNorm(config)(torch.from_numpy(x)).detach().numpy()
    assert np.abs(ours - ref).max() <= 1e-4
    assert np.abs(ours - mirror).max() <= 1e-4
    assert LayerNorm(config, rngs=nnx.Rngs(0)).epsilon == 1e-12
    # with a tiny-variance input the eps matters: 1e-12 (BERT) differs from Flax's 1e-6 default
    small = (X * 1e-4).astype(np.float32)
    flax_default = nnx.LayerNorm(64, rngs=nnx.Rngs(0))(jnp.asarray(small))
    ours_small = LayerNorm(config, rngs=nnx.Rngs(0))(jnp.asarray(small))
    assert np.abs(np.asarray(flax_default) - np.asarray(ours_small)).max() > 1e-2


def test_masked_softmax_agrees_and_stays_finite():
    scores = np.random.default_rng(1).normal(size=(2, 3, 5, 5)).astype(np.float32)
    mask = np.array([[1, 1, 1, 0, 0], [0, 0, 0, 0, 0]], bool)[:, None, None, :]
    ours = np.asarray(jnum.masked_softmax(jnp.asarray(scores), jnp.asarray(mask)))
    mirror = tnum.masked_softmax(torch.from_numpy(scores), torch.from_numpy(mask)).numpy()
    assert np.all(np.isfinite(ours)) and np.abs(ours - mirror).max() <= 1e-7
    assert np.all(ours[0, ..., 3:] == 0)  # masked keys get exactly zero weight
    np.testing.assert_allclose(ours[1], 0.2, rtol=1e-6)  # a fully masked row is uniform, not NaN
