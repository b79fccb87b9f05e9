"""The checks both trees make, and their messages, in one place: a class against the family of
its config, and a model's inputs (shapes always; values where the arrays are concrete).

`bertjax.inputs` (JAX) and `bert_torch.inputs` (PyTorch) describe each array as a `Seen` (its
shape, whether it holds integers, and how to read its values as NumPy where they are concrete:
outside `jit`, always in PyTorch) and call these; what they compute from the inputs (masks,
positions, reshapes) stays in each tree. Every error is an `InputError` naming the input, what
was found and the fix. NumPy only.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Sequence

import numpy as np

from bertjax.config import BertConfig
from bertjax.config.heads import ModelClass
from bertjax.errors import InputError

# The packing arguments every model class takes (keyword-only), in this order.
PACKING_ARGS = ("sequence_ids", "position_ids", "cls_positions")


@dataclasses.dataclass
class Seen:
    """What the checks need of an array: its shape, whether its dtype is an integer one (`dtype`
    its name for messages) and `read`, which gives its values as NumPy (None: not concrete, e.g.
    traced under `jit`; values are then left unchecked)."""

    shape: tuple[int, ...]
    integer: bool
    dtype: str
    read: Callable[[], np.ndarray] | None = None

    @functools.cached_property
    def values(self) -> np.ndarray | None:
        return None if self.read is None else self.read()

    @property
    def ndim(self) -> int:
        return len(self.shape)


def check_family(model: ModelClass, config: BertConfig) -> None:
    """Refuse a class whose head the family was never trained with (a next-sentence head of a
    RoBERTa), or a class of other families only, in one line naming what the family has."""
    if model.next_sentence and not config.family.next_sentence:
        raise InputError(
            f"{config.model_type} has no next-sentence head ({model.name} needs one): its "
            "models are masked LMs; use BertForMaskedLM, or the fill-mask, embed and finetune "
            "commands")
    if model.families and config.model_type not in model.families:
        raise InputError(f"{model.name} is a head of {', '.join(model.families)} models only, "
                         f"not of a {config.model_type}: build it from a config with "
                         f"model_type={model.families[0]!r}")


# The bare encoder class of each `Family.encoder`: what the heads' classes hold as `bert`.
ENCODER_CLASSES = {"bert": "BertModel", "modernbert": "ModernBertModel"}


def check_encoder(config: BertConfig, class_name: str) -> None:
    """Refuse to build encoder `class_name` from the config of a family whose encoder is
    another (a ModernBERT's is ModernBertModel), in one line naming the right one."""
    right = ENCODER_CLASSES[config.family.encoder]
    if right != class_name:
        raise InputError(f"{class_name} is not a {config.model_type}'s encoder: build "
                         f"{right} (the BertFor* classes pick the encoder of their config's "
                         "family themselves)")


def check_inputs(config: BertConfig, input_ids: Seen, token_type_ids: Seen | None,
                 attention_mask: Seen | None, *, packed: bool = False,
                 right_padding: bool = False) -> None:
    """A batch (B, S): shapes and dtypes always; ids inside the vocabulary and token types
    inside `type_vocab_size` where concrete (out-of-range ids would silently clamp under `jit`);
    with `right_padding` (fused attention reads the mask as lengths) the mask's rows ones, then
    zeros. `packed` rows (several sequences each) may be longer than the positions: each of
    their sequences is checked against them (`check_packing`)."""
    if input_ids.ndim != 2:
        raise InputError(f"input_ids must have shape (batch, seq_len), got {input_ids.shape}")
    B, S = input_ids.shape
    if S > config.max_sequence_length and not packed:
        raise InputError(f"input_ids has seq_len {S} > {config.positions_limit}; truncate the "
                         "input or use a config with more positions")
    if not input_ids.integer:
        raise InputError(f"input_ids must be integers, got dtype {input_ids.dtype}")
    for name, seen in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if seen is not None and seen.shape != (B, S):
            raise InputError(f"{name} must have the shape of input_ids {(B, S)}, got {seen.shape}")
    if right_padding and attention_mask is not None and attention_mask.values is not None:
        _check_right_padding(attention_mask.values)
    check_range("input_ids", input_ids, config.vocab_size, "vocab_size")
    if token_type_ids is not None and config.family.token_types:  # DistilBERT: unread
        check_range("token_type_ids", token_type_ids, config.type_vocab_size, "type_vocab_size")


def _check_right_padding(attention_mask: np.ndarray) -> None:
    mask = attention_mask != 0
    lengths = mask.sum(axis=1)
    bad = np.flatnonzero((mask != (np.arange(mask.shape[1])[None, :] < lengths[:, None])).any(1))
    if bad.size:
        raise InputError(
            f"attention_mask rows {bad[:5].tolist()} are not right padding (ones, then zeros), "
            "which fused attention reads as sequence lengths: pad at the end, or use "
            "attn_implementation='exact'")


def check_pooler_inputs(pooled: bool, sequence_ids: object, cls_positions: object) -> None:
    """Packed rows through an encoder with the pooler need each sequence's [CLS] position."""
    if pooled and sequence_ids is not None and cls_positions is None:
        raise InputError("packed rows (sequence_ids) need cls_positions for the pooler: where "
                         "each sequence's [CLS] is, -1 for an empty slot")


def check_packing(config: BertConfig, input_ids: Seen, sequence_ids: Seen | None,
                  position_ids: Seen | None, cls_positions: Seen | None) -> None:
    """The packing inputs: shapes and dtypes always; values where concrete (ids >= 0, positions
    inside the table, each packed sequence no longer than the positions, [CLS] positions on
    tokens or -1)."""
    B, S = input_ids.shape
    for name, seen in (("sequence_ids", sequence_ids), ("position_ids", position_ids)):
        if seen is None:
            continue
        if seen.shape != (B, S):
            raise InputError(f"{name} must have the shape of input_ids {(B, S)}, got {seen.shape}")
        if not seen.integer:
            raise InputError(f"{name} must be integers, got dtype {seen.dtype}")
    ids = None if sequence_ids is None else sequence_ids.values
    if ids is not None and ids.size and int(ids.min()) < 0:
        raise InputError("sequence_ids must be 0 (padding) or a packed sequence's number (1, 2, "
                         f"...), got {int(ids.min())}")
    if position_ids is not None:
        check_range("position_ids", position_ids, config.max_sequence_length,
                    "max_position_embeddings" if not config.position_offset
                    else f"max_position_embeddings less {config.position_offset} rows")
    elif ids is not None and S > config.max_sequence_length:  # each sequence must fit
        rows = np.repeat(np.arange(B), S).reshape(B, S)  # (B, S): each token's row
        _, counts = np.unique(np.stack([rows[ids > 0], ids[ids > 0]]), axis=1, return_counts=True)
        if counts.size and counts.max() > config.max_sequence_length:
            raise InputError(f"a packed sequence of {counts.max()} tokens is longer than "
                             f"{config.positions_limit}; truncate it")
    if cls_positions is not None:
        _check_cls_positions(cls_positions, B, S, ids)


def _check_cls_positions(cls_positions: Seen, B: int, S: int,  # noqa: N803
                         ids: np.ndarray | None) -> None:
    """(B, K) positions in [0, S), or -1 for an empty slot; each on a token of some sequence."""
    if cls_positions.ndim != 2 or cls_positions.shape[0] != B:
        raise InputError(f"cls_positions must have shape (batch={B}, sequences per row), "
                         f"got {cls_positions.shape}")
    check_range("cls_positions", cls_positions, S, "seq_len", low=-1)
    cls = cls_positions.values
    if cls is not None and ids is not None:
        on = np.take_along_axis(ids, np.maximum(cls, 0), axis=1)  # (B, K)
        rows = np.flatnonzero(((cls >= 0) & (on == 0)).any(axis=1))
        if rows.size:
            raise InputError(f"cls_positions of rows {rows[:5].tolist()} point at padding "
                             "(sequence id 0): mark an empty slot -1")


def check_masked_positions(input_ids: Seen, masked_positions: Seen,
                           name: str = "masked_positions") -> None:
    """Positions (B, P) into input_ids (B, S): the shape always, the range where concrete."""
    B, S = input_ids.shape
    if masked_positions.ndim != 2 or masked_positions.shape[0] != B:
        raise InputError(f"{name} must have shape (batch={B}, num_predictions), "
                         f"got {masked_positions.shape}")
    check_range(name, masked_positions, S, "seq_len")


def check_range(name: str, seen: Seen, limit: int, limit_name: str, low: int = 0) -> None:
    """Every value of `seen` (where concrete) in [low, limit)."""
    values = seen.values
    if values is None or values.size == 0:
        return
    lo, hi = int(values.min()), int(values.max())
    if lo < low or hi >= limit:
        bad = values[(values < low) | (values >= limit)]
        raise InputError(
            f"{name} has values outside [{low}, {limit_name}={limit}): e.g. {bad[:5].tolist()} "
            f"(min {lo}, max {hi}); check the tokenizer matches the model config")


def check_choices(input_ids: Seen, token_type_ids: Seen | None,
                  attention_mask: Seen | None) -> tuple[int, int, int]:
    """Multiple-choice inputs stacked (B, C, S): their (B, C, S)."""
    if input_ids.ndim != 3:
        raise InputError("multiple choice takes input_ids of shape (batch, num_choices, seq_len), "
                         f"got {input_ids.shape}; stack each example's choices on axis 1, or pack "
                         "them into one row with sequence_ids and cls_positions (batch, "
                         "num_choices)")
    B, C, S = input_ids.shape
    for name, seen in (("token_type_ids", token_type_ids), ("attention_mask", attention_mask)):
        if seen is not None and seen.shape != (B, C, S):
            raise InputError(f"{name} must have the shape of input_ids {(B, C, S)}, got "
                             f"{seen.shape}")
    return B, C, S


def packed_choices(input_ids: Seen, given: Sequence[str]) -> bool:
    """Whether multiple-choice inputs are packed rows (B, S), each holding one example's choices
    as its sequences with their [CLS] at `cls_positions` (B, C), rather than choices stacked
    (B, C, S) one per row; `given`: the packing arguments passed. Packing arguments with stacked
    choices are refused."""
    if input_ids.ndim == 2 and "cls_positions" in given:
        return True
    if input_ids.ndim == 3 and given:
        raise InputError(f"{', '.join(given)} apply to packed multiple choice, whose input_ids are "
                         f"rows (batch, seq_len), got {input_ids.shape}: pack each example's "
                         "choices into one row, or leave the packing arguments out")
    return False
