"""What a checkpoint directory holds, read-only, through Orbax's public API: the one place that
answers checkpoint questions for the trainer (`Checkpointer`), the pre-training job and the
loaders of a run's model (`bertjax.io.runs`).

    finished_steps(directory)        steps Orbax finished writing, oldest first
    best_step(directory)             the step saved with the lowest held-out loss
    step_metrics(directory, step)    the metrics a step was saved with (`{"eval_loss": ...}`)
    read_state(directory, step)      a step's `state` item as nested dicts (no target)
    read_params(directory, step)     the state's parameters alone, as numpy (what inference needs)
    read_config(directory, step)     the copy of the run configuration a step keeps

Every read goes through a read-only `CheckpointManager` (nothing is created, cleaned up or
moved) and checks the step's files against its manifest first (`bertjax.train.manifest`), so a
damaged step is refused as a `StepReadError` without handing it to Orbax. A step without a
manifest (saved by a writer killed between Orbax's rename and the manifest) is read directly
and any failure of that read is a `StepReadError` too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax.errors import InputError
from bertjax.train.manifest import StepDamagedError, has_manifest, verify_manifest
from bertjax.train.step_arrays import read_every_array

__all__ = ["EVAL_LOSS_KEY", "ITEMS", "CheckpointCorruptWarning", "StepReadError", "best_step",
           "check_step_files", "finished_steps", "read_config", "read_params", "read_state",
           "step_items", "step_metrics"]

EVAL_LOSS_KEY = "eval_loss"  # the metric a step is saved with and ranked by (lower is better)
ITEMS = ("state", "data", "config")  # the items of a step (`config` only where one was given)
_REASON_CHARS = 160  # a failed read's message is cut to this many characters


class StepReadError(InputError):
    """A checkpoint step that cannot be read: damaged or incomplete (`reason` in a few words)."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"checkpoint step {step} is damaged ({reason})")
        self.step, self.reason = step, reason


class CheckpointCorruptWarning(UserWarning):
    """A checkpoint step could not be restored and was skipped."""


def manager_options(**options: Any) -> ocp.CheckpointManagerOptions:
    """Orbax options every manager of these checkpoints shares: the best step is the one with the
    lowest held-out loss (`best_fn` also makes Orbax keep each step's metrics)."""
    return ocp.CheckpointManagerOptions(
        best_fn=lambda metrics: float(metrics[EVAL_LOSS_KEY]), best_mode="min", **options)


@contextlib.contextmanager
def _reader(directory: Path) -> Iterator[ocp.CheckpointManager]:
    """A read-only manager of `directory` (which exists), closed after; it knows each item's
    handler, so a step's metadata (the state's tree) can be read without its arrays."""
    handlers = {"state": ocp.PyTreeCheckpointHandler(), "data": ocp.JsonCheckpointHandler(),
                "config": ocp.JsonCheckpointHandler()}
    manager = ocp.CheckpointManager(
        directory.absolute(), item_handlers=handlers,
        options=manager_options(read_only=True, create=False, save_interval_steps=0))  # 0: no warning
    try:
        yield manager
    finally:
        manager.close()


def finished_steps(directory: str | Path) -> list[int]:
    """The steps under `directory` that Orbax finished, oldest first (an unfinished step's
    temporary directory is none); [] if there is no such directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    with _reader(directory) as manager:
        return sorted(manager.all_steps())


def step_metrics(directory: str | Path, step: int) -> dict[str, float]:
    """The metrics step `step` was saved with ({} if none, or if they cannot be read)."""
    directory = Path(directory)
    if not directory.is_dir():
        return {}
    with _reader(directory) as manager:
        try:
            return dict(manager.metrics(step) or {})
        except Exception:  # noqa: BLE001 - unreadable metrics rank the step as unscored
            return {}


def best_step(directory: str | Path) -> int | None:
    """The step saved with the lowest held-out loss (the oldest of equals); None if no step
    was saved with one."""
    scored = [(metrics[EVAL_LOSS_KEY], step) for step in finished_steps(directory)
              if EVAL_LOSS_KEY in (metrics := step_metrics(directory, step))]
    return min(scored)[1] if scored else None


def check_step_files(step_dir: Path, step: int) -> None:
    """StepReadError if `step_dir` has a manifest its files do not match, or, saved without
    one, if an array of its state cannot be read (`bertjax.train.step_arrays`: a failed read of
    Orbax's own leaves TensorStore reads reporting into its closed event loop). The trainer also
    checks the state's digest after reading."""
    if has_manifest(step_dir):
        try:
            verify_manifest(step_dir)
        except StepDamagedError as err:
            raise StepReadError(step, str(err)) from None
    elif (step_dir / "state").is_dir():
        try:
            read_every_array(step_dir / "state")
        except (ValueError, OSError) as err:  # TensorStore's errors are ValueErrors
            raise StepReadError(step, reason(err)) from None


def reason(err: BaseException) -> str:
    """A failed read's error in a few words: its type and the start of its first line."""
    lines = str(err).strip().splitlines()
    text = lines[0] if lines else ""
    if len(text) > _REASON_CHARS:
        text = text[:_REASON_CHARS - 3] + "..."
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _restore_item(directory: Path, step: int, item: str, restore_args: Any) -> Any:
    """Item `item` of step `step`, its files checked first; any failure is a StepReadError."""
    check_step_files(directory / str(step), step)
    with _reader(directory) as manager:
        try:
            return manager.restore(step, args=ocp.args.Composite(**{item: restore_args}))[item]
        except Exception as err:  # noqa: BLE001 - any read error means this step is unusable
            raise StepReadError(step, reason(err)) from err


def read_state(directory: str | Path, step: int | None = None) -> tuple[int, Any]:
    """(step, the raw saved state of `step` as nested dicts, no target): the newest step by
    default. For inspection and loading models; training restores with `Checkpointer.restore`."""
    directory = Path(directory)
    steps = finished_steps(directory)
    if not steps:
        raise InputError(f"no checkpoint steps in {directory.absolute()}")
    step = steps[-1] if step is None else step
    return step, _restore_item(directory, step, "state", ocp.args.PyTreeRestore())


def read_params(directory: str | Path, step: int) -> Any:
    """The parameters saved at `step` (the state's `params`), as nested dicts of numpy arrays:
    read alone (Orbax's partial restore from the step's metadata), not the optimizer's moments
    beside them. A StepReadError if the step cannot be read or holds no params."""
    directory = Path(directory)
    check_step_files(directory / str(step), step)
    with _reader(directory) as manager:
        try:
            tree = manager.item_metadata(step)["state"].tree
            if not isinstance(tree, dict) or "params" not in tree:
                raise StepReadError(step, "its state holds no params")
            as_numpy = jax.tree.map(lambda _: ocp.RestoreArgs(restore_type=np.ndarray),
                                    tree["params"])
            restored = manager.restore(step, args=ocp.args.Composite(state=ocp.args.PyTreeRestore(
                item={"params": tree["params"]}, restore_args={"params": as_numpy},
                partial_restore=True)))
        except StepReadError:
            raise
        except Exception as err:  # noqa: BLE001 - any read error means this step is unusable
            raise StepReadError(step, reason(err)) from err
    return restored["state"]["params"]


def read_config(directory: str | Path, step: int) -> dict[str, Any] | None:
    """The run configuration step `step` keeps a copy of; None if it keeps none."""
    directory = Path(directory)
    if "config" not in step_items(directory, step):
        return None
    return dict(_restore_item(directory, step, "config", ocp.args.JsonRestore()))


def step_items(directory: str | Path, step: int) -> set[str]:
    """The names of the items step `step` holds (`ITEMS`, and Orbax's own `metrics`)."""
    with _reader(Path(directory)) as manager:
        try:
            return set(manager.item_metadata(step).keys())
        except Exception as err:  # noqa: BLE001 - a step whose metadata cannot be read
            raise StepReadError(step, reason(err)) from err
