"""Pre-training checkpoints on Orbax's `CheckpointManager`.

A checkpoint at step `s` (optimizer updates done) holds three items:

- `state`: the `TrainState` pytree (params, optimizer state, step, RNG key), as arrays;
- `data`: JSON, the batch iterator's state after `s` batches (one entry per process) and a digest
  of `state` so silent corruption is caught on restore;
- `config`: JSON, the run configuration that produced it.

Orbax writes each step into a temporary directory and renames it when complete, so a killed
writer leaves no half step behind. Retention keeps the newest `keep_last` steps plus the
`keep_best` with the lowest held-out loss (steps saved with an evaluation carry that loss).
`restore_latest` walks back from the newest step and skips, with a warning naming it, any step
that fails to read or whose digest disagrees.
"""

from __future__ import annotations

import hashlib
import logging
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax.train.distributed import barrier

log = logging.getLogger(__name__)

EVAL_LOSS_KEY = "eval_loss"


class _QuietUntrackedSaves(logging.Filter):
    """Steps saved between evaluations carry no loss on purpose; Orbax warns about each one."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "did not provide metrics" not in record.getMessage()


logging.getLogger("absl").addFilter(_QuietUntrackedSaves())


class CheckpointCorruptWarning(UserWarning):
    """A checkpoint step could not be restored and was skipped."""


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


@dataclass
class Restored:
    """What `restore_latest` found: the step, its state pytree and its JSON items."""

    step: int
    state: Any
    data_states: list[Any]
    config: dict[str, Any]
    skipped: list[int]


class Checkpointer:
    """Save and restore `{state, data, config}` under `directory` (one sub-directory per step)."""

    def __init__(self, directory: str | Path, *, keep_last: int = 2, keep_best: int = 1,
                 quarantine: str | Path | None = None):
        self.directory = Path(directory).absolute()
        # where unreadable steps are moved (default: `<directory>_corrupt` beside it)
        self.quarantine = (Path(quarantine).absolute() if quarantine is not None
                           else self.directory.with_name(self.directory.name + "_corrupt"))
        policies: list[Any] = [ocp.checkpoint_managers.LatestN(n=max(1, keep_last))]
        if keep_best > 0:
            policies.append(
                ocp.checkpoint_managers.BestN(
                    get_metric_fn=lambda metrics: float(metrics[EVAL_LOSS_KEY]),
                    reverse=True,  # BestN keeps the tail of the sorted list: sort losses descending
                    n=keep_best,
                    keep_checkpoints_without_metrics=False,
                )
            )
        options = ocp.CheckpointManagerOptions(
            preservation_policy=ocp.checkpoint_managers.AnyPreservationPolicy(policies),
            # best_fn also makes Orbax persist each step's metrics, so "best" survives restarts.
            best_fn=lambda metrics: float(metrics[EVAL_LOSS_KEY]),
            best_mode="min",
            keep_checkpoints_without_metrics=False,
            # Synchronous: a save has finished (and been renamed into place) when save() returns.
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,  # tmp dirs left by a killed writer
            create=True,
        )
        self.manager = ocp.CheckpointManager(
            self.directory, item_names=("state", "data", "config"), options=options
        )

    # --- writing ---------------------------------------------------------------------------

    def save(
        self,
        step: int,
        state: Any,
        data_states: list[Any],
        config: dict[str, Any],
        *,
        eval_loss: float | None = None,
    ) -> bool:
        """Write step `step`; `eval_loss` ranks it for keep-best. Returns whether it was saved."""
        if step in self.manager.all_steps():
            return False
        data = {"data_states": data_states, "digest": state_digest(state), "step": int(step)}
        metrics = None if eval_loss is None else {EVAL_LOSS_KEY: float(eval_loss)}
        saved = self.manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state),
                data=ocp.args.JsonSave(data),
                config=ocp.args.JsonSave(config),
            ),
            metrics=metrics,
            force=True,
        )
        self.manager.wait_until_finished()
        return bool(saved)

    # --- reading ---------------------------------------------------------------------------

    def steps(self) -> list[int]:
        """Finalized steps on disk, oldest first (temporary, unfinished ones are not listed)."""
        self.manager.reload()
        return sorted(self.manager.all_steps())

    def best_step(self) -> int | None:
        """The kept step with the lowest held-out loss, if any step was saved with one."""
        best = None
        for step in self.steps():
            metrics = self.manager.metrics(step) or {}
            if EVAL_LOSS_KEY in metrics and (best is None or metrics[EVAL_LOSS_KEY] < best[1]):
                best = (step, float(metrics[EVAL_LOSS_KEY]))
        return None if best is None else best[0]

    def restore(self, step: int, abstract_state: Any) -> Restored:
        """Restore one step and check its digest; raises on any damage."""
        restored = self.manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state),
                data=ocp.args.JsonRestore(),
                config=ocp.args.JsonRestore(),
            ),
        )
        data = restored["data"]
        if data is None or "digest" not in data:
            raise ValueError("the data item is missing or incomplete")
        digest = state_digest(restored["state"])
        if digest != data["digest"]:
            raise ValueError(f"state digest {digest} does not match the saved {data['digest']}")
        return Restored(
            step=int(step),
            state=restored["state"],
            data_states=list(data["data_states"]),
            config=dict(restored["config"]),
            skipped=[],
        )

    def restore_latest(self, abstract_state: Any) -> Restored | None:
        """The newest step that restores cleanly; damaged ones are skipped with a warning."""
        skipped = []
        for step in reversed(self.steps()):
            try:
                restored = self.restore(step, abstract_state)
            except Exception as err:  # noqa: BLE001 - any read error means this step is bad
                path = self.directory / str(step)
                message = (
                    f"checkpoint step {step} at {path} is corrupt or incomplete and was skipped "
                    f"({type(err).__name__}: {_first_line(err)}); falling back to an earlier step"
                )
                warnings.warn(message, CheckpointCorruptWarning, stacklevel=2)
                log.warning(message)
                skipped.append(step)
                continue
            restored.skipped = skipped
            self._quarantine(skipped)
            return restored
        if skipped:
            raise RuntimeError(
                f"no usable checkpoint in {self.directory}: steps {skipped} are all corrupt"
            )
        return None

    def _quarantine(self, steps: list[int]) -> None:
        """Move damaged steps out of the way (kept for inspection) so training can rewrite them.

        Process 0 moves them; every process then reloads the step list, or the others would
        skip re-saving those steps (`save` sees them as done) while process 0 waits for them.
        """
        if not steps:
            return
        if jax.process_index() == 0:
            self.quarantine.mkdir(exist_ok=True)
            for step in steps:
                target = self.quarantine / f"{step}.{int(time.time())}"
                os.replace(self.directory / str(step), target)
                log.warning("moved corrupt checkpoint step %d to %s", step, target)
        barrier("bertjax_checkpoint_quarantined")
        self.manager.reload()

    def close(self) -> None:
        self.manager.close()


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return text[0][:300] if text else ""


def abstract_like(tree: Any) -> Any:
    """Shape/dtype/sharding targets for `restore` from an example state (no data copied)."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def read_state(directory: str | Path, step: int | None = None) -> tuple[int, Any]:
    """The raw saved state of `step` (newest by default) as nested dicts, without a target.

    For inspection and comparisons; training restores through `Checkpointer.restore_latest`.
    """
    directory = Path(directory).absolute()
    steps = sorted(int(p.name) for p in directory.iterdir() if p.is_dir() and p.name.isdigit())
    if not steps:
        raise FileNotFoundError(f"no checkpoint steps in {directory}")
    step = steps[-1] if step is None else step
    return step, ocp.StandardCheckpointer().restore(directory / str(step) / "state")
