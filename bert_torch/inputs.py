"""Input validation for PyTorch: the same checks and messages as `bertjax.inputs`, and the same
attention mask and positions of packed rows (`packed_attention`)."""

from __future__ import annotations

from typing import Any

import torch

from bertjax.config import BertConfig

# The packing arguments every model class takes (keyword-only), as `bertjax.inputs.PACKING_ARGS`.
PACKING_ARGS = ("sequence_ids", "position_ids", "cls_positions")


def check_inputs(
    config: BertConfig,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same checks and defaults as `bertjax.inputs.check_inputs` (whose right-padding check is
    for the fused attention this mirror does not have)."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
    B, S = input_ids.shape
    if S > config.max_sequence_length:
        raise ValueError(
            f"input_ids has seq_len {S} > {config.positions_limit}; truncate the input or use a "
            "config with more positions"
        )
    if input_ids.dtype.is_floating_point or input_ids.dtype.is_complex or input_ids.dtype == torch.bool:
        dtype = str(input_ids.dtype).removeprefix("torch.")
        raise ValueError(f"input_ids must be integers, got dtype {dtype}")
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if tuple(t.shape) != (B, S):
            raise ValueError(f"{name} must have the shape of input_ids {(B, S)}, got {tuple(t.shape)}")
    _check_range("input_ids", input_ids, config.vocab_size, "vocab_size")
    if config.family.token_types:  # DistilBERT's are not read
        _check_range("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")
    return token_type_ids, attention_mask


def packing_inputs(
    config: BertConfig,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    sequence_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    cls_positions: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Same checks and results as `bertjax.inputs.packing_inputs`: the mask the layers take,
    (B, S) or (B, S, S), and the position ids (None: 0..S-1)."""
    check_packing(config, input_ids, sequence_ids, position_ids, cls_positions)
    if sequence_ids is None:
        if position_ids is None:
            return attention_mask, (offset_positions(input_ids, config.pad_token_id)
                                    if config.family.offset_positions else None)
        offset = config.position_offset
        return attention_mask, position_ids + offset if offset else position_ids
    mask, positions = packed_attention(sequence_ids, attention_mask)
    positions = positions if position_ids is None else position_ids
    if config.family.offset_positions:  # each sequence's from pad + 1, padding at pad
        positions = torch.where(sequence_ids != 0, positions + config.position_offset,
                                config.pad_token_id)
    return mask, positions


def offset_positions(input_ids: torch.Tensor, pad_token_id: int) -> torch.Tensor:
    """RoBERTa's positions (B, S), as `bertjax.inputs.offset_positions`."""
    real = (input_ids != pad_token_id).long()  # (B, S)
    return torch.cumsum(real, dim=1) * real + pad_token_id


def check_packing(
    config: BertConfig,
    input_ids: torch.Tensor,
    sequence_ids: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    cls_positions: torch.Tensor | None,
) -> None:
    """Same checks as `bertjax.inputs.check_packing`."""
    B, S = input_ids.shape
    for name, t in (("sequence_ids", sequence_ids), ("position_ids", position_ids)):
        if t is None:
            continue
        if tuple(t.shape) != (B, S):
            raise ValueError(f"{name} must have the shape of input_ids {(B, S)}, got {tuple(t.shape)}")
        if t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool:
            raise ValueError(f"{name} must be integers, got dtype {str(t.dtype).removeprefix('torch.')}")
    if sequence_ids is not None and sequence_ids.numel() and int(sequence_ids.min()) < 0:
        raise ValueError("sequence_ids must be 0 (padding) or a packed sequence's number (1, 2, "
                         f"...), got {int(sequence_ids.min())}")
    if position_ids is not None:
        _check_range("position_ids", position_ids, config.max_sequence_length,
                     "max_position_embeddings" if not config.position_offset
                     else f"max_position_embeddings less {config.position_offset} rows")
    if cls_positions is None:
        return
    if cls_positions.ndim != 2 or cls_positions.shape[0] != B:
        raise ValueError(f"cls_positions must have shape (batch={B}, sequences per row), "
                         f"got {tuple(cls_positions.shape)}")
    _check_range("cls_positions", cls_positions, S, "seq_len", low=-1)
    if sequence_ids is not None:
        on = torch.gather(sequence_ids, 1, cls_positions.long().clamp(min=0))  # (B, K)
        rows = torch.nonzero(((cls_positions >= 0) & (on == 0)).any(dim=1)).flatten()
        if rows.numel():
            raise ValueError(f"cls_positions of rows {rows[:5].tolist()} point at padding "
                             "(sequence id 0): mark an empty slot -1")


def packed_attention(sequence_ids: torch.Tensor, attention_mask: torch.Tensor
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The attention mask (B, S, S) and positions (B, S) of packed rows, as
    `bertjax.inputs.packed_attention`: block-diagonal by sequence id, padding keys masked; a
    token's position is how many tokens of its sequence come before it (padding's 0)."""
    same = sequence_ids[:, :, None] == sequence_ids[:, None, :]  # (B, S, S) query x key
    keys = (sequence_ids != 0) & (attention_mask != 0)  # (B, S)
    before = torch.tril(same, -1).sum(-1)  # (B, S) earlier, same sequence
    return same & keys[:, None, :], torch.where(sequence_ids != 0, before, 0)


def check_masked_positions(input_ids: torch.Tensor, masked_positions: torch.Tensor,
                           name: str = "masked_positions") -> None:
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise ValueError(
            f"{name} must have shape (batch={B}, num_predictions), "
            f"got {tuple(masked_positions.shape)}"
        )
    _check_range(name, masked_positions, S, "seq_len")


def _check_range(name: str, t: torch.Tensor, limit: int, limit_name: str, low: int = 0) -> None:
    if t.numel() == 0:
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < low or hi >= limit:
        bad = t[(t < low) | (t >= limit)]
        raise ValueError(
            f"{name} has values outside [{low}, {limit_name}={limit}): e.g. {bad[:5].tolist()} "
            f"(min {lo}, max {hi}); check the tokenizer matches the model config"
        )


def flatten_choices(
    input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None], tuple[int, int]]:
    """Same checks and reshapes as `bertjax.inputs.flatten_choices`."""
    if input_ids.ndim != 3:
        raise ValueError("multiple choice takes input_ids of shape (batch, num_choices, seq_len), "
                         f"got {tuple(input_ids.shape)}; stack each example's choices on axis 1, or "
                         "pack them into one row with sequence_ids and cls_positions (batch, "
                         "num_choices)")
    B, C, S = input_ids.shape
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None and tuple(t.shape) != (B, C, S):
            raise ValueError(f"{name} must have the shape of input_ids {(B, C, S)}, "
                             f"got {tuple(t.shape)}")
    flat = tuple(None if t is None else t.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for t in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)


def packed_choices(input_ids: torch.Tensor, options: dict[str, Any]) -> bool:
    """Same decision and message as `bertjax.inputs.packed_choices`."""
    given = [k for k in PACKING_ARGS if options.get(k) is not None]
    if input_ids.ndim == 2 and "cls_positions" in given:
        return True
    if input_ids.ndim == 3 and given:
        raise ValueError(f"{', '.join(given)} apply to packed multiple choice, whose input_ids are "
                         f"rows (batch, seq_len), got {tuple(input_ids.shape)}: pack each example's "
                         "choices into one row, or leave the packing arguments out")
    return False
