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

Reading a run's model (`load_run_model`, for `bertjax.from_pretrained` and `bertjax bench embed`)
uses no `CheckpointManager`: it lists, reads and moves nothing but what it loads, so a command
never creates, cleans up or quarantines anything in a run directory (that may still be training).
It skips a damaged step the same way, with a warning naming it.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import io
import json
import logging
import os
import sys
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.io.weights import build_model, saved_params_to_numpy
from bertjax.train.distributed import barrier
from bertjax.train.rundir import RunDir

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
        """Restore one step and check its digest; raises on any damage (Orbax's own logging of
        it is dropped: `restore_latest` reports it)."""
        with quiet_orbax_logs():
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
                    f"({type(err).__name__}: {_reason(err)}); falling back to an earlier step"
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


def abstract_like(tree: Any) -> Any:
    """Shape/dtype/sharding targets for `restore` from an example state (no data copied)."""
    return jax.tree.map(ocp.utils.to_shape_dtype_struct, tree)


def read_state(directory: str | Path, step: int | None = None) -> tuple[int, Any]:
    """The raw saved state of `step` (newest by default) as nested dicts, without a target.

    For inspection and comparisons; training restores through `Checkpointer.restore_latest`.
    """
    directory = Path(directory).absolute()
    steps = saved_steps(directory)
    if not steps:
        raise FileNotFoundError(f"no checkpoint steps in {directory}")
    step = steps[-1] if step is None else step
    return step, _read_state_item(directory, step)


# --- reading a run's model: read-only, no CheckpointManager ----------------------------------------


class CheckpointReadError(ValueError):
    """A checkpoint step that cannot be read: damaged or incomplete."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"checkpoint step {step} is damaged ({reason})")
        self.step, self.reason = step, reason


@contextlib.contextmanager
def quiet_orbax_logs() -> Iterator[None]:
    """Drop what Orbax, absl and TensorStore print while a step is read (a damaged step is
    reported once, by us): absl's log records and anything written to stderr. After a failed
    read, the reads still in flight report "Event loop is closed" from TensorStore's threads
    (Orbax closed its loop on the first error): they are given a moment to finish here, and any
    later such report is dropped too, as are asyncio's reports of its tasks' and futures' unread
    errors."""
    logger, asyncio_logger = logging.getLogger("absl"), logging.getLogger("asyncio")
    was, hook = logger.disabled, sys.unraisablehook
    logger.disabled, failed = True, False
    sys.unraisablehook = lambda unraisable: None
    had_filter = _unretrieved_error_report in asyncio_logger.filters
    asyncio_logger.addFilter(_unretrieved_error_report)  # its handler may hold the real stderr
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            try:
                yield
            except Exception:
                failed = True
                time.sleep(0.2)
                gc.collect()  # the failed read's tasks are destroyed (and report) while quiet
                raise
    finally:
        logger.disabled = was
        sys.unraisablehook = _without_closed_loop_reports(hook) if failed else hook
        if not (failed or had_filter):  # after a failed read its tasks may report until exit
            asyncio_logger.removeFilter(_unretrieved_error_report)


def _unretrieved_error_report(record: logging.LogRecord) -> bool:
    """False for asyncio's "Task exception was never retrieved" and "Future exception was never
    retrieved" (a logging filter): which of the two a failed read leaves depends on timing."""
    message = record.getMessage()
    return not message.startswith(("Task exception was never retrieved",
                                   "Future exception was never retrieved"))


def _without_closed_loop_reports(hook: Any) -> Any:
    """`hook` (a `sys.unraisablehook`) minus the "Event loop is closed" errors of callbacks into
    an event loop that is gone."""
    if getattr(hook, "drops_closed_loop_reports", False):
        return hook

    def filtered(unraisable: Any) -> None:
        error = unraisable.exc_value
        if not (isinstance(error, RuntimeError) and str(error) == "Event loop is closed"):
            hook(unraisable)

    filtered.drops_closed_loop_reports = True  # type: ignore[attr-defined]
    return filtered


def saved_steps(directory: str | Path) -> list[int]:
    """The finished steps under `directory`, oldest first (Orbax's unfinished `<step>.orbax-
    checkpoint-tmp-*` directories are not steps); [] if there is no such directory."""
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(int(p.name) for p in directory.iterdir() if p.name.isdigit() and p.is_dir())


def saved_eval_loss(directory: str | Path, step: int) -> float | None:
    """The held-out loss step `step` was saved with (Orbax keeps it in `<step>/metrics/metrics`);
    None if it has none or it cannot be read."""
    try:
        return float(json.loads((Path(directory) / str(step) / "metrics" / "metrics").read_bytes())[
            EVAL_LOSS_KEY])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def best_saved_step(directory: str | Path) -> int | None:
    """The step with the lowest held-out loss (the oldest of equals), None if none has one."""
    scored = [(loss, step) for step in saved_steps(directory)
              if (loss := saved_eval_loss(directory, step)) is not None]
    return min(scored)[1] if scored else None


def _read_state_item(directory: Path, step: int) -> Any:
    """Step `step`'s state item as nested dicts; any failure is a CheckpointReadError."""
    try:
        with quiet_orbax_logs(), ocp.StandardCheckpointer() as reader:
            return reader.restore(directory.absolute() / str(step) / "state")
    except Exception as err:  # noqa: BLE001 - any read error means this step is unusable
        raise CheckpointReadError(step, _reason(err)) from err


def read_params(directory: str | Path, step: int) -> Any:
    """The parameters saved at `step` (the state's `params`); a CheckpointReadError if the step
    cannot be read."""
    state = _read_state_item(Path(directory), step)
    if not isinstance(state, dict) or "params" not in state:
        raise CheckpointReadError(step, "its state holds no params")
    return state["params"]


def _reason(err: BaseException) -> str:
    """An error of a failed read in a few words: its first line, without TensorStore's spec."""
    lines = str(err).strip().splitlines()
    text = (lines[0] if lines else "").split(" [tensorstore_spec")[0] or type(err).__name__
    return text if len(text) <= 160 else f"{text[:40]} ... {text[-110:]}"


def _readable(directory: Path, step: int) -> bool:
    try:
        read_params(directory, step)
    except CheckpointReadError:
        return False
    return True


def read_run_params(run: RunDir, step: int | None = None) -> tuple[int, Any]:
    """(step, params) of a run: checkpoint `step`, or by default its best by held-out loss (the
    newest if none was scored). A damaged default step is skipped with a CheckpointCorruptWarning
    naming it, for the newest readable one; a damaged or missing `step` is an error naming the
    steps to choose from."""
    steps = saved_steps(run.checkpoints)
    if not steps:
        moved = run.corrupt_checkpoints.is_dir() and any(run.corrupt_checkpoints.iterdir())
        raise FileNotFoundError(
            f"{run} has no checkpoint yet ({run.checkpoints} holds no step"
            f"{'; damaged ones were moved to ' + str(run.corrupt_checkpoints) if moved else ''}); "
            f"train it (bertjax pretrain --resume --output-dir {run}) or pass another model")
    if step is not None:
        return step, _read_chosen_step(run, step, steps)
    best = best_saved_step(run.checkpoints)
    order = [best] * (best is not None) + [s for s in reversed(steps) if s != best]
    damaged: list[CheckpointReadError] = []
    for candidate in order:
        try:
            params = read_params(run.checkpoints, candidate)
        except CheckpointReadError as err:
            damaged.append(err)
            continue
        if damaged:
            warnings.warn(
                f"in {run}, {'; '.join(str(e) for e in damaged)}: skipped, loaded step "
                f"{candidate} instead (the newest readable step)",
                CheckpointCorruptWarning, stacklevel=3)
        return candidate, params
    raise ValueError(
        f"no checkpoint of {run} can be read: steps {steps} are all damaged ({damaged[0]}); "
        "pre-train again (bertjax pretrain --output-dir NEW_DIR) or pass another model")


def _read_chosen_step(run: RunDir, step: int, steps: list[int]) -> Any:
    """The params of the step a user chose (`--step`), or an error naming the steps there."""
    if step not in steps:
        raise ValueError(f"{run} has no checkpoint step {step}; it has steps {steps}: pass one "
                         "of them with --step")
    try:
        return read_params(run.checkpoints, step)
    except CheckpointReadError as err:
        good = [s for s in steps if s != step and _readable(run.checkpoints, s)]
        fix = (f"choose a readable step: --step {good[-1]} (readable: {good})" if good else
               f"no other step of {run} is readable either ({steps}): pre-train again")
        raise ValueError(f"in {run}, {err}; {fix}") from None


def load_run_model(
    root: str | Path, *, model_cls: type, step: int | None = None, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> tuple[Any, WordPieceTokenizer]:
    """(model, tokenizer) of a `bertjax pretrain` run directory: its checkpoint `step`, by default
    the best (`read_run_params`), as a `model_cls` (`bertjax.io.weights.build_model`)."""
    run = RunDir(root)
    config, tokenizer = run.finished_config()
    step, params = read_run_params(run, step)
    bert_config = config.bert_config(tokenizer.vocab_size).replace(
        **{"pad_token_id": tokenizer.special.pad, **config_overrides})
    model = build_model(saved_params_to_numpy(params), bert_config, model_cls, seed=seed,
                        source=f"{run} step {step}", missing_heads=missing_heads)
    return model, tokenizer
