"""The numerics contract: every choice frameworks disagree on, pinned in one place.

`bert_torch/numerics.py` implements the same functions for PyTorch; `tests/test_numerics.py`
checks the two against each other and against transformers.
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig


def compute_dtype(config: BertConfig) -> jnp.dtype:
    return jnp.dtype(config.dtype)


def gelu_exact(x: jax.Array) -> jax.Array:
    return jax.nn.gelu(x, approximate=False)


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
        raise ValueError("deterministic=False needs dropout_rng=jax.random.key(...) for dropout")
    return nnx.Rngs(dropout=dropout_rng)


def dropout_keys(deterministic: bool, dropout_rng: jax.Array | None, n: int) -> jax.Array | None:
    """`n` independent dropout keys (one per part of the model) from one key; None without dropout."""
    if dropout_rngs(deterministic, dropout_rng) is None:
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


def use_fused_attention(
    implementation: str, drops_probs: bool, output_probs: bool, cudnn: bool
) -> bool:
    """Whether attention takes the fused path (see `bertjax.model.BertAttention`); `cudnn` is
    `cudnn_attention_applies(...)` for the heads at hand."""
    if implementation == "exact":
        return False
    if implementation == "fused" and drops_probs:
        raise ValueError(
            "attn_implementation='fused' applies no dropout to attention probabilities, but "
            "attention_probs_dropout_prob > 0 in training: set it to 0, or use 'exact' (or 'auto', "
            "which takes the exact path when probability dropout is due)")
    if implementation == "auto" and (drops_probs or not cudnn):
        return False
    return not output_probs


def _is_concrete(x: jax.Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_inputs(
    config: BertConfig,
    input_ids: jax.Array,
    token_type_ids: jax.Array | None,
    attention_mask: jax.Array | None,
) -> tuple[jax.Array, jax.Array]:
    """Validate a batch; fill in default token types (zeros) and mask (ones).

    Shapes are always checked. Values (ids inside the vocabulary, token types inside
    `type_vocab_size`) are checked when the arrays are concrete, i.e. outside `jit`; inside `jit`
    call `check_batch` on the host first, since out-of-range ids would silently clamp.
    """
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq_len), got {input_ids.shape}")
    B, S = input_ids.shape
    if S > config.max_position_embeddings:
        raise ValueError(
            f"input_ids has seq_len {S} > max_position_embeddings "
            f"({config.max_position_embeddings}); truncate the input or use a config with more "
            "positions"
        )
    if not jnp.issubdtype(input_ids.dtype, jnp.integer):
        raise ValueError(f"input_ids must be integers, got dtype {input_ids.dtype}")
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = jnp.ones_like(input_ids)
    for name, arr in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if arr.shape != (B, S):
            raise ValueError(f"{name} must have the shape of input_ids {(B, S)}, got {arr.shape}")
    if _is_concrete(attention_mask) and may_fuse_attention(config):
        _check_right_padding(attention_mask)
    if _is_concrete(input_ids):
        _check_range("input_ids", input_ids, config.vocab_size, "vocab_size")
    if _is_concrete(token_type_ids):
        _check_range("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")
    return token_type_ids, attention_mask


def may_fuse_attention(config: BertConfig) -> bool:
    """Whether attention may take the fused path here (then masks must be right padding)."""
    auto = config.attn_implementation == "auto"
    return config.attn_implementation == "fused" or (
        auto and cudnn_attention_applies(jnp.dtype(config.dtype), config.head_dim))


def _check_right_padding(attention_mask: jax.Array) -> None:
    mask = np.asarray(attention_mask) != 0
    lengths = mask.sum(axis=1)
    bad = np.flatnonzero((mask != (np.arange(mask.shape[1])[None, :] < lengths[:, None])).any(1))
    if bad.size:
        raise ValueError(
            f"attention_mask rows {bad[:5].tolist()} are not right padding (ones, then zeros), "
            "which fused attention reads as sequence lengths: pad at the end, or use "
            "attn_implementation='exact'")


def check_masked_positions(input_ids: jax.Array, masked_positions: jax.Array) -> None:
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise ValueError(
            f"masked_positions must have shape (batch={B}, num_predictions), "
            f"got {masked_positions.shape}"
        )
    if _is_concrete(masked_positions):
        _check_range("masked_positions", masked_positions, S, "seq_len")


def _check_range(name: str, arr: jax.Array, limit: int, limit_name: str) -> None:
    values = np.asarray(arr)
    if values.size == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < 0 or hi >= limit:
        bad = values[(values < 0) | (values >= limit)]
        raise ValueError(
            f"{name} has values outside [0, {limit_name}={limit}): e.g. {bad[:5].tolist()} "
            f"(min {lo}, max {hi}); check the tokenizer matches the model config"
        )


def check_batch(config: BertConfig, batch: dict[str, np.ndarray]) -> None:
    """Host-side check of a batch before it enters a jitted step."""
    ids = batch["input_ids"]
    check_inputs(config, ids, batch.get("token_type_ids"), batch.get("attention_mask"))
    if "masked_positions" in batch:
        check_masked_positions(ids, batch["masked_positions"])
