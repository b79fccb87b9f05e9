"""Packing token-id sequences into rows of a fixed length (numpy only, no framework import).

Each sequence keeps its own [CLS] (its first token), token types and positions from 0; the
model keeps attention inside it (`bertjax.inputs` on packing). Sequences go to rows by best-fit
decreasing: longest first, each into the row it fills most tightly, a new row where none has room.

    packed = pack_sequences([[2, 7, 8, 3], [2, 9, 3]], seq_len=8)
    out = model(packed.input_ids, packed.token_type_ids, packed.attention_mask,
                sequence_ids=packed.sequence_ids, position_ids=packed.position_ids,
                cls_positions=packed.cls_positions)
    per_sequence = unpack_tokens(packed, out.sequence_output)  # input order, each (length, H)
    pooled = out.pooled_output[tuple(packed.placement.T)]  # (N, H), input order

Shapes: R rows, S `seq_len`, K sequences per row at most, N sequences.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class PackedRows:
    """Rows of packed sequences: the model's inputs and where each input sequence went."""

    input_ids: np.ndarray  # (R, S) int32, `pad_id` after the last sequence of a row
    token_type_ids: np.ndarray  # (R, S) int32, 0 on padding
    attention_mask: np.ndarray  # (R, S) int32: 1 on every sequence's tokens
    sequence_ids: np.ndarray  # (R, S) int32: k on the row's k-th sequence (1..K), 0 on padding
    position_ids: np.ndarray  # (R, S) int32: 0, 1, ... within each sequence, 0 on padding
    cls_positions: np.ndarray  # (R, K) int32: where the row's k-th sequence starts; -1: none
    placement: np.ndarray  # (N, 2) int32: (row, slot) of input sequence n; slot k-1 is id k
    lengths: np.ndarray  # (N,) int32: each input sequence's length

    @property
    def starts(self) -> np.ndarray:
        """(N,) where each input sequence starts in its row."""
        return self.cls_positions[self.placement[:, 0], self.placement[:, 1]]


def best_fit_decreasing(lengths: Sequence[int], seq_len: int, max_per_row: int | None = None
                        ) -> list[list[int]]:
    """Rows of sequence indices, each row's lengths summing to at most `seq_len` and holding at
    most `max_per_row` sequences; longest first, each into the fullest row it fits."""
    order = sorted(range(len(lengths)), key=lambda n: -lengths[n])  # stable: ties in input order
    rows: list[list[int]] = []
    open_rows: list[tuple[int, int]] = []  # (room left, row), sorted: the tightest fit first
    for n in order:
        at = bisect.bisect_left(open_rows, (lengths[n], -1))
        if at == len(open_rows):
            rows.append([])
            room, row = seq_len, len(rows) - 1
        else:
            room, row = open_rows.pop(at)
        rows[row].append(n)
        if room - lengths[n] > 0 and (max_per_row is None or len(rows[row]) < max_per_row):
            bisect.insort(open_rows, (room - lengths[n], row))
    return rows


def pack_sequences(
    sequences: Sequence[Sequence[int]],
    token_types: Sequence[Sequence[int]] | None = None,
    *,
    seq_len: int,
    pad_id: int = 0,
    max_per_row: int | None = None,
) -> PackedRows:
    """Pack `sequences` (token ids, each starting with its [CLS]) and their `token_types` (the
    same lengths; None: all 0) into rows of `seq_len` tokens by best-fit decreasing.

    `max_per_row` caps the sequences in a row and sets K, the width of `cls_positions` (a static
    shape for `jit`); None lets K be the most any row got. Raises ValueError for an empty
    sequence or one longer than `seq_len`.
    """
    lengths = np.array([len(s) for s in sequences], np.int32)
    if token_types is not None and [len(t) for t in token_types] != lengths.tolist():
        raise ValueError("token_types must give one type per token of each sequence")
    for name, bad in (("empty", lengths == 0), (f"longer than seq_len={seq_len}", lengths > seq_len)):
        if bad.any():
            raise ValueError(f"sequences {np.flatnonzero(bad)[:5].tolist()} are {name}: "
                             "cut or drop them before packing")
    if max_per_row is not None and max_per_row < 1:
        raise ValueError(f"max_per_row must be at least 1, got {max_per_row}")
    rows = best_fit_decreasing(lengths.tolist(), seq_len, max_per_row)
    K = max_per_row or max((len(r) for r in rows), default=1)
    R, N = len(rows), len(sequences)
    arrays = {name: np.zeros((R, seq_len), np.int32) for name in (
        "input_ids", "token_type_ids", "attention_mask", "sequence_ids", "position_ids")}
    arrays["input_ids"][:] = pad_id
    cls_positions = np.full((R, K), -1, np.int32)
    placement = np.zeros((N, 2), np.int32)
    for r, members in enumerate(rows):
        start = 0
        for slot, n in enumerate(members):
            span = slice(start, start + lengths[n])
            arrays["input_ids"][r, span] = sequences[n]
            arrays["token_type_ids"][r, span] = 0 if token_types is None else token_types[n]
            arrays["attention_mask"][r, span] = 1
            arrays["sequence_ids"][r, span] = slot + 1
            arrays["position_ids"][r, span] = np.arange(lengths[n])
            cls_positions[r, slot] = start
            placement[n] = (r, slot)
            start += lengths[n]
    return PackedRows(**arrays, cls_positions=cls_positions, placement=placement, lengths=lengths)


def unpack_tokens(packed: PackedRows, values: np.ndarray) -> list[np.ndarray]:
    """Per-token outputs (R, S, ...) (sequence output, token or start/end logits) split back
    into the input sequences, in input order: each (length, ...)."""
    values = np.asarray(values)
    return [values[r, start:start + length] for (r, _), start, length
            in zip(packed.placement, packed.starts, packed.lengths, strict=True)]
