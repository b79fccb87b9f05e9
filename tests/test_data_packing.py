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

from bertjax.data.packing import best_fit_decreasing, pack_sequences, unpack_tokens

ROOT = Path(__file__).resolve().parents[1]


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
