"""Input validation: shapes always, values where the arrays are concrete (outside `jit`); and
the attention mask and positions of packed rows (`packed_attention`).

Every check raises a `ValueError` that names the input, what was found and the fix.
`bert_torch/inputs.py` makes the same checks for PyTorch.

Packing: a row may hold several sequences, each with its own [CLS], token types and positions
from 0. `sequence_ids` (B, S) says which (1..K; 0 is padding); attention then stays inside each
sequence, positions restart per sequence unless `position_ids` (B, S) are given, and the heads
that read [CLS] read it at `cls_positions` (B, K) (-1: a row with fewer than K sequences).
`bertjax.data.packing` packs token-id sequences into such rows.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.config import BertConfig
from bertjax.errors import InputError
from bertjax.numerics import cudnn_attention_applies

# The packing arguments every model class takes (keyword-only), in `packing_inputs`'s order.
PACKING_ARGS = ("sequence_ids", "position_ids", "cls_positions")


def packing_options(batch: Any) -> dict[str, Any]:
    """The model's packing keywords from a batch (a dict of arrays): those of `PACKING_ARGS` it
    holds, none for rows of one sequence each."""
    return {k: batch[k] for k in PACKING_ARGS if k in batch}


def _is_concrete(x: jax.Array) -> bool:
    return not isinstance(x, jax.core.Tracer)


def check_inputs(
    config: BertConfig,
    input_ids: jax.Array,
    token_type_ids: jax.Array | None,
    attention_mask: jax.Array | None,
    *,
    packed: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Validate a batch; fill in default token types (zeros) and mask (ones). `packed` rows
    (`sequence_ids` given) need not be right padding: their mask is not read as lengths.

    Shapes are always checked. Values (ids inside the vocabulary, token types inside
    `type_vocab_size`) are checked when the arrays are concrete, i.e. outside `jit`; inside `jit`
    call `check_batch` on the host first, since out-of-range ids would silently clamp.
    """
    if input_ids.ndim != 2:
        raise InputError(f"input_ids must have shape (batch, seq_len), got {input_ids.shape}")
    B, S = input_ids.shape
    if S > config.max_sequence_length and not packed:  # packed: each sequence's, below
        raise InputError(
            f"input_ids has seq_len {S} > {config.positions_limit}; truncate the input or use a "
            "config with more positions"
        )
    if not jnp.issubdtype(input_ids.dtype, jnp.integer):
        raise InputError(f"input_ids must be integers, got dtype {input_ids.dtype}")
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = jnp.ones_like(input_ids)
    for name, arr in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if arr.shape != (B, S):
            raise InputError(f"{name} must have the shape of input_ids {(B, S)}, got {arr.shape}")
    if not packed and _is_concrete(attention_mask) and may_fuse_attention(config):
        _check_right_padding(attention_mask)
    if _is_concrete(input_ids):
        _check_range("input_ids", input_ids, config.vocab_size, "vocab_size")
    if _is_concrete(token_type_ids) and config.family.token_types:  # DistilBERT: unread
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
        raise InputError(
            f"attention_mask rows {bad[:5].tolist()} are not right padding (ones, then zeros), "
            "which fused attention reads as sequence lengths: pad at the end, or use "
            "attn_implementation='exact'")


def packing_inputs(
    config: BertConfig,
    input_ids: jax.Array,
    attention_mask: jax.Array,
    sequence_ids: jax.Array | None,
    position_ids: jax.Array | None,
    cls_positions: jax.Array | None,
) -> tuple[jax.Array, jax.Array | None]:
    """Validate the packing inputs; return the mask the layers take (the key padding mask (B, S),
    or packed rows' block-diagonal mask (B, S, S)) and the rows of the position table (None:
    0..S-1 in every row; with `sequence_ids` and no `position_ids`, each sequence's from 0).

    `position_ids` count a sequence's tokens from 0 in every family; a family whose table starts
    later (RoBERTa: pad_token_id + 1, padding at pad_token_id) has them moved there, and without
    them gets transformers' positions from the padding in `input_ids`."""
    check_packing(config, input_ids, sequence_ids, position_ids, cls_positions)
    offset = config.position_offset
    if sequence_ids is None:
        if position_ids is None:
            return attention_mask, (offset_positions(input_ids, config.pad_token_id)
                                    if config.family.offset_positions else None)
        return attention_mask, position_ids + offset if offset else position_ids
    mask, positions = packed_attention(sequence_ids, attention_mask)
    positions = positions if position_ids is None else position_ids
    if config.family.offset_positions:  # each sequence's from pad + 1, padding at pad
        positions = jnp.where(sequence_ids != 0, positions + offset, config.pad_token_id)
    return mask, positions


def offset_positions(input_ids: jax.Array, pad_token_id: int) -> jax.Array:
    """RoBERTa's positions (B, S): a token's is pad_token_id + 1 + the number of tokens before
    it that are not padding, a padding token's pad_token_id (transformers'
    `create_position_ids_from_input_ids`)."""
    real = (input_ids != pad_token_id).astype(jnp.int32)  # (B, S)
    return jnp.cumsum(real, axis=1, dtype=jnp.int32) * real + pad_token_id


def check_packing(
    config: BertConfig,
    input_ids: jax.Array,
    sequence_ids: jax.Array | None,
    position_ids: jax.Array | None,
    cls_positions: jax.Array | None,
) -> None:
    """Shapes and dtypes always; values where concrete (ids >= 0, positions inside the table,
    [CLS] positions on tokens or -1)."""
    B, S = input_ids.shape
    for name, arr in (("sequence_ids", sequence_ids), ("position_ids", position_ids)):
        if arr is None:
            continue
        if arr.shape != (B, S):
            raise InputError(f"{name} must have the shape of input_ids {(B, S)}, got {arr.shape}")
        if not jnp.issubdtype(arr.dtype, jnp.integer):
            raise InputError(f"{name} must be integers, got dtype {arr.dtype}")
    lowest = int(np.asarray(sequence_ids).min(initial=0)) if (
        sequence_ids is not None and _is_concrete(sequence_ids)) else 0
    if lowest < 0:
        raise InputError("sequence_ids must be 0 (padding) or a packed sequence's number (1, 2, "
                         f"...), got {lowest}")
    if position_ids is not None and _is_concrete(position_ids):
        _check_range("position_ids", position_ids, config.max_sequence_length,
                     "max_position_embeddings" if not config.position_offset
                     else f"max_position_embeddings less {config.position_offset} rows")
    elif sequence_ids is not None and S > config.max_sequence_length and _is_concrete(
            sequence_ids):  # a row longer than the positions: each sequence must fit them
        ids = np.asarray(sequence_ids)
        rows = np.repeat(np.arange(B), S).reshape(B, S)  # (B, S): each token's row
        _, counts = np.unique(np.stack([rows[ids > 0], ids[ids > 0]]), axis=1, return_counts=True)
        if counts.size and counts.max() > config.max_sequence_length:
            raise InputError(f"a packed sequence of {counts.max()} tokens is longer than "
                             f"{config.positions_limit}; truncate it")
    if cls_positions is not None:
        _check_cls_positions(cls_positions, input_ids, sequence_ids)


def _check_cls_positions(cls_positions: jax.Array, input_ids: jax.Array,
                         sequence_ids: jax.Array | None) -> None:
    """(B, K) positions in [0, S), or -1 for an empty slot; each on a token of some sequence."""
    B, S = input_ids.shape
    if cls_positions.ndim != 2 or cls_positions.shape[0] != B:
        raise InputError(f"cls_positions must have shape (batch={B}, sequences per row), "
                         f"got {cls_positions.shape}")
    if not _is_concrete(cls_positions):
        return
    _check_range("cls_positions", cls_positions, S, "seq_len", low=-1)
    if sequence_ids is not None and _is_concrete(sequence_ids):
        cls = np.asarray(cls_positions)
        on = np.take_along_axis(np.asarray(sequence_ids), np.maximum(cls, 0), axis=1)  # (B, K)
        rows = np.flatnonzero(((cls >= 0) & (on == 0)).any(axis=1))
        if rows.size:
            raise InputError(f"cls_positions of rows {rows[:5].tolist()} point at padding "
                             "(sequence id 0): mark an empty slot -1")


def packed_attention(sequence_ids: jax.Array, attention_mask: jax.Array
                     ) -> tuple[jax.Array, jax.Array]:
    """The attention mask (B, S, S) and positions (B, S) of packed rows.

    Query i may attend key j where both belong to one sequence (`sequence_ids` (B, S) equal)
    and key j is a token (sequence id not 0, `attention_mask` not 0): block-diagonal. A padding
    query attends no key (a fully masked row, finite: see `numerics.masked_softmax`). A token's
    position is how many tokens of its sequence come before it in the row: 0, 1, ... per
    sequence, whether its tokens are contiguous or not; padding's is 0.
    """
    same = sequence_ids[:, :, None] == sequence_ids[:, None, :]  # (B, S, S) query x key
    keys = (sequence_ids != 0) & (attention_mask != 0)  # (B, S)
    before = jnp.sum(jnp.tril(same, -1), axis=-1, dtype=jnp.int32)  # (B, S) earlier, same seq
    return same & keys[:, None, :], jnp.where(sequence_ids != 0, before, 0)


def sequence_mask(sequence_ids: jax.Array, slots: int) -> jax.Array:
    """(B, K, S) bool of packed rows: position s holds the row's sequence k (slot k holds
    sequence id k + 1); what per-sequence pooling and losses over a row's positions select."""
    ids = jnp.arange(1, slots + 1, dtype=sequence_ids.dtype)  # (K,)
    return sequence_ids[:, None, :] == ids[None, :, None]


def check_masked_positions(input_ids: jax.Array, masked_positions: jax.Array,
                           name: str = "masked_positions") -> None:
    """Positions (B, P) into input_ids (B, S): the shape always, the range where concrete."""
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise InputError(
            f"{name} must have shape (batch={B}, num_predictions), "
            f"got {masked_positions.shape}"
        )
    if _is_concrete(masked_positions):
        _check_range(name, masked_positions, S, "seq_len")


def _check_range(name: str, arr: jax.Array, limit: int, limit_name: str, low: int = 0) -> None:
    values = np.asarray(arr)
    if values.size == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < low or hi >= limit:
        bad = values[(values < low) | (values >= limit)]
        raise InputError(
            f"{name} has values outside [{low}, {limit_name}={limit}): e.g. {bad[:5].tolist()} "
            f"(min {lo}, max {hi}); check the tokenizer matches the model config"
        )


def check_batch(config: BertConfig, batch: dict[str, np.ndarray]) -> None:
    """Host-side check of a batch before it enters a jitted step."""
    ids = batch["input_ids"]
    packed = batch.get("sequence_ids") is not None
    check_inputs(config, ids, batch.get("token_type_ids"), batch.get("attention_mask"),
                 packed=packed)
    check_packing(config, ids, *(batch.get(k) for k in PACKING_ARGS))
    if "masked_positions" in batch:
        check_masked_positions(ids, batch["masked_positions"])


def flatten_choices(
    input_ids: jax.Array, token_type_ids: jax.Array | None, attention_mask: jax.Array | None,
) -> tuple[tuple[jax.Array, jax.Array | None, jax.Array | None], tuple[int, int]]:
    """Multiple-choice inputs (B, C, S) -> ((B * C, S) each, (B, C)); a missing token-type or
    mask array stays None (the encoder fills it in)."""
    if input_ids.ndim != 3:
        raise InputError("multiple choice takes input_ids of shape (batch, num_choices, seq_len), "
                         f"got {input_ids.shape}; stack each example's choices on axis 1, or pack "
                         "them into one row with sequence_ids and cls_positions (batch, "
                         "num_choices)")
    B, C, S = input_ids.shape
    for name, arr in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if arr is not None and arr.shape != input_ids.shape:
            raise InputError(f"{name} must have the shape of input_ids {(B, C, S)}, got {arr.shape}")
    flat = tuple(None if a is None else a.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for a in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)


def packed_choices(input_ids: jax.Array, options: dict[str, Any]) -> bool:
    """Whether multiple-choice inputs are packed rows (B, S), each holding one example's choices
    as its sequences with their [CLS] at `cls_positions` (B, C), rather than choices stacked
    (B, C, S) one per row. Packing arguments with stacked choices are refused."""
    given = [k for k in PACKING_ARGS if options.get(k) is not None]
    if input_ids.ndim == 2 and "cls_positions" in given:
        return True
    if input_ids.ndim == 3 and given:
        raise InputError(f"{', '.join(given)} apply to packed multiple choice, whose input_ids are "
                         f"rows (batch, seq_len), got {input_ids.shape}: pack each example's "
                         "choices into one row, or leave the packing arguments out")
    return False
