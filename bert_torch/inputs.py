"""Input validation for PyTorch: the checks and messages of `bertjax.config.checks` (shared with
`bertjax.inputs`), and the same attention mask and positions of packed rows
(`packed_attention`)."""

from __future__ import annotations

from typing import Any, overload

import torch

from bertjax.config import BertConfig
from bertjax.config import checks as shared
from bertjax.config.checks import PACKING_ARGS, Seen


@overload
def seen(t: None) -> None: ...
@overload
def seen(t: torch.Tensor) -> Seen: ...
def seen(t: torch.Tensor | None) -> Seen | None:
    """What the shared checks read of a tensor (its values on the host when they ask)."""
    if t is None:
        return None
    integer = not (t.dtype.is_floating_point or t.dtype.is_complex or t.dtype == torch.bool)
    return Seen(tuple(t.shape), integer, str(t.dtype).removeprefix("torch."),
                lambda: t.detach().cpu().numpy())


def check_inputs(
    config: BertConfig,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
    *,
    packed: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """`bertjax.config.checks.check_inputs` (no right-padding check: this mirror has no fused
    attention); default token types (zeros) and mask (ones) filled in."""
    shared.check_inputs(config, seen(input_ids), seen(token_type_ids), seen(attention_mask),
                        packed=packed)
    if token_type_ids is None:
        token_type_ids = torch.zeros_like(input_ids)
    if attention_mask is None:
        attention_mask = torch.ones_like(input_ids)
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
    """`bertjax.config.checks.check_packing` of tensors."""
    shared.check_packing(config, seen(input_ids), seen(sequence_ids), seen(position_ids),
                         seen(cls_positions))


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
    shared.check_masked_positions(seen(input_ids), seen(masked_positions), name)


def flatten_choices(
    input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None], tuple[int, int]]:
    """Multiple-choice inputs (B, C, S) -> ((B * C, S) each, (B, C)), as
    `bertjax.inputs.flatten_choices`."""
    B, C, S = shared.check_choices(seen(input_ids), seen(token_type_ids), seen(attention_mask))
    flat = tuple(None if t is None else t.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for t in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)  # type: ignore[return-value]


def packed_choices(input_ids: torch.Tensor, options: dict[str, Any]) -> bool:
    """`bertjax.config.checks.packed_choices` of tensors."""
    given = [k for k in PACKING_ARGS if options.get(k) is not None]
    return shared.packed_choices(seen(input_ids), given)
