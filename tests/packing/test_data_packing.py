"""`bertjax.data.packing`: sequences packed into fixed-length rows by best-fit decreasing. Every
sequence is placed once, whole and in order; no row is over its length or its sequence cap; each
sequence's ids, types, positions and [CLS] position come back from the rows; numpy only.
Exact integer checks, no tolerance.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertjax.data.packing import (
    RowLayout,
    best_fit_decreasing,
    pack_layout,
    pack_sequences,
    unpack_tokens,
)

ROOT = Path(__file__).resolve().parents[2]


def _random_sequences(seed: int, n: int, seq_len: int):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, seq_len + 1, size=n)
    ids = [rng.integers(1, 500, size=k).tolist() for k in lengths]
    types = [rng.integers(0, 2, size=k).tolist() for k in lengths]
    return ids, types


@pytest.mark.parametrize(("seed", "n", "seq_len", "cap"), [
    (0, 50, 32, None), (1, 200, 128, None), (2, 80, 16, 3), (3, 1, 8, None), (4, 30, 64, 1)])
def test_every_sequence_is_placed_once_whole_and_recoverable(seed, n, seq_len, cap):
    ids, types = _random_sequences(seed, n, seq_len)
    packed = pack_sequences(ids, types, seq_len=seq_len, pad_id=0, max_per_row=cap)
    R, S = packed.input_ids.shape
    assert S == seq_len and packed.placement.shape == (n, 2)
    # each (row, slot) holds exactly one input sequence, and every used slot is one
    assert len({tuple(p) for p in packed.placement.tolist()}) == n
    assert int((packed.cls_positions >= 0).sum()) == n
    if cap is not None:
        assert packed.cls_positions.shape[1] == cap
    # no row over its length: the tokens of a row are its sequences' lengths
    per_row = np.bincount(packed.placement[:, 0], weights=packed.lengths, minlength=R)
    assert per_row.max() <= seq_len
    np.testing.assert_array_equal(packed.attention_mask.sum(1), per_row)
    # the input order is recoverable, and so is every array of a sequence
    assert [u.tolist() for u in unpack_tokens(packed, packed.input_ids)] == ids
    assert [u.tolist() for u in unpack_tokens(packed, packed.token_type_ids)] == types
    for (r, slot), start, length in zip(packed.placement, packed.starts, packed.lengths,
                                        strict=True):
        span = slice(start, start + length)
        assert (packed.sequence_ids[r, span] == slot + 1).all()
        np.testing.assert_array_equal(packed.position_ids[r, span], np.arange(length))
        assert packed.cls_positions[r, slot] == start
    # padding: after the sequences, id 0 everywhere, pad_id tokens
    pad = packed.sequence_ids == 0
    np.testing.assert_array_equal(pad, packed.attention_mask == 0)
    assert (packed.input_ids[pad] == 0).all() and (packed.position_ids[pad] == 0).all()
    first_pad = np.where(pad.any(1), pad.argmax(1), S)
    assert (pad == (np.arange(S)[None, :] >= first_pad[:, None])).all()  # right padding
    # sequences sit in slot order, contiguous from 0
    for r in range(R):
        used = packed.cls_positions[r][packed.cls_positions[r] >= 0]
        assert used[0] == 0 and (np.diff(used) > 0).all()
        assert (packed.cls_positions[r][len(used):] == -1).all()  # empty slots last


def test_best_fit_decreasing_fills_the_tightest_row():
    # 12 opens row 0 (room 8), 9 row 1 (room 11), 7 goes to row 0 (room 8 is tighter than 11),
    # 5 to row 1 (row 0 has 1 left), 3 to row 1, 1 to row 0 (exactly full)
    assert best_fit_decreasing([9, 5, 12, 7, 3, 1], 20) == [[2, 3, 5], [0, 1, 4]]
    assert best_fit_decreasing([9, 5, 12, 7, 3, 1], 20, max_per_row=2) == [[2, 3], [0, 1], [4, 5]]
    assert best_fit_decreasing([4, 4, 4, 4], 8) == [[0, 1], [2, 3]]  # ties keep the input order
    assert best_fit_decreasing([], 8) == []


def test_packing_needs_fewer_rows_than_padding():
    ids, types = _random_sequences(5, 400, 128)
    packed = pack_sequences(ids, types, seq_len=128)
    tokens = sum(len(s) for s in ids)
    assert len(packed.input_ids) < 400
    # best-fit decreasing leaves at most one row less than half full
    fill = packed.attention_mask.sum(1)
    assert (fill <= 64).sum() <= 1 and len(packed.input_ids) <= -(-tokens // 64)


def test_bad_inputs_are_refused_by_name():
    with pytest.raises(ValueError, match=r"sequences \[1\] are longer than seq_len=4"):
        pack_sequences([[1, 2], [1, 2, 3, 4, 5]], seq_len=4)
    with pytest.raises(ValueError, match=r"sequences \[0\] are empty"):
        pack_sequences([[], [1]], seq_len=4)
    with pytest.raises(ValueError, match="one type per token"):
        pack_sequences([[1, 2]], [[0]], seq_len=4)
    with pytest.raises(ValueError, match="max_per_row must be at least 1"):
        pack_sequences([[1, 2]], seq_len=4, max_per_row=0)


def test_packing_imports_no_framework():
    code = ("import sys, bertjax.data.packing\n"
            "print(sorted(m for m in ('jax', 'flax', 'torch') if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]", out.stdout


def test_row_layout_moves_per_token_and_per_sequence_arrays_both_ways():
    lengths = [5, 3, 7, 2, 6]
    layout = pack_layout(lengths, 10)
    values = np.zeros((5, 7), np.int32)
    for n, length in enumerate(lengths):
        values[n, :length] = 100 * (n + 1) + np.arange(length)
    rows = layout.tokens(values, fill=-1)
    assert rows.shape == (layout.num_rows, 10) and (rows >= 0).sum() == sum(lengths)
    for n, part in enumerate(layout.split(rows)):
        np.testing.assert_array_equal(part, values[n, :lengths[n]])
    slots = layout.per_sequence(np.arange(5) * 10, fill=-7)
    assert (slots == -7).sum() == layout.num_rows * layout.max_per_row - 5
    np.testing.assert_array_equal(layout.from_slots(slots), np.arange(5) * 10)
    inputs = layout.inputs()
    np.testing.assert_array_equal(inputs["attention_mask"], rows >= 0)
    np.testing.assert_array_equal(layout.from_slots(inputs["cls_positions"]), layout.start)


def test_fixed_size_batches_of_rows_cover_every_sequence_once():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 40, size=60)
    layout = pack_layout(lengths, 64)
    order = rng.permutation(layout.num_rows)
    batches = layout.batches(4, order)
    assert len(batches) == -(-layout.num_rows // 4)
    assert sorted(np.concatenate([m for m, _ in batches]).tolist()) == list(range(60))
    for b, (members, sub) in enumerate(batches):  # one shape; the last completed with empty rows
        assert sub.num_rows == 4 and sub.max_per_row == layout.max_per_row
        ids = sub.inputs()["sequence_ids"]
        assert ids.shape == (4, 64)
        np.testing.assert_array_equal(sub.length, lengths[members])
        for i, n in enumerate(members):  # the same place in its row as in the whole packing
            assert (sub.slot[i], sub.start[i]) == (layout.slot[n], layout.start[n])
            assert order[sub.row[i] + 4 * b] == layout.row[n]
    last = batches[-1][1].inputs()["sequence_ids"]
    assert (last.sum(1) == 0).sum() == 4 * len(batches) - layout.num_rows  # the empty rows
    with pytest.raises(ValueError, match="rows_per_batch must be at least 1"):
        layout.batches(0)


def test_a_second_budget_caps_each_row_like_its_length():
    # pre-training's predictions: lengths fit in one row of 20, costs (4 + 4 + 4) do not in 8
    rows = best_fit_decreasing([5, 5, 5], 20, costs=[4, 4, 4], cost_limit=8)
    assert rows == [[0, 1], [2]]
    assert best_fit_decreasing([5, 5, 5], 20) == [[0, 1, 2]]
    # the tightest row by length is skipped for one with room for the cost
    assert best_fit_decreasing([10, 8, 2], 12, costs=[7, 1, 2], cost_limit=8) == [[0], [1, 2]]
    with pytest.raises(ValueError, match="more than max_per_row=1"):
        RowLayout.of([[0, 1]], [2, 2], 8, max_per_row=1)
    with pytest.raises(ValueError, match="more than seq_len=3"):
        RowLayout.contiguous([2], np.array([2, 2]), 3)
