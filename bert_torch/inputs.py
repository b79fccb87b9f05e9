"""Input validation for PyTorch: the same checks and messages as `bertjax.inputs`."""

from __future__ import annotations

import torch

from bertjax.config import BertConfig


def check_inputs(
    config: BertConfig,
    input_ids: torch.Tensor,
    token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Same checks and defaults as `bertjax.inputs.check_inputs`."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids must have shape (batch, seq_len), got {tuple(input_ids.shape)}")
    B, S = input_ids.shape
    if S > config.max_position_embeddings:
        raise ValueError(
            f"input_ids has seq_len {S} > max_position_embeddings "
            f"({config.max_position_embeddings}); truncate the input or use a config with more "
            "positions"
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
    _check_range("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")
    return token_type_ids, attention_mask


def check_masked_positions(input_ids: torch.Tensor, masked_positions: torch.Tensor,
                           name: str = "masked_positions") -> None:
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise ValueError(
            f"{name} must have shape (batch={B}, num_predictions), "
            f"got {tuple(masked_positions.shape)}"
        )
    _check_range(name, masked_positions, S, "seq_len")


def _check_range(name: str, t: torch.Tensor, limit: int, limit_name: str) -> None:
    if t.numel() == 0:
        return
    lo, hi = int(t.min()), int(t.max())
    if lo < 0 or hi >= limit:
        bad = t[(t < 0) | (t >= limit)]
        raise ValueError(
            f"{name} has values outside [0, {limit_name}={limit}): e.g. {bad[:5].tolist()} "
            f"(min {lo}, max {hi}); check the tokenizer matches the model config"
        )


def flatten_choices(
    input_ids: torch.Tensor, token_type_ids: torch.Tensor | None,
    attention_mask: torch.Tensor | None,
) -> tuple[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None], tuple[int, int]]:
    """Same checks and reshapes as `bertjax.inputs.flatten_choices`."""
    if input_ids.ndim != 3:
        raise ValueError("multiple choice takes input_ids of shape (batch, num_choices, seq_len), "
                         f"got {tuple(input_ids.shape)}; stack each example's choices on axis 1")
    B, C, S = input_ids.shape
    for name, t in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if t is not None and tuple(t.shape) != (B, C, S):
            raise ValueError(f"{name} must have the shape of input_ids {(B, C, S)}, "
                             f"got {tuple(t.shape)}")
    flat = tuple(None if t is None else t.reshape(B * C, S)  # (B, C, S) -> (B * C, S)
                 for t in (input_ids, token_type_ids, attention_mask))
    return flat, (B, C)
