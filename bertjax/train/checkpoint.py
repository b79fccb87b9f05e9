"""Training checkpoints for any loop, on Orbax's `CheckpointManager`.

    ckpt = Checkpointer("ckpt/", keep_last=2)
    ckpt.save(step, state, extra={"epoch": 3})            # state: any pytree of arrays
    restored = ckpt.restore(state)                         # newest good step, or None
    state, step, extra = restored.state, restored.step, restored.extra

A step `s` holds the `state` pytree (params, optimizer state, step, RNG key... as arrays), a JSON
`data` item (`extra`, the step and a digest of `state`) and, if given, a JSON `config` item (the
pre-training job keeps its run configuration there). Orbax writes each step aside and renames it
when complete, so a killed writer leaves no half step; then a manifest of every file's checksum is
added (`bertjax.train.manifest`). Retention keeps the newest `keep_last` steps plus the `keep_best`
with the lowest held-out loss (steps saved with an `eval_loss`).

`restore` walks back from the newest step and skips, with one warning naming it, any step whose
files do not match their manifest, that fails to read, or whose state digest disagrees; the
skipped steps are moved aside (`quarantine`) so training can write them again. Reading a run's
model for inference is `bertjax.io.runs` (read-only, the same checks).
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax.common.files import check_creatable
from bertjax.errors import InputError
from bertjax.train.distributed import barrier
from bertjax.train.manifest import write_manifest
from bertjax.train.saved import (
    EVAL_LOSS_KEY,
    ITEMS,
    CheckpointCorruptWarning,
    StepReadError,
    best_step,
    check_step_files,
    manager_options,
    reason,
)

log = logging.getLogger(__name__)

_RESERVED = ("digest", "step")  # keys of the data item that `extra` may not use


def state_digest(tree: Any) -> str:
    """A hash of every leaf's dtype, shape and bytes (host copy), in tree order."""
    h = hashlib.blake2b(digest_size=16)
    for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
        if isinstance(leaf, jax.Array) and jax.dtypes.issubdtype(leaf.dtype, jax.dtypes.prng_key):
            leaf = jax.random.key_data(leaf)
        arr = np.asarray(jax.device_get(leaf))
        h.update(jax.tree_util.keystr(path).encode())
        h.update(str(arr.dtype).encode() + str(arr.shape).encode())
        h.update(np.ascontiguousarray(arr).tobytes())
    return h.hexdigest()


def abstract_like(tree: Any) -> Any:
    """Shape/dtype/sharding targets for `restore` from an example state (no data copied)."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


@dataclass
class Restored:
    """What `restore` found: the step, its state and JSON, and the damaged steps skipped."""

    step: int
    state: Any
    extra: dict[str, Any]
    config: dict[str, Any] | None = None
    skipped: list[int] = field(default_factory=list)

    @property
    def data_states(self) -> list[Any]:
        """The pre-training job's batch-iterator states (one per process), kept in `extra`."""
        return list(self.extra["data_states"])


class Checkpointer:
    """Save and restore a training state (and JSON beside it) under `directory`, one
    sub-directory per step (see the module docstring)."""

    def __init__(self, directory: str | Path, *, keep_last: int = 2, keep_best: int = 1,
                 quarantine: str | Path | None = None):
        """The directory is checked here, not at the first save after training: a file in the
        way or a directory that cannot be written is an OSError naming it and the fix."""
        if not isinstance(directory, str | os.PathLike):
            raise TypeError(f"Checkpointer takes a directory path, got {type(directory).__name__}")
        self.directory = Path(directory).absolute()
        if self.directory.exists() and not self.directory.is_dir():
            raise NotADirectoryError(f"checkpoint directory {directory} is a file, not a "
                                     "directory; choose another path")
        check_creatable(directory, "checkpoint directory", inside=True)  # steps are made in it
        # where unreadable steps are moved (default: `<directory>_corrupt` beside it)
        self.quarantine = (Path(quarantine).absolute() if quarantine is not None
                           else self.directory.with_name(self.directory.name + "_corrupt"))
        policies: list[Any] = [ocp.checkpoint_managers.LatestN(n=max(1, keep_last))]
        if keep_best > 0:
            policies.append(ocp.checkpoint_managers.BestN(
                get_metric_fn=lambda metrics: float(metrics[EVAL_LOSS_KEY]),
                reverse=True,  # BestN keeps the tail of the sorted list: sort losses descending
                n=keep_best, keep_checkpoints_without_metrics=False))
        options = manager_options(
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
            keep_checkpoints_without_metrics=False,
            # Synchronous: a save has finished (and been renamed into place) when save() returns.
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,  # tmp dirs left by a killed writer
            create=True,
        )
        self.manager = ocp.CheckpointManager(self.directory, item_names=ITEMS, options=options)

    # --- writing ---------------------------------------------------------------------------

    def save(self, step: int, state: Any, *, extra: Mapping[str, Any] | None = None,
             config: Mapping[str, Any] | None = None, eval_loss: float | None = None) -> bool:
        """Write step `step`: `state` (a pytree of arrays), `extra` (JSON) and `config` (JSON, a
        copy of the run's settings); `eval_loss` ranks it for keep-best. Returns whether it was
        saved (False: that step is on disk already)."""
        if step in self.manager.all_steps():
            return False
        extra = dict(extra or {})
        if clash := [k for k in _RESERVED if k in extra]:
            raise InputError(f"extra may not use the keys {clash}: the checkpoint keeps its own")
        items = {"state": ocp.args.StandardSave(state),
                 "data": ocp.args.JsonSave({**extra, "digest": state_digest(state),
                                            "step": int(step)})}
        if config is not None:
            items["config"] = ocp.args.JsonSave(dict(config))
        metrics = None if eval_loss is None else {EVAL_LOSS_KEY: float(eval_loss)}
        saved = self.manager.save(step, args=ocp.args.Composite(**items), metrics=metrics,
                                  force=True)
        self.manager.wait_until_finished()
        if saved and jax.process_index() == 0:
            write_manifest(self.directory / str(step))
        barrier("bertjax_checkpoint_manifest")
        return bool(saved)

    # --- reading ---------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Finalized steps on disk, oldest first (temporary, unfinished ones are not listed)."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def best_step(self) -> int | None:
        """The kept step with the lowest held-out loss, if any step was saved with one."""
        return best_step(self.directory)

    def restore(self, target: Any, step: int | None = None) -> Restored | None:
        """The newest step that restores cleanly into the structure of `target` (an example
        state, or its `abstract_like`), damaged ones skipped with a warning and moved aside;
        None if there is no step. With `step`: that step, or a StepReadError."""
        abstract = abstract_like(target)
        if step is not None:
            return self._restore_step(step, abstract)
        damaged: list[StepReadError] = []
        for candidate in reversed(self.steps()):
            try:
                restored = self._restore_step(candidate, abstract)
            except StepReadError as err:
                damaged.append(err)
                continue
            restored.skipped = [err.step for err in damaged]
            moved = self._quarantine(restored.skipped)
            for bad in damaged:  # one line each, once it is known where the step went
                where = f"; moved it to {moved[bad.step]}" if bad.step in moved else ""
                warnings.warn(f"{bad} at {self.directory / str(bad.step)}: skipped, restored step "
                              f"{candidate} instead{where}", CheckpointCorruptWarning,
                              stacklevel=2)
            return restored
        if damaged:
            raise RuntimeError(f"no usable checkpoint in {self.directory}: steps "
                               f"{[err.step for err in damaged]} are all damaged ({damaged[0]})")
        return None

    def _restore_step(self, step: int, abstract: Any) -> Restored:
        """One step, its files and its digest checked; any damage is a StepReadError."""
        step_dir = self.directory / str(step)
        check_step_files(step_dir, step)
        items = {"state": ocp.args.StandardRestore(abstract), "data": ocp.args.JsonRestore()}
        try:
            if "config" in self.manager.item_metadata(step).keys():
                items["config"] = ocp.args.JsonRestore()
            restored = self.manager.restore(step, args=ocp.args.Composite(**items))
        except Exception as err:  # noqa: BLE001 - any read error means this step is bad
            raise StepReadError(step, reason(err)) from err
        data = restored["data"]
        if not isinstance(data, dict) or "digest" not in data:
            raise StepReadError(step, "the data item is missing or incomplete")
        digest = state_digest(restored["state"])
        if digest != data["digest"]:
            raise StepReadError(step, f"state digest {digest} does not match the saved "
                                      f"{data['digest']}")
        config = restored.get("config") if "config" in items else None
        return Restored(step=int(step), state=restored["state"],
                        extra={k: v for k, v in data.items() if k not in _RESERVED},
                        config=None if config is None else dict(config))

    def _quarantine(self, steps: list[int]) -> dict[int, Path]:
        """Move damaged steps out of the way (kept for inspection) so training can rewrite them;
        where each went (process 0 moves them: {} on the others).

        Every process then reloads the step list, or the others would skip re-saving those steps
        (`save` sees them as done) while process 0 waits for them.
        """
        moved: dict[int, Path] = {}
        if not steps:
            return moved
        if jax.process_index() == 0:
            self.quarantine.mkdir(exist_ok=True)
            for step in steps:
                moved[step] = self.quarantine / f"{step}.{int(time.time())}"
                os.replace(self.directory / str(step), moved[step])
                log.info("moved damaged checkpoint step %d to %s", step, moved[step])
        barrier("bertjax_checkpoint_quarantined")
        self.manager.reload()
        return moved

    def close(self) -> None:
        self.manager.close()
