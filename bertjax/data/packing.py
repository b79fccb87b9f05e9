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

`RowLayout` is the placement alone (which row, slot and offset each sequence has): it moves any
per-token array (N, W) of right-padded sequences into rows (R, S) and any per-sequence array
(N, ...) into slots (R, K, ...), and cuts rows into batches of a fixed number of rows, so a jitted
model sees one shape. Pre-training, fine-tuning and inference all pack through it.

Shapes: R rows, S `seq_len`, K sequences per row at most, N sequences.
"""

from __future__ import annotations

import bisect
import dataclasses
from collections.abc import Sequence

import numpy as np

from bertjax.errors import InputError


def best_fit_decreasing(lengths: Sequence[int], seq_len: int, max_per_row: int | None = None,
                        costs: Sequence[int] | None = None, cost_limit: int | None = None
                        ) -> list[list[int]]:
    """Rows of sequence indices, each row's lengths summing to at most `seq_len` and holding at
    most `max_per_row` sequences (and, with `costs`, costs summing to at most `cost_limit`:
    pre-training's masked predictions); longest first, each into the fullest row it fits."""
    order = sorted(range(len(lengths)), key=lambda n: -lengths[n])  # stable: ties in input order
    rows: list[list[int]] = []
    spare: list[int] = []  # each row's cost left
    open_rows: list[tuple[int, int]] = []  # (room left, row), sorted: the tightest fit first
    for n in order:
        at = bisect.bisect_left(open_rows, (lengths[n], -1))
        if costs is not None:  # the tightest row with room for the cost too
            while at < len(open_rows) and spare[open_rows[at][1]] < costs[n]:
                at += 1
        if at == len(open_rows):
            rows.append([])
            spare.append(cost_limit if cost_limit is not None else 0)
            room, row = seq_len, len(rows) - 1
        else:
            room, row = open_rows.pop(at)
        rows[row].append(n)
        if costs is not None:
            spare[row] -= costs[n]
        full = max_per_row is not None and len(rows[row]) >= max_per_row
        if room - lengths[n] > 0 and not full and (costs is None or spare[row] > 0):
            bisect.insort(open_rows, (room - lengths[n], row))
    return rows


Lengths = Sequence[int] | np.ndarray  # (N,) sequence lengths, any integer sequence

@dataclasses.dataclass(frozen=True)
class RowLayout:
    """Where each of N sequences sits: row, slot (its sequence id - 1) and first position, in R
    rows of `seq_len` tokens holding at most `max_per_row` (K) sequences each."""

    row: np.ndarray  # (N,) int64
    slot: np.ndarray  # (N,) int64
    start: np.ndarray  # (N,) int64
    length: np.ndarray  # (N,) int64
    num_rows: int
    seq_len: int
    max_per_row: int

    @classmethod
    def of(cls, rows: Sequence[Sequence[int]], lengths: Lengths, seq_len: int,
           max_per_row: int | None = None) -> RowLayout:
        """The layout of `rows` (each a list of sequence indices, in slot order) of sequences
        `lengths` long; K is `max_per_row`, or the most any row holds."""
        members = np.array([n for r in rows for n in r], np.int64)
        length = np.asarray(lengths, np.int64)
        packed = cls.contiguous([len(r) for r in rows], length[members], seq_len, max_per_row)
        row, slot, start = (np.zeros(len(length), np.int64) for _ in range(3))
        row[members], slot[members], start[members] = packed.row, packed.slot, packed.start
        return dataclasses.replace(packed, row=row, slot=slot, start=start, length=length)

    @classmethod
    def contiguous(cls, row_counts: Lengths, sequence_lengths: Lengths, seq_len: int,
                   max_per_row: int | None = None) -> RowLayout:
        """The layout of sequences taken in order, `row_counts[r]` of them into row r."""
        counts, lengths = np.asarray(row_counts, np.int64), np.asarray(sequence_lengths, np.int64)
        row = np.repeat(np.arange(len(counts)), counts)  # (N,)
        first = np.cumsum(counts) - counts  # (R,) each row's first sequence
        slot = np.arange(len(row)) - first[row]
        ends = np.cumsum(lengths)
        start = ends - lengths - (ends - lengths)[first[row]]  # tokens before it in its row
        most = int(counts.max(initial=1))
        K = max_per_row or most
        if most > K:
            raise ValueError(f"a row holds {most} sequences, more than max_per_row={K}")
        if len(row) and int((start + lengths).max()) > seq_len:
            raise ValueError(f"a row holds more than seq_len={seq_len} tokens")
        return cls(row, slot, start, lengths, len(counts), seq_len, K)

    @property
    def count(self) -> int:
        return len(self.length)

    def _spans(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(member, offset in the member, flat position in (R, S)) of every sequence token."""
        member = np.repeat(np.arange(self.count), self.length)  # (T,)
        offset = np.arange(len(member)) - np.repeat(np.cumsum(self.length) - self.length,
                                                    self.length)
        return member, offset, self.row[member] * self.seq_len + self.start[member] + offset

    def tokens(self, values: np.ndarray, fill: int | float = 0) -> np.ndarray:
        """(R, S, ...) rows from per-sequence arrays `values` (N, W, ...), sequence n's first
        `length[n]` entries placed at its offset; `fill` elsewhere."""
        values = np.asarray(values)
        member, offset, flat = self._spans()
        out = np.full((self.num_rows * self.seq_len, *values.shape[2:]), fill, values.dtype)
        out[flat] = values[member, offset]
        return out.reshape(self.num_rows, self.seq_len, *values.shape[2:])

    def per_sequence(self, values: np.ndarray, fill: int | float = 0) -> np.ndarray:
        """(R, K, ...) slots from per-sequence values (N, ...); `fill` in empty slots."""
        values = np.asarray(values)
        out = np.full((self.num_rows, self.max_per_row, *values.shape[1:]), fill, values.dtype)
        out[self.row, self.slot] = values
        return out

    def from_slots(self, values: np.ndarray) -> np.ndarray:
        """(N, ...) per-sequence values from slots (R, K, ...), in input order."""
        return np.asarray(values)[self.row, self.slot]

    def split(self, values: np.ndarray) -> list[np.ndarray]:
        """Per-token rows (R, S, ...) cut back into the sequences, each (length, ...)."""
        values = np.asarray(values)
        return [values[r, s:s + n] for r, s, n in zip(self.row, self.start, self.length,
                                                      strict=True)]

    def inputs(self) -> dict[str, np.ndarray]:
        """The packing arrays the model takes: `sequence_ids`, `position_ids` (R, S) and
        `cls_positions` (R, K) (-1: an empty slot), int32; and the `attention_mask` (R, S)."""
        member, offset, flat = self._spans()
        sequence_ids = np.zeros(self.num_rows * self.seq_len, np.int32)
        position_ids = np.zeros(self.num_rows * self.seq_len, np.int32)
        sequence_ids[flat] = self.slot[member] + 1
        position_ids[flat] = offset
        shape = (self.num_rows, self.seq_len)
        return {"attention_mask": (sequence_ids != 0).astype(np.int32).reshape(shape),
                "sequence_ids": sequence_ids.reshape(shape),
                "position_ids": position_ids.reshape(shape),
                "cls_positions": self.per_sequence(self.start.astype(np.int32), -1)}

    def batches(self, rows_per_batch: int, order: np.ndarray | None = None
                ) -> list[tuple[np.ndarray, RowLayout]]:
        """The rows (in `order`, default as packed) cut into batches of `rows_per_batch` rows,
        the last one completed with empty rows: (the members of each batch, its layout)."""
        if rows_per_batch < 1:
            raise InputError(f"rows_per_batch must be at least 1, got {rows_per_batch}")
        order = np.arange(self.num_rows) if order is None else np.asarray(order)
        where = np.full(self.num_rows, -1, np.int64)  # each row's place in `order`
        where[order] = np.arange(len(order))
        rank = where[self.row]  # (N,) -1: a row left out of `order`
        members = np.lexsort((self.slot, rank))  # by place, then slot
        members = members[rank[members] >= 0]
        firsts = np.arange(0, len(order), rows_per_batch)
        cuts = np.searchsorted(rank[members], firsts[1:])
        return [(chunk, self.subset(chunk, rank[chunk] - first, rows_per_batch))
                for chunk, first in zip(np.split(members, cuts), firsts, strict=True)]

    def subset(self, members: np.ndarray, rows: np.ndarray, num_rows: int) -> RowLayout:
        """The layout of `members` alone, in rows renumbered `rows`, out of `num_rows`."""
        return dataclasses.replace(self, row=np.asarray(rows, np.int64), slot=self.slot[members],
                                   start=self.start[members], length=self.length[members],
                                   num_rows=num_rows)


def pad_sequences(sequences: Sequence[Sequence[int]], fill: int = 0) -> np.ndarray:
    """(N, longest) int32 of right-padded sequences."""
    out = np.full((len(sequences), max((len(s) for s in sequences), default=0)), fill, np.int32)
    for n, s in enumerate(sequences):
        out[n, :len(s)] = s
    return out


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


def check_lengths(lengths: np.ndarray, seq_len: int, what: str = "sequences") -> None:
    """A ValueError naming empty sequences and those longer than `seq_len`."""
    for name, bad in (("empty", lengths == 0), (f"longer than seq_len={seq_len}", lengths > seq_len)):
        if bad.any():
            raise InputError(f"{what} {np.flatnonzero(bad)[:5].tolist()} are {name}: "
                             "cut or drop them before packing")


def pack_layout(lengths: Lengths, seq_len: int, max_per_row: int | None = None) -> RowLayout:
    """Sequences of `lengths` placed in rows of `seq_len` by best-fit decreasing."""
    length = np.asarray(lengths, np.int64)
    check_lengths(length, seq_len)
    if max_per_row is not None and max_per_row < 1:
        raise InputError(f"max_per_row must be at least 1, got {max_per_row}")
    rows = best_fit_decreasing(length.tolist(), seq_len, max_per_row)
    return RowLayout.of(rows, length, seq_len, max_per_row)


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
        raise InputError("token_types must give one type per token of each sequence")
    layout = pack_layout(lengths, seq_len, max_per_row)
    arrays = layout.inputs()
    types = (layout.tokens(pad_sequences(token_types)) if token_types is not None
             else np.zeros((layout.num_rows, seq_len), np.int32))
    return PackedRows(
        input_ids=layout.tokens(pad_sequences(sequences, pad_id), pad_id), token_type_ids=types,
        placement=np.stack([layout.row, layout.slot], axis=1).astype(np.int32),
        lengths=lengths, **arrays)


def unpack_tokens(packed: PackedRows, values: np.ndarray) -> list[np.ndarray]:
    """Per-token outputs (R, S, ...) (sequence output, token or start/end logits) split back
    into the input sequences, in input order: each (length, ...)."""
    values = np.asarray(values)
    return [values[r, start:start + length] for (r, _), start, length
            in zip(packed.placement, packed.starts, packed.lengths, strict=True)]
