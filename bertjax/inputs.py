"""Input validation: shapes always, values where the arrays are concrete (outside `jit`).

Every check raises a `ValueError` that names the input, what was found and the fix.
`bert_torch/inputs.py` makes the same checks for PyTorch.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.config import BertConfig
from bertjax.numerics import cudnn_attention_applies


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


def check_masked_positions(input_ids: jax.Array, masked_positions: jax.Array,
                           name: str = "masked_positions") -> None:
    """Positions (B, P) into input_ids (B, S): the shape always, the range where concrete."""
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise ValueError(
            f"{name} must have shape (batch={B}, num_predictions), "
            f"got {masked_positions.shape}"
        )
    if _is_concrete(masked_positions):
        _check_range(name, masked_positions, S, "seq_len")


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


def flatten_choices(
    input_ids: jax.Array, token_type_ids: jax.Array | None, attention_mask: jax.Array | None,
) -> tuple[tuple[jax.Array, jax.Array | None, jax.Array | None], tuple[int, int]]:
    """Multiple-choice inputs (B, C, S) -> ((B * C, S) each, (B, C)); a missing token-type or
    mask array stays None (the encoder fills it in)."""
    if input_ids.ndim != 3:
        raise ValueError("multiple choice takes input_ids of shape (batch, num_choices, seq_len), "
                         f"got {input_ids.shape}; stack each example's choices on axis 1")
    B, C, S = input_ids.shape
    for name, arr in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if arr is not None and arr.shape != input_ids.shape:
            raise ValueError(f"{name} must have the shape of input_ids {(B, C, S)}, got {arr.shape}")
    flat = tuple(None if a is None else a.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for a in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)
