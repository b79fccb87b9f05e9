"""Token-budget batches: sequences packed into rows of a fixed length, a fixed number of rows per
batch, for inference and fine-tuning (`max_tokens=`, `--max-tokens`).

A batch is `max_tokens // row_len` rows of `row_len` tokens (`token_budget`): rows as long as
the longest sequence, rounded up to `encode.PAD_MULTIPLE`, at least `ROW_FLOOR` where the model
has the positions (a short row holds few sequences, so more of it stays empty), never more than
the model's positions. Every batch of one row length has one shape, including the last
(completed with empty rows) and its K, the most sequences any row holds: one compiled program
per row length (at most two, below), where sorted padded batches compile one per length.
Attention stays inside each sequence (`bertjax.inputs`), so each sequence's outputs are those it
has alone, up to float32 rounding (the tests hold them within 1e-5).

Attention is the one cost that grows with the row: each token's scores span its whole row
(masked). So inference (`packed_layouts`) packs in two lengths when a few inputs are much
longer than the rest: the bulk (up to the `BULK_QUANTILE` of the lengths, rounded up, at least
`ROW_FLOOR`) in rows of its own length, the longer few in rows of the longest's; at most two
shapes. Sequences go to rows by best-fit decreasing (`bertjax.data.packing`), so rows are nearly
full: the work is the real tokens, not the padding of sorted batches rounded up to 16.

A batch is sized by the inputs, not by the budget alone: it has `max_tokens // row_len` rows, or
as many as the inputs fill if they fill fewer, so a large budget costs nothing for a few short
texts. A budget whose batch could never fit in the process's memory is refused (`token_budget`,
`bertjax.common.memory`), and so is one whose batch of these inputs would not fit beside what
is in use now, given the model (`config=`: `forward_token_bytes`), with the largest that fits.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from bertjax.common.memory import TOKEN_BYTES_FLOOR, available_memory, check_max_tokens, gib
from bertjax.config import BertConfig
from bertjax.data.packing import RowLayout, pack_layout
from bertjax.errors import InputError
from bertjax.inputs import packing_options, sequence_mask
from bertjax.use.encode import PAD_MULTIPLE

__all__ = ["BULK_QUANTILE", "MAX_TOKENS", "ROW_FLOOR", "Budget", "PackedBatch",
           "forward_token_bytes", "pack_arrays", "packed_batches", "packed_layouts",
           "packing_options", "row_length", "row_limit", "sequence_mask", "token_budget"]

ROW_FLOOR = 64  # shortest packed row where the model has the positions (see the docstring)
# inference packs the inputs up to this quantile of the lengths in rows of their own length
# (the rest in rows of the longest's): a few long lines would otherwise set every row's length
# (measured on the plays' lines in docs/design.md, "Speed")
BULK_QUANTILE = 0.98
# batches whose memory is live at once: the next one computes while the last one's results are
# read back (`embed`, `answer`)
IN_FLIGHT = 2
# the share of the memory free now that batches may take: compiling their program, the inputs'
# own arrays and the results take the rest. embed of 200,000 lines under a 4 GiB RLIMIT_DATA ran
# out with budgets sized to the whole; at half (50,816 slots) it finished, 2.66 GB at its peak
MEMORY_SHARE = 0.5


@dataclasses.dataclass(frozen=True)
class Budget:
    """Rows of `row_len` tokens, `rows` of them per batch."""

    row_len: int
    rows: int


MAX_TOKENS = "max_tokens (--max-tokens)"  # how errors name the budget, for Python and the CLI


def row_limit(input_ids: np.ndarray, positions: int) -> int:
    """The longest packed row a unit of `input_ids` may need under a model of `positions`: one
    sequence's positions, or C times that for units of C sequences (multiple choice's
    (N, C, W)), whose sequences share a row and each restart their positions."""
    return positions * (input_ids.shape[1] if input_ids.ndim == 3 else 1)


def row_length(longest: int, limit: int) -> int:
    """The packed row length for sequences up to `longest` tokens under a model of `limit`
    positions: `longest` rounded up to `PAD_MULTIPLE`, at least `ROW_FLOOR`, at most `limit`."""
    if longest > limit:
        raise InputError(f"a sequence of {longest} tokens is longer than the model's {limit} "
                         "positions: cut it first")
    return min(limit, max(-(-longest // PAD_MULTIPLE) * PAD_MULTIPLE, min(ROW_FLOOR, limit)))


def token_budget(max_tokens: int, longest: int, limit: int, option: str = MAX_TOKENS
                 ) -> Budget:
    """The row length for sequences up to `longest` tokens under a model of `limit` positions,
    and how many rows `max_tokens` holds; an InputError naming `option` if it holds none, or if
    its batch could never fit in this process's memory (`bertjax.common.memory`)."""
    if max_tokens < 1:
        raise InputError(f"{option} must be at least 1, got {max_tokens}")
    check_max_tokens(max_tokens, option)
    row_len = row_length(longest, limit)
    if max_tokens < row_len:
        raise InputError(f"{option} {max_tokens} holds no packed row of {row_len} tokens (the "
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


def forward_token_bytes(config: BertConfig, row_len: int) -> int:
    """About the most memory one token slot of a packed batch of `row_len`-token rows takes in a
    forward pass of a `config` model: one layer's float32 activations at a time (hidden states,
    query, key and value, the attention scores, mask and probabilities over its row, the
    feed-forward's inner layer) and its host arrays. An upper bound of what XLA's CPU programs
    took: for the tiny preset (10,304 bytes in rows of 64, 12,352 in rows of 128), fill-mask
    took 7.2 KB a slot in rows of 64, and embed 11.4 KB a slot of each of its two batches in
    flight in rows of 128."""
    hidden, inner = config.hidden_size, config.intermediate_size
    return (4 * (8 * hidden + 4 * config.num_attention_heads * row_len + 2 * inner)
            + TOKEN_BYTES_FLOOR)


def _check_fits(rows: int, row_len: int, config: BertConfig, max_tokens: int,
                option: str) -> None:
    """An InputError naming `option` and the largest value that fits if `IN_FLIGHT` batches of
    `rows` rows of `row_len` tokens of a `config` model need more than `MEMORY_SHARE` of the
    memory the process can still use."""
    per_slot = IN_FLIGHT * forward_token_bytes(config, row_len)
    need, free = rows * row_len * per_slot, available_memory()
    usable = int(free * MEMORY_SHARE)
    if need <= usable:
        return
    largest = usable // per_slot // row_len * row_len
    fix = (f"pass {option} {largest} or less" if largest >= row_len
           else "free some memory, or give fewer or shorter inputs")
    raise InputError(f"{option} {max_tokens}: batches of these inputs ({rows} rows of {row_len} "
                     f"tokens) need about {gib(need)} with this model, more than half the "
                     f"{gib(free)} this process can still use; {fix}")


def packed_layouts(lengths: np.ndarray, *, max_tokens: int, limit: int,
                   option: str = MAX_TOKENS, config: BertConfig | None = None
                   ) -> list[tuple[np.ndarray, RowLayout]]:
    """Sequences of `lengths` packed by best-fit decreasing into batches of `max_tokens` token
    slots, or of as many rows as they fill if fewer: (the sequences of each batch, their layout
    in its rows). The bulk's rows are as long as the `BULK_QUANTILE` of the lengths needs, the
    longer few's as the longest's (see the module docstring); one bucket when those are the
    same. Given the model's `config`, a batch that would not fit in memory is an InputError."""
    lengths = np.asarray(lengths)
    if not len(lengths):
        return []
    longest = token_budget(max_tokens, int(lengths.max()), limit, option).row_len
    bulk = token_budget(max_tokens, int(np.quantile(lengths, BULK_QUANTILE, method="lower")), limit,
                        option).row_len
    out = []
    for row_len, members in ((bulk, np.flatnonzero(lengths <= bulk)),
                             (longest, np.flatnonzero(lengths > bulk))):
        if len(members):
            layout = pack_layout(lengths[members], row_len)
            rows = min(max_tokens // row_len, layout.num_rows)  # sized by the inputs
            if config is not None:
                _check_fits(rows, row_len, config, max_tokens, option)
            out += [(members[m], sub) for m, sub in layout.batches(rows)]
    return out


def packed_batches(arrays: Mapping[str, np.ndarray], *, max_tokens: int, limit: int,
                   pad_id: int, option: str = MAX_TOKENS, per_token: Sequence[str] = (),
                   per_sequence: Sequence[str] = (),
                   fills: Mapping[str, int | float] | None = None,
                   config: BertConfig | None = None) -> list[PackedBatch]:
    """Right-padded sequences (`arrays`, each (N, W, ...) or (N, ...), their lengths from
    `attention_mask`) packed into batches (`packed_layouts`; `config`: the model's, to refuse a
    batch that would not fit in memory), their arrays moved into the rows (`pack_arrays`)."""
    lengths = np.asarray(arrays["attention_mask"]).sum(1)
    return [PackedBatch(members, sub, pack_arrays({k: np.asarray(v)[members] for k, v in
                                                   arrays.items()}, sub, pad_id=pad_id,
                                                  per_token=per_token,
                                                  per_sequence=per_sequence, fills=fills))
            for members, sub in packed_layouts(lengths, max_tokens=max_tokens, limit=limit,
                                               option=option, config=config)]
