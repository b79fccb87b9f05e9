"""Reading the model of a `bertjax pretrain` run directory, read-only.

No `CheckpointManager`: this lists, reads and moves nothing but what it loads, so a command never
creates, cleans up or quarantines anything in a run directory (that may still be training). A
step's files are checked against its manifest (`bertjax.io.manifest`) before it is read; a damaged
default step is skipped for the newest readable one with one warning naming it, as `bertjax
pretrain --resume` does; a damaged step asked for by number is an error naming the readable ones.

The run's layout and configuration come from `bertjax.train.rundir` and `.run_config`, which
import no framework (the schema of a run, not the training job).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.errors import InputError
from bertjax.io.orbax_reads import StepReadError, read_state_item
from bertjax.io.report import LoadReport
from bertjax.io.weights import build_model, missing_heads_error, saved_params_to_numpy
from bertjax.train.rundir import RunDir

EVAL_LOSS_KEY = "eval_loss"  # the metric a step is saved with and ranked by (lower is better)
RUN_FORMAT = "bertjax pretrain run"
# the head modules every run's checkpoint holds: `bertjax pretrain` trains a BertForPreTraining
RUN_HEADS = ("pooler", "mlm_head", "nsp_head")

# the name these errors had before they moved here (bertjax.train.checkpoint re-exports it)
CheckpointReadError = StepReadError


class CheckpointCorruptWarning(UserWarning):
    """A checkpoint step could not be restored and was skipped."""


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


def read_state(directory: str | Path, step: int | None = None) -> tuple[int, Any]:
    """The raw saved state of `step` (newest by default) as nested dicts, without a target.

    For inspection and comparisons; training restores through `Checkpointer.restore`.
    """
    directory = Path(directory).absolute()
    steps = saved_steps(directory)
    if not steps:
        raise FileNotFoundError(f"no checkpoint steps in {directory}")
    step = steps[-1] if step is None else step
    return step, read_state_item(directory / str(step), step)


def read_params(directory: str | Path, step: int) -> Any:
    """The parameters saved at `step` (the state's `params`); a StepReadError if the step cannot
    be read."""
    state = read_state_item(Path(directory) / str(step), step)
    if not isinstance(state, dict) or "params" not in state:
        raise StepReadError(step, "its state holds no params")
    return state["params"]


def _readable(directory: Path, step: int) -> bool:
    try:
        read_params(directory, step)
    except StepReadError:
        return False
    return True


def read_run_params(run: RunDir, step: int | None = None) -> tuple[int, Any]:
    """(step, params) of a run (`read_run_checkpoint`)."""
    found = read_run_checkpoint(run, step)
    return found.step, found.params


@dataclasses.dataclass(frozen=True)
class RunCheckpoint:
    """The parameters read from one checkpoint of a run."""

    step: int
    params: Any  # nested dicts of arrays, as saved
    skipped: tuple[int, ...] = ()  # damaged steps passed over to get here


def read_run_checkpoint(run: RunDir, step: int | None = None) -> RunCheckpoint:
    """The parameters of a run's checkpoint `step`, or by default its best by held-out loss (the
    newest if none was scored). A damaged default step is skipped with one
    CheckpointCorruptWarning naming it, for the newest readable one; a damaged or missing `step`
    is an error naming the steps to choose from."""
    steps = saved_steps(run.checkpoints)
    if not steps:
        moved = run.corrupt_checkpoints.is_dir() and any(run.corrupt_checkpoints.iterdir())
        raise FileNotFoundError(
            f"{run} has no checkpoint yet ({run.checkpoints} holds no step"
            f"{'; damaged ones were moved to ' + str(run.corrupt_checkpoints) if moved else ''}); "
            f"train it (bertjax pretrain --resume --output-dir {run}) or pass another model")
    if step is not None:
        return RunCheckpoint(step, _read_chosen_step(run, step, steps))
    best = best_saved_step(run.checkpoints)
    order = [best] * (best is not None) + [s for s in reversed(steps) if s != best]
    damaged: list[StepReadError] = []
    for candidate in order:
        try:
            params = read_params(run.checkpoints, candidate)
        except StepReadError as err:
            damaged.append(err)
            continue
        if damaged:
            warnings.warn(
                f"in {run}, {'; '.join(str(e) for e in damaged)}: skipped, loaded step "
                f"{candidate} instead (the newest readable step)",
                CheckpointCorruptWarning, stacklevel=3)
        return RunCheckpoint(candidate, params, tuple(e.step for e in damaged))
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
    except StepReadError as err:
        good = [s for s in steps if s != step and _readable(run.checkpoints, s)]
        fix = (f"choose a readable step: --step {good[-1]} (readable: {good})" if good else
               f"no other step of {run} is readable either ({steps}): pre-train again")
        raise ValueError(f"in {run}, {err}; {fix}") from None


def embedding_rows(params: Any) -> int | None:
    """The rows of the word embeddings in saved parameters (None if they are not there)."""
    table: Any = params
    for key in ("bert", "embeddings", "word_embeddings", "embedding"):
        table = table.get(key) if isinstance(table, dict) else None
    table = table.get("value") if isinstance(table, dict) else table
    shape = getattr(table, "shape", None)
    return int(shape[0]) if shape else None


def check_run_tokenizer(run: RunDir, tokenizer: WordPieceTokenizer, found: RunCheckpoint) -> None:
    """InputError naming the run's tokenizer.json if it has another vocabulary than the one the
    checkpoint was trained with (its word embeddings' rows): the tokenizer was replaced, the
    checkpoint is fine."""
    rows = embedding_rows(found.params)
    if rows is None or rows == tokenizer.vocab_size:
        return
    copies = [p for p in (run.data(split) / "tokenizer.json" for split in ("train", "eval"))
              if p.is_file() and WordPieceTokenizer.load(p).vocab_size == rows]
    fix = (f"restore it from the copy its shards keep: cp {copies[0]} {run.tokenizer}" if copies
           else "put back the run's own tokenizer.json and vocab.txt (from where it was made)")
    raise InputError(f"{run.tokenizer} has {tokenizer.vocab_size} tokens but the checkpoint (step "
                     f"{found.step}) was trained with a vocabulary of {rows}: the tokenizer is "
                     f"not this run's; {fix}")


def load_run_model(
    root: str | Path, *, model_cls: type, step: int | None = None, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> tuple[Any, WordPieceTokenizer, LoadReport]:
    """(model, tokenizer, report) of a `bertjax pretrain` run directory: its checkpoint `step`,
    by default the best (`read_run_checkpoint`), as a `model_cls` (`bertjax.io.weights.build_model`)."""
    run = RunDir(root)
    config, tokenizer = run.finished_config()
    lacking = [h for h in model_cls.head_modules if h not in RUN_HEADS]
    if lacking and missing_heads == "error":  # said before a step is read (or found damaged)
        raise missing_heads_error(str(run), lacking, model_cls)
    found = read_run_checkpoint(run, step)
    check_run_tokenizer(run, tokenizer, found)
    bert_config = config.bert_config(tokenizer.vocab_size).replace(
        **{"pad_token_id": tokenizer.special.pad, **config_overrides})
    model, report = build_model(saved_params_to_numpy(found.params), bert_config, model_cls,
                                seed=seed, source=f"{run} step {found.step}",
                                missing_heads=missing_heads)
    return model, tokenizer, report.replace(path=str(root), directory=str(root), format=RUN_FORMAT,
                                            step=found.step, skipped_steps=found.skipped)
