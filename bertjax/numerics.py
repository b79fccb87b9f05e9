"""The numerics contract: every choice frameworks disagree on, pinned in one place.

`bert_torch/numerics.py` implements the same functions for PyTorch; `tests/model/test_numerics.py`
checks the two against each other and against transformers.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from bertjax.config import BertConfig
from bertjax.errors import InputError


def compute_dtype(config: BertConfig) -> jnp.dtype:
    return jnp.dtype(config.dtype)


def gelu_exact(x: jax.Array) -> jax.Array:
    """The exact GELU as PyTorch computes it, `x / 2 * (1 + erf(x / sqrt(2)))`.

    `jax.nn.gelu(approximate=False)` takes the `erfc` form, closer to float64 in the far
    negative tail but dearer on a CPU, where XLA's `erfc` branches and calls `exp` (measured in
    docs/design.md, "Speed"). A 16-bit x is computed in float32 and rounded once, as PyTorch
    does: in bfloat16, `1 + erf` cancels to 0 below x = -3.
    """
    x32 = x.astype(jnp.float32)
    return ((x32 * 0.5) * (1.0 + jax.lax.erf(x32 * math.sqrt(0.5)))).astype(x.dtype)


def gelu_tanh(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=True)


# Hugging Face activation names. "gelu" is exact: `jax.nn.gelu` defaults to the tanh approximation.
# Module-level functions (not lambdas) so two models' graph definitions compare equal.
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    "gelu": gelu_exact,
    "gelu_new": gelu_tanh,
    "gelu_pytorch_tanh": gelu_tanh,
    "relu": jax.nn.relu,
}


def activation(name: str) -> Callable[[jax.Array], jax.Array]:
    return ACTIVATIONS[name]


def head_activation(name: str) -> Callable[[jax.Array], jax.Array]:
    """A pooler's or classifier head's activation (`Family.pooler_activation`,
    `Family.classifier_head`): BERT's tanh, or one of the hidden activations."""
    return jnp.tanh if name == "tanh" else ACTIVATIONS[name]


def rows_dot_general(x: jax.Array, kernel: jax.Array, dimension_numbers: Any, **kwargs: Any
                     ) -> jax.Array:
    """`nnx.Linear`'s `lax.dot_general(x, kernel, (((x.ndim - 1,), (0,)), ((), ())))` on x
    (..., n_in) seen as one (rows, n_in) matrix, the same products in the same order.

    The kernel's gradient is then a product over one row axis. Over (B, S) XLA CPU first
    transposed the (B, S, n_out) output gradient into an (n_out, B * S) copy per layer
    (measured in docs/design.md, "Speed").
    """
    (contract_x, contract_k), batch = dimension_numbers
    if tuple(contract_x) != (x.ndim - 1,) or tuple(contract_k) != (0,) or batch != ((), ()):
        raise ValueError(f"rows_dot_general takes a dense layer's contraction, not {dimension_numbers}")
    if x.ndim == 2 or kwargs.get("out_sharding") is not None:  # an explicit output sharding
        return jax.lax.dot_general(x, kernel, dimension_numbers, **kwargs)  # names (..., n_out)
    rows = x.reshape(-1, x.shape[-1])  # (N, n_in): N = the product of x's leading axes
    out = jax.lax.dot_general(rows, kernel, (((1,), (0,)), ((), ())), **kwargs)  # (N, n_out)
    return out.reshape(*x.shape[:-1], kernel.shape[-1])  # (..., n_out)


@jax.custom_vjp
def add_broadcast(x: jax.Array, y: jax.Array) -> jax.Array:
    """`x + y`, with `y` broadcast over the leading axes of `x` (a bias (V,) over (..., V), the
    position rows (S, H) over (B, S, H)), whose gradient for `y` is a ones-vector matmul.

    Autodiff's gradient for `y` is a sum over the leading axes, which XLA CPU runs far slower
    over the MLM logits' gradient than a matmul with a ones vector. On a GPU, XLA lays a tensor
    out with the summed batch axis minor to reduce over it: for the position rows that put the
    whole residual stream of BERT in (S, H, B) order, transposed back and forth around every
    matmul (none with the matmul; both measured in docs/design.md, "Speed"). Same forward, same
    gradient up to summation order.
    """
    return x + y


def _add_broadcast_fwd(x: jax.Array, y: jax.Array) -> tuple[jax.Array, jax.Array]:
    return x + y, y


def _sum_of_copies(g: jax.Array, y: jax.Array) -> jax.Array:
    """The sum of `g` over the leading axes that broadcast `y`, as a ones-vector matmul."""
    rows = g.reshape(-1, y.size)  # (N, Y): N = the broadcast copies of y
    ones = jnp.ones((rows.shape[0],), rows.dtype)  # (N,)
    dy = jnp.dot(ones, rows, precision=jax.lax.Precision.HIGHEST,
                 preferred_element_type=jnp.float32)  # (Y,)
    return dy.reshape(y.shape).astype(y.dtype)


def _add_broadcast_bwd(y: jax.Array, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    return g, _sum_of_copies(g, y)


add_broadcast.defvjp(_add_broadcast_fwd, _add_broadcast_bwd)


@jax.custom_vjp
def scale_broadcast(x: jax.Array, y: jax.Array) -> jax.Array:
    """`x * y`, `y` broadcast over the leading axes of `x` (LayerNorm's scale (H,) over
    (..., H)), whose gradient for `y` is a ones-vector matmul, for the reason `add_broadcast`
    gives: on a GPU autodiff's sums of LayerNorm's scale and bias gradients over (B, S) kept
    the residual stream in (S, H, B) order (docs/design.md, "Speed")."""
    return x * y


def _scale_broadcast_fwd(x: jax.Array, y: jax.Array) -> tuple[jax.Array, tuple]:
    return x * y, (x, y)


def _scale_broadcast_bwd(saved: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    x, y = saved
    return g * y, _sum_of_copies(g * x, y)


scale_broadcast.defvjp(_scale_broadcast_fwd, _scale_broadcast_bwd)


def layer_norm(x: jax.Array, scale: jax.Array, bias: jax.Array | None, epsilon: float
               ) -> jax.Array:
    """LayerNorm over the last axis in float32, two-pass variance (E[x^2]-E[x]^2 loses half the
    1e-5 margin): Flax's, with the scale and bias gradients as matmuls (`scale_broadcast`);
    without a bias where `bias` is None (ModernBERT's `norm_bias=False`)."""
    x = x.astype(jnp.float32)
    centred = x - jnp.mean(x, axis=-1, keepdims=True)  # (..., H)
    variance = jnp.mean(jnp.square(centred), axis=-1, keepdims=True)  # (..., 1)
    normalised = centred * jax.lax.rsqrt(variance + epsilon)
    scaled = scale_broadcast(normalised, scale)
    return scaled if bias is None else add_broadcast(scaled, bias)


def tied_decoder(h: jax.Array, embedding: jax.Array) -> jax.Array:
    """The MLM decoder `h @ embedding.T` with float32 logits: h (..., H) in the compute dtype,
    the float32 word-embedding table (V, H) cast to it. Returns (..., V) float32.

    In float32 this is the plain einsum. In a 16-bit compute dtype the forward accumulates in
    float32 as before, and the backward casts the logits' float32 gradient to the compute dtype
    before its two matmuls (as torch.autocast's backward of a bfloat16 Linear does): autodiff
    would run them with float32 operands (a TF32 pair of the vocabulary's size on a GPU;
    docs/design.md, "Speed") instead of bfloat16 ones. The embedding's gradient is still
    accumulated and returned in float32.
    """
    rows = h.reshape(-1, h.shape[-1])  # (N, H): one row axis, as `rows_dot_general` explains
    if h.dtype == jnp.float32:
        logits = jnp.einsum("nh,vh->nv", rows, embedding, preferred_element_type=jnp.float32)
    else:
        logits = _tied_decoder_16bit(rows, embedding)
    return logits.reshape(*h.shape[:-1], embedding.shape[0])  # (..., V)


@jax.custom_vjp
def _tied_decoder_16bit(h: jax.Array, embedding: jax.Array) -> jax.Array:
    return jnp.einsum("...h,vh->...v", h, embedding.astype(h.dtype),
                      preferred_element_type=jnp.float32)


def _tied_decoder_fwd(h: jax.Array, embedding: jax.Array) -> tuple[jax.Array, tuple]:
    return _tied_decoder_16bit(h, embedding), (h, embedding)


def _tied_decoder_bwd(saved: tuple, g: jax.Array) -> tuple[jax.Array, jax.Array]:
    h, embedding = saved
    g = g.astype(h.dtype)  # (..., V)
    dh = jnp.einsum("...v,vh->...h", g, embedding.astype(h.dtype),
                    preferred_element_type=jnp.float32).astype(h.dtype)  # (..., H)
    rows, hidden = g.reshape(-1, g.shape[-1]), h.reshape(-1, h.shape[-1])  # (N, V), (N, H)
    d_embedding = jnp.einsum("nv,nh->vh", rows, hidden, preferred_element_type=jnp.float32)
    return dh, d_embedding.astype(embedding.dtype)  # (V, H)


_tied_decoder_16bit.defvjp(_tied_decoder_fwd, _tied_decoder_bwd)


def masked_softmax(scores: jax.Array, mask: jax.Array) -> jax.Array:
    """Softmax in float32 over keys where `mask` is true.

    Masked scores become `finfo(float32).min` (not -inf, which turns a fully masked row into NaN,
    and not -1e9, which overflows in float16); a fully masked row stays finite (uniform).
    """
    scores = scores.astype(jnp.float32)
    scores = jnp.where(mask.astype(bool), scores, jnp.finfo(jnp.float32).min)
    return jax.nn.softmax(scores, axis=-1)


def dropout_rngs(deterministic: bool, dropout_rng: jax.Array | None) -> nnx.Rngs | None:
    """One dropout stream per forward, built from an explicit key (keeps model state pure)."""
    if deterministic:
        return None
    if dropout_rng is None:
        raise InputError("deterministic=False needs dropout_rng=jax.random.key(...) for dropout")
    return nnx.Rngs(dropout=dropout_rng)


def dropout_keys(deterministic: bool, dropout_rng: jax.Array | None, n: int) -> jax.Array | None:
    """`n` independent dropout keys (one per part of the model) from one key; None without dropout."""
    if dropout_rngs(deterministic, dropout_rng) is None or dropout_rng is None:
        return None
    return jax.vmap(lambda i: jax.random.fold_in(dropout_rng, i))(jnp.arange(n))  # (n,) keys


def rngs_of(keys: jax.Array | None, i: int) -> nnx.Rngs | None:
    return None if keys is None else nnx.Rngs(dropout=keys[i])


def compute_dtype_of(embed: nnx.Embed) -> jnp.dtype:
    """The dtype an `nnx.Embed` returns its rows in (its `dtype`, else its table's)."""
    return jnp.dtype(embed.dtype or embed.embedding.dtype)


def cudnn_attention_applies(dtype: jnp.dtype, head_dim: int) -> bool:
    """Whether cuDNN's fused attention takes these heads: an NVIDIA GPU, float16/bfloat16 q/k/v
    and a head size that is a multiple of 8, at most 128 (JAX's own check raises otherwise)."""
    return (jax.default_backend() == "gpu" and jnp.dtype(dtype) in (jnp.bfloat16, jnp.float16)
            and head_dim % 8 == 0 and head_dim <= 128)


def cpu_attention_chunks(batch: int, drops_probs: bool) -> int | None:
    """How many slices of the batch the exact attention computes apart on a CPU (see
    `bertjax.attention.exact_attention`): one per core XLA computes on (read when the model is
    traced), at most one per sequence. One slice with probability dropout (its random draws
    stay those of the whole batch) and with several devices (slicing a sharded batch would move
    rows between devices; processes could differ in cores). None on a GPU/TPU, whose compilers
    lay the batched matmuls out themselves.

    XLA CPU runs a batched matmul on one thread, and independent operations side by side: on
    2 cores the CPU bench's step gained (docs/design.md, "Speed"); more cores are unmeasured.
    """
    if jax.default_backend() != "cpu":
        return None
    if drops_probs or jax.device_count() > 1:
        return 1
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(1, min(batch, cores or 1))


def use_fused_attention(
    implementation: str, drops_probs: bool, output_probs: bool, cudnn: bool, packed: bool = False
) -> bool:
    """Whether attention takes the fused path (see `bertjax.model.BertAttention`); `cudnn` is
    whether cuDNN takes these heads (`cudnn_attention_applies`), never for packed rows.

    `packed` rows (a block-diagonal mask) stay exact under "auto", and an explicit "fused" hands
    their mask to XLA's implementation, not cuDNN's, whose gradient through it came back NaN on
    an H100 (`bertjax.attention.fused_attention`)."""
    if implementation == "exact":
        return False
    if implementation == "fused" and drops_probs:
        raise InputError(
            "attn_implementation='fused' applies no dropout to attention probabilities, but "
            "attention_probs_dropout_prob > 0 in training: set it to 0, or use 'exact' (or 'auto', "
            "which takes the exact path when probability dropout is due)")
    if implementation == "auto" and (drops_probs or not cudnn or packed):
        return False
    return not output_probs
