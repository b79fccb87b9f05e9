"""Token-budget batches: sequences packed into rows of a fixed length, a fixed number of rows per
batch, for inference and fine-tuning (`max_tokens=`, `--max-tokens`).

A batch is `max_tokens // row_len` rows of `row_len` tokens. The row length is the longest
sequence's, rounded up to `encode.PAD_MULTIPLE`, and at least `ROW_FLOOR` where the model has the
positions (a short row holds few sequences, so more of it stays empty); never more than the
model's positions. Every batch of a call has the same shape, including the last (completed
with empty rows) and its K, the most sequences any row holds: one compiled program, where sorted
padded batches compile one per length. Attention stays inside each sequence (`bertjax.inputs`),
so each sequence's outputs are those it has alone, up to float32 rounding (the tests hold them
within 1e-5).

Sequences go to rows by best-fit decreasing over the whole input (`bertjax.data.packing`), so a
batch's rows are nearly full: the work is the real tokens (and attention over each row), not the
padding of sorted batches rounded up to a multiple of 16.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from bertjax.data.packing import RowLayout, pack_layout
from bertjax.inputs import packing_options, sequence_mask
from bertjax.use.encode import PAD_MULTIPLE

__all__ = ["MAX_TOKENS", "ROW_FLOOR", "Budget", "PackedBatch", "pack_arrays", "packed_batches",
           "packed_layouts", "packing_options", "sequence_mask",
           "token_budget"]

ROW_FLOOR = 128  # shortest packed row where the model has the positions (see the docstring)


@dataclasses.dataclass(frozen=True)
class Budget:
    """Rows of `row_len` tokens, `rows` of them per batch."""

    row_len: int
    rows: int


MAX_TOKENS = "max_tokens (--max-tokens)"  # how errors name the budget, for Python and the CLI


def token_budget(max_tokens: int, longest: int, limit: int, option: str = MAX_TOKENS
                 ) -> Budget:
    """The row length for sequences up to `longest` tokens under a model of `limit` positions,
    and how many rows `max_tokens` holds; a ValueError naming `option` if it holds none."""
    if max_tokens < 1:
        raise ValueError(f"{option} must be at least 1, got {max_tokens}")
    if longest > limit:
        raise ValueError(f"a sequence of {longest} tokens is longer than the model's {limit} "
                         "positions: cut it first")
    row_len = min(limit, max(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, min(ROW_FLOOR, limit)))
    if max_tokens < row_len:
        raise ValueError(f"{option} {max_tokens} holds no packed row of {row_len} tokens (the "
                         f"longest input, {longest} tokens, rounded up to {PAD_MULTIPLE}, at "
                         f"least {min(ROW_FLOOR, limit)}): pass {option} {row_len} or more")
    return Budget(row_len, max_tokens // row_len)


@dataclasses.dataclass(frozen=True)
class PackedBatch:
    """One batch of packed rows: which input sequences it holds (`members`, in the layout's
    order), where they sit, and the arrays the model (and a loss) take."""

    members: np.ndarray  # (n,) indices into the input sequences
    layout: RowLayout  # member i is input sequence members[i]
    arrays: dict[str, np.ndarray]


def pack_arrays(arrays: Mapping[str, np.ndarray], layout: RowLayout, *, pad_id: int,
                per_token: Sequence[str] = (), per_sequence: Sequence[str] = (),
                fills: Mapping[str, int | float] | None = None) -> dict[str, np.ndarray]:
    """Right-padded arrays of the layout's sequences (N, W) moved into its rows: the model's
    inputs (with the packing arrays), the `per_token` arrays (N, W, ...) as rows (R, S, ...) and
    the `per_sequence` ones (N, ...) as slots (R, K, ...), `fills[key]` (default 0) elsewhere."""
    fills = fills or {}
    out = layout.inputs()  # attention_mask, sequence_ids, position_ids, cls_positions
    out["input_ids"] = layout.tokens(arrays["input_ids"], pad_id)
    out["token_type_ids"] = layout.tokens(arrays["token_type_ids"])
    for key in per_token:
        out[key] = layout.tokens(arrays[key], fills.get(key, 0))
    for key in per_sequence:
        out[key] = layout.per_sequence(arrays[key], fills.get(key, 0))
    return out


def packed_layouts(lengths: np.ndarray, *, max_tokens: int, limit: int,
                   option: str = MAX_TOKENS) -> list[tuple[np.ndarray, RowLayout]]:
    """Sequences of `lengths` packed by best-fit decreasing into batches of `token_budget` rows:
    (the sequences of each batch, their layout in its rows)."""
    lengths = np.asarray(lengths)
    if not len(lengths):
        return []
    budget = token_budget(max_tokens, int(lengths.max()), limit, option)
    return pack_layout(lengths, budget.row_len).batches(budget.rows)


def packed_batches(arrays: Mapping[str, np.ndarray], *, max_tokens: int, limit: int,
                   pad_id: int, option: str = MAX_TOKENS, per_token: Sequence[str] = (),
                   per_sequence: Sequence[str] = (),
                   fills: Mapping[str, int | float] | None = None) -> list[PackedBatch]:
    """Right-padded sequences (`arrays`, each (N, W, ...) or (N, ...), their lengths from
    `attention_mask`) packed into batches (`packed_layouts`), their arrays moved into the rows
    (`pack_arrays`)."""
    lengths = np.asarray(arrays["attention_mask"]).sum(1)
    return [PackedBatch(members, sub, pack_arrays({k: np.asarray(v)[members] for k, v in
                                                   arrays.items()}, sub, pad_id=pad_id,
                                                  per_token=per_token,
                                                  per_sequence=per_sequence, fills=fills))
            for members, sub in packed_layouts(lengths, max_tokens=max_tokens, limit=limit,
                                               option=option)]
