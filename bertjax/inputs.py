"""Input validation: shapes always, values where the arrays are concrete (outside `jit`); and
the attention mask and positions of packed rows (`packed_attention`).

The checks and their messages are `bertjax.config.checks`, shared with `bert_torch.inputs`: each
raises an `InputError` that names the input, what was found and the fix.

Packing: a row may hold several sequences, each with its own [CLS], token types and positions
from 0. `sequence_ids` (B, S) says which (1..K; 0 is padding); attention then stays inside each
sequence, positions restart per sequence unless `position_ids` (B, S) are given, and the heads
that read [CLS] read it at `cls_positions` (B, K) (-1: a row with fewer than K sequences).
`bertjax.data.packing` packs token-id sequences into such rows.
"""

from __future__ import annotations

from typing import Any, overload

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.config import BertConfig
from bertjax.config import checks as shared
from bertjax.config.checks import PACKING_ARGS, Seen
from bertjax.numerics import cudnn_attention_applies


def packing_options(batch: Any) -> dict[str, Any]:
    """The model's packing keywords from a batch (a dict of arrays): those of `PACKING_ARGS` it
    holds, none for rows of one sequence each."""
    return {k: batch[k] for k in PACKING_ARGS if k in batch}


@overload
def seen(x: None) -> None: ...
@overload
def seen(x: jax.Array | np.ndarray) -> Seen: ...
def seen(x: jax.Array | np.ndarray | None) -> Seen | None:
    """What the shared checks (`bertjax.config.checks`) read of an array: its values only where
    it is concrete (not traced under `jit`)."""
    if x is None:
        return None
    concrete = not isinstance(x, jax.core.Tracer)
    return Seen(tuple(x.shape), bool(jnp.issubdtype(x.dtype, jnp.integer)), str(x.dtype),
                (lambda: np.asarray(x)) if concrete else None)


def check_inputs(
    config: BertConfig,
    input_ids: jax.Array,
    token_type_ids: jax.Array | None,
    attention_mask: jax.Array | None,
    *,
    packed: bool = False,
) -> tuple[jax.Array, jax.Array]:
    """Validate a batch (`bertjax.config.checks.check_inputs`); fill in default token types
    (zeros) and mask (ones). `packed` rows (`sequence_ids` given) need not be right padding:
    their mask is not read as lengths. Inside `jit` values go unchecked (out-of-range ids would
    silently clamp): call `check_batch` on the host first."""
    _check_inputs(config, input_ids, token_type_ids, attention_mask, packed)
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = jnp.ones_like(input_ids)
    return token_type_ids, attention_mask


def _check_inputs(config: BertConfig, input_ids: jax.Array | np.ndarray,
                  token_type_ids: jax.Array | np.ndarray | None,
                  attention_mask: jax.Array | np.ndarray | None, packed: bool) -> None:
    shared.check_inputs(config, seen(input_ids), seen(token_type_ids), seen(attention_mask),
                        packed=packed, right_padding=not packed and may_fuse_attention(config))


def may_fuse_attention(config: BertConfig) -> bool:
    """Whether attention may take the fused path here (then masks must be right padding)."""
    auto = config.attn_implementation == "auto"
    return config.attn_implementation == "fused" or (
        auto and cudnn_attention_applies(jnp.dtype(config.dtype), config.head_dim))


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
    input_ids: jax.Array | np.ndarray,
    sequence_ids: jax.Array | np.ndarray | None,
    position_ids: jax.Array | np.ndarray | None,
    cls_positions: jax.Array | np.ndarray | None,
) -> None:
    """`bertjax.config.checks.check_packing` of JAX arrays."""
    shared.check_packing(config, seen(input_ids), seen(sequence_ids), seen(position_ids),
                         seen(cls_positions))


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


def check_masked_positions(input_ids: jax.Array | np.ndarray,
                           masked_positions: jax.Array | np.ndarray,
                           name: str = "masked_positions") -> None:
    """Positions (B, P) into input_ids (B, S): the shape always, the range where concrete."""
    shared.check_masked_positions(seen(input_ids), seen(masked_positions), name)


def check_batch(config: BertConfig, batch: dict[str, np.ndarray]) -> None:
    """Host-side check of a batch before it enters a jitted step."""
    ids = batch["input_ids"]
    packed = batch.get("sequence_ids") is not None
    _check_inputs(config, ids, batch.get("token_type_ids"), batch.get("attention_mask"), packed)
    shared.check_packing(config, seen(ids), *(seen(batch.get(k)) for k in PACKING_ARGS))
    if "masked_positions" in batch:
        check_masked_positions(ids, batch["masked_positions"])


def flatten_choices(
    input_ids: jax.Array, token_type_ids: jax.Array | None, attention_mask: jax.Array | None,
) -> tuple[tuple[jax.Array, jax.Array | None, jax.Array | None], tuple[int, int]]:
    """Multiple-choice inputs (B, C, S) -> ((B * C, S) each, (B, C)); a missing token-type or
    mask array stays None (the encoder fills it in)."""
    B, C, S = shared.check_choices(seen(input_ids), seen(token_type_ids), seen(attention_mask))
    flat = tuple(None if a is None else a.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for a in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)  # type: ignore[return-value]


def packed_choices(input_ids: jax.Array, options: dict[str, Any]) -> bool:
    """Whether multiple-choice inputs are packed rows (`bertjax.config.checks.packed_choices`)."""
    given = [k for k in PACKING_ARGS if options.get(k) is not None]
    return shared.packed_choices(seen(input_ids), given)
