"""Checkpointer: exact round trip, retention (newest N + best by eval loss), a manifest of every
file checked before a step is read, corruption fallback, and reading that leaves nothing behind."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.train.checkpoint import Checkpointer, state_digest
from bertjax.train.manifest import MANIFEST, verify_manifest
from bertjax.train.saved import (
    CheckpointCorruptWarning,
    StepReadError,
    best_step,
    finished_steps,
    read_params,
)


def _state(shift: float) -> dict:
    key = jax.random.fold_in(jax.random.key(7), int(shift))
    return {
        "params": {"w": jnp.arange(12.0, dtype=jnp.float32).reshape(3, 4) + shift,
                   "b": jnp.full((4,), shift, jnp.float32)},
        "opt": {"mu": jnp.ones((3, 4), jnp.float32) * shift, "count": jnp.int32(shift)},
        "step": jnp.int32(shift),
        "rng": key,
    }


def _equal(a, b) -> bool:
    def leaf(x):
        if isinstance(x, jax.Array) and jax.dtypes.issubdtype(x.dtype, jax.dtypes.prng_key):
            x = jax.random.key_data(x)
        return np.asarray(x)

    la, lb = jax.tree.leaves(jax.tree.map(leaf, a)), jax.tree.leaves(jax.tree.map(leaf, b))
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(la, lb, strict=True)
    )


def test_round_trip_is_bitwise_and_keeps_json_items(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=2)
    state = _state(3.0)
    ck.save(3, state, extra={"data_states": [{"epoch": 0, "cursor": 17}]},
            config={"train": {"steps": 9}})
    restored = Checkpointer(tmp_path / "ck").restore(state)
    assert restored.step == 3 and restored.skipped == []
    assert _equal(restored.state, state)
    assert restored.data_states == [{"epoch": 0, "cursor": 17}]
    assert restored.extra == {"data_states": [{"epoch": 0, "cursor": 17}]}
    assert restored.config == {"train": {"steps": 9}}
    assert state_digest(restored.state) == state_digest(state)
    verify_manifest(tmp_path / "ck" / "3")  # every file as written


def test_any_loop_saves_any_extra_and_restores_a_chosen_step(tmp_path: Path) -> None:
    """The checkpointer a custom loop uses: no configuration item, its own JSON, any step."""
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    assert ck.restore(_state(0)) is None  # nothing saved yet
    for step in (1, 2):
        ck.save(step, _state(step), extra={"epoch": step, "note": "mine"})
    assert ck.save(2, _state(5)) is False  # a step is written once
    restored = ck.restore(_state(0), step=1)
    assert (restored.step, restored.extra, restored.config) == (1, {"epoch": 1, "note": "mine"}, None)
    assert _equal(restored.state, _state(1)) and ck.restore(_state(0)).step == 2
    with pytest.raises(ValueError, match=r"extra may not use the keys \['digest'\]"):
        ck.save(3, _state(3), extra={"digest": "x"})


def test_keeps_newest_n_plus_best_by_eval_loss(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=2)
    losses = {2: 5.0, 4: 3.0, 6: 4.0}  # step 4 is the best; odd steps have no evaluation
    for step in range(1, 9):
        ck.save(step, _state(step), eval_loss=losses.get(step))
    assert ck.steps() == [4, 7, 8]
    # A fresh manager (a restarted run) still knows which step is best.
    again = Checkpointer(tmp_path / "ck", keep_last=2)
    assert again.best_step() == 4
    again.save(9, _state(9))
    assert again.steps() == [4, 8, 9]


def _damage(step_dir: Path, how: str) -> Path:
    """Truncate, delete or flip a byte of the largest array-data file of the state item.

    Orbax merges the per-process OCDBT trees into `state/d/` when it finalizes a step; the
    `ocdbt.process_*` files left beside it are not read on restore.
    """
    files = [p for p in (step_dir / "state" / "d").iterdir() if p.is_file()]
    target = max(files, key=lambda p: p.stat().st_size)
    if how == "truncate":
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size // 2)
    elif how == "flip":  # one byte in the middle, the size unchanged
        data = bytearray(target.read_bytes())
        data[len(data) // 2] ^= 0xFF
        target.write_bytes(bytes(data))
    else:
        os.remove(target)
    return target


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_corrupt_latest_falls_back_with_warning(tmp_path: Path, how: str) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step in (1, 2, 3):
        ck.save(step, _state(step), extra={"data_states": [{"cursor": step}]})
    _damage(tmp_path / "ck" / "3", how)
    with pytest.warns(CheckpointCorruptWarning) as caught:
        restored = Checkpointer(tmp_path / "ck", keep_last=3).restore(_state(0))
    (warning,) = caught  # one line per damaged step, saying where it went
    assert re.fullmatch(r"checkpoint step 3 is damaged \(.+\) at .*ck/3: skipped, restored step 2 "
                        r"instead; moved it to .*ck_corrupt/3\.\d+", str(warning.message))
    assert restored.step == 2 and restored.skipped == [3]
    assert not (tmp_path / "ck" / "3").exists() and any((tmp_path / "ck_corrupt").iterdir())
    assert _equal(restored.state, _state(2))
    assert restored.data_states == [{"cursor": 2}]


def test_missing_item_and_digest_mismatch_are_detected(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step in (1, 2, 3):
        ck.save(step, _state(step))
    for step in (1, 2, 3):  # steps saved before manifests: the state digest still tells
        (tmp_path / "ck" / str(step) / MANIFEST).unlink()
    shutil.rmtree(tmp_path / "ck" / "3" / "data")  # a whole item gone
    # Step 2's arrays swapped for step 1's: every file reads fine, only the digest can tell.
    shutil.rmtree(tmp_path / "ck" / "2" / "state")
    shutil.copytree(tmp_path / "ck" / "1" / "state", tmp_path / "ck" / "2" / "state")
    with pytest.warns(CheckpointCorruptWarning) as caught:
        restored = Checkpointer(tmp_path / "ck").restore(_state(0))
    messages = " ".join(str(w.message) for w in caught)
    assert "step 3" in messages and "step 2" in messages and "digest" in messages
    assert restored.step == 1 and restored.skipped == [3, 2]


def test_all_corrupt_raises(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck")
    ck.save(1, _state(1))
    _damage(tmp_path / "ck" / "1", "delete")
    with pytest.raises(RuntimeError, match=r"no usable checkpoint .*: steps \[1\] are all "
                                           r"damaged \(checkpoint step 1 is damaged"):
        Checkpointer(tmp_path / "ck").restore(_state(0))


def test_unfinished_tmp_dir_is_not_a_step(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck")
    ck.save(1, _state(1))
    # What a writer killed mid-save leaves: Orbax's temporary directory, never renamed.
    shutil.copytree(tmp_path / "ck" / "1", tmp_path / "ck" / "2.orbax-checkpoint-tmp-123")
    again = Checkpointer(tmp_path / "ck")
    assert again.steps() == [1]
    assert again.restore(_state(0)).step == 1


def test_read_only_helpers_agree_with_the_manager_and_touch_nothing(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step, loss in ((1, 4.0), (2, 3.0), (3, None)):
        ck.save(step, _state(step), eval_loss=loss)
    shutil.copytree(tmp_path / "ck" / "3", tmp_path / "ck" / "4.orbax-checkpoint-tmp-9")  # a save
    before = sorted(str(p) for p in tmp_path.rglob("*"))  # in progress, by a run still training
    assert finished_steps(tmp_path / "ck") == ck.steps() == [1, 2, 3]
    assert best_step(tmp_path / "ck") == ck.best_step() == 2
    assert _equal(read_params(tmp_path / "ck", 2), _state(2)["params"])
    _damage(tmp_path / "ck" / "3", "truncate")
    with pytest.raises(StepReadError, match=r"checkpoint step 3 is damaged \(.+\)"):
        read_params(tmp_path / "ck", 3)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing moved, made, removed
    assert finished_steps(tmp_path / "none") == [] and not (tmp_path / "none").exists()


@pytest.mark.slow
def test_saving_and_reading_change_no_process_wide_state(tmp_path: Path) -> None:
    """The library installs no logging filter, hook or stream of its own: not at import, not while
    it saves or reads a step (damaged or not)."""
    import logging
    import subprocess
    import sys

    def global_state() -> tuple:
        return (list(logging.getLogger("absl").filters), logging.getLogger("absl").disabled,
                sys.unraisablehook, sys.stderr, sys.stdout)

    code = ("import logging, sys; hook = sys.unraisablehook\n"
            "import bertjax.train.checkpoint, bertjax.io.runs\n"
            "print(logging.getLogger('absl').filters, sys.unraisablehook is hook)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] True"
    before = global_state()
    ck = Checkpointer(tmp_path / "ck")
    ck.save(1, _state(1))
    ck.save(2, _state(2))
    assert global_state() == before
    read_params(tmp_path / "ck", 2)
    _damage(tmp_path / "ck" / "2", "truncate")
    with pytest.raises(StepReadError):
        read_params(tmp_path / "ck", 2)
    assert global_state() == before


def test_a_flipped_byte_is_found_by_the_manifest_before_orbax_reads(tmp_path: Path) -> None:
    """The damage Orbax cannot see: a byte changed in place (same size), which reads back as
    other numbers. The manifest names the file; training falls back, a reader refuses."""
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step in (1, 2):
        ck.save(step, _state(step))
    assert (tmp_path / "ck" / "2" / MANIFEST).is_file()
    target = _damage(tmp_path / "ck" / "2", "flip")
    with pytest.raises(StepReadError, match=rf"{target.name} does not match its digest"):
        read_params(tmp_path / "ck", 2)
    with pytest.warns(CheckpointCorruptWarning, match="does not match its digest"):
        restored = Checkpointer(tmp_path / "ck", keep_last=3).restore(_state(0))
    assert restored.step == 1 and restored.skipped == [2]
