"""Checkpointer: exact round trip, retention (newest N + best by eval loss), corruption fallback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from bertjax.train.checkpoint import (
    CheckpointCorruptWarning,
    Checkpointer,
    CheckpointReadError,
    abstract_like,
    best_saved_step,
    quiet_orbax_logs,
    read_params,
    saved_steps,
    state_digest,
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
    ck.save(3, state, [{"epoch": 0, "cursor": 17}], {"train": {"steps": 9}})
    restored = Checkpointer(tmp_path / "ck").restore_latest(abstract_like(state))
    assert restored.step == 3 and restored.skipped == []
    assert _equal(restored.state, state)
    assert restored.data_states == [{"epoch": 0, "cursor": 17}]
    assert restored.config == {"train": {"steps": 9}}
    assert state_digest(restored.state) == state_digest(state)


def test_keeps_newest_n_plus_best_by_eval_loss(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=2)
    losses = {2: 5.0, 4: 3.0, 6: 4.0}  # step 4 is the best; odd steps have no evaluation
    for step in range(1, 9):
        ck.save(step, _state(step), [{}], {}, eval_loss=losses.get(step))
    assert ck.steps() == [4, 7, 8]
    # A fresh manager (a restarted run) still knows which step is best.
    again = Checkpointer(tmp_path / "ck", keep_last=2)
    assert again.best_step() == 4
    again.save(9, _state(9), [{}], {})
    assert again.steps() == [4, 8, 9]


def _damage(step_dir: Path, how: str) -> Path:
    """Truncate or delete the largest array-data file of the state item.

    Orbax merges the per-process OCDBT trees into `state/d/` when it finalizes a step; the
    `ocdbt.process_*` files left beside it are not read on restore.
    """
    files = [p for p in (step_dir / "state" / "d").iterdir() if p.is_file()]
    target = max(files, key=lambda p: p.stat().st_size)
    if how == "truncate":
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size // 2)
    else:
        os.remove(target)
    return target


@pytest.mark.parametrize("how", ["truncate", "delete"])
def test_corrupt_latest_falls_back_with_warning(tmp_path: Path, how: str) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step in (1, 2, 3):
        ck.save(step, _state(step), [{"cursor": step}], {})
    _damage(tmp_path / "ck" / "3", how)
    with pytest.warns(CheckpointCorruptWarning, match=r"checkpoint step 3 at .*ck/3 is corrupt"):
        restored = Checkpointer(tmp_path / "ck", keep_last=3).restore_latest(abstract_like(_state(0)))
    assert restored.step == 2 and restored.skipped == [3]
    assert not (tmp_path / "ck" / "3").exists() and any((tmp_path / "ck_corrupt").iterdir())
    assert _equal(restored.state, _state(2))
    assert restored.data_states == [{"cursor": 2}]


def test_missing_item_and_digest_mismatch_are_detected(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step in (1, 2, 3):
        ck.save(step, _state(step), [{}], {})
    shutil.rmtree(tmp_path / "ck" / "3" / "data")  # a whole item gone
    # Step 2's arrays swapped for step 1's: every file reads fine, only the digest can tell.
    shutil.rmtree(tmp_path / "ck" / "2" / "state")
    shutil.copytree(tmp_path / "ck" / "1" / "state", tmp_path / "ck" / "2" / "state")
    with pytest.warns(CheckpointCorruptWarning) as caught:
        restored = Checkpointer(tmp_path / "ck").restore_latest(abstract_like(_state(0)))
    messages = " ".join(str(w.message) for w in caught)
    assert "step 3" in messages and "step 2" in messages and "digest" in messages
    assert restored.step == 1 and restored.skipped == [3, 2]


def test_all_corrupt_raises(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck")
    ck.save(1, _state(1), [{}], {})
    _damage(tmp_path / "ck" / "1", "delete")
    with pytest.warns(CheckpointCorruptWarning), pytest.raises(RuntimeError, match="no usable"):
        Checkpointer(tmp_path / "ck").restore_latest(abstract_like(_state(0)))


def test_unfinished_tmp_dir_is_not_a_step(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck")
    ck.save(1, _state(1), [{}], {})
    # What a writer killed mid-save leaves: Orbax's temporary directory, never renamed.
    shutil.copytree(tmp_path / "ck" / "1", tmp_path / "ck" / "2.orbax-checkpoint-tmp-123")
    again = Checkpointer(tmp_path / "ck")
    assert again.steps() == [1]
    assert again.restore_latest(abstract_like(_state(0))).step == 1


def test_read_only_helpers_agree_with_the_manager_and_touch_nothing(tmp_path: Path) -> None:
    ck = Checkpointer(tmp_path / "ck", keep_last=3)
    for step, loss in ((1, 4.0), (2, 3.0), (3, None)):
        ck.save(step, _state(step), [{}], {}, eval_loss=loss)
    shutil.copytree(tmp_path / "ck" / "3", tmp_path / "ck" / "4.orbax-checkpoint-tmp-9")  # a save
    before = sorted(str(p) for p in tmp_path.rglob("*"))  # in progress, by a run still training
    assert saved_steps(tmp_path / "ck") == ck.steps() == [1, 2, 3]
    assert best_saved_step(tmp_path / "ck") == ck.best_step() == 2
    assert _equal(read_params(tmp_path / "ck", 2), _state(2)["params"])
    _damage(tmp_path / "ck" / "3", "truncate")
    with pytest.raises(CheckpointReadError, match=r"checkpoint step 3 is damaged \(.+\)"):
        read_params(tmp_path / "ck", 3)
    assert sorted(str(p) for p in tmp_path.rglob("*")) == before  # nothing moved, made, removed
    assert saved_steps(tmp_path / "none") == [] and not (tmp_path / "none").exists()


def test_quiet_orbax_logs_drops_absl_records_and_stray_stderr(capsys, caplog, monkeypatch) -> None:
    """What Orbax logs and TensorStore's threads print around a damaged step never reaches the
    user's terminal, not even the reports of reads that finish after the failed restore."""
    import logging
    import sys
    import threading
    from types import SimpleNamespace

    seen: list = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    asyncio_logger = logging.getLogger("asyncio")
    filters_before = list(asyncio_logger.filters)  # a failed read in this worker may have one
    with pytest.raises(ValueError, match="damaged"), quiet_orbax_logs():
        logging.getLogger("absl").error("Orbax: failed to read")
        worker = threading.Thread(target=lambda: print("Traceback (...)", file=sys.stderr))
        worker.start()
        worker.join()
        raise ValueError("damaged")
    assert not logging.getLogger("absl").disabled
    assert capsys.readouterr().err == ""
    for message in ("Event loop is closed", "something else"):  # later, from another thread
        sys.unraisablehook(SimpleNamespace(exc_value=RuntimeError(message)))
    assert [str(u.exc_value) for u in seen] == ["something else"]
    try:  # the failed read's tasks and futures, reporting later
        for kind in ("Task", "Future", "Other"):
            asyncio_logger.error("%s exception was never retrieved", kind)
    finally:  # the filter stays only if it was there before (its reads may still report)
        for added in [f for f in asyncio_logger.filters if f not in filters_before]:
            asyncio_logger.removeFilter(added)
    assert [r.getMessage() for r in caplog.records if r.name == "asyncio"] == [
        "Other exception was never retrieved"]
