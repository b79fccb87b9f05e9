"""Reading the model of a `bertjax pretrain` run directory, read-only.

Checkpoint questions (finished steps, the best step, a step's state) go through
`bertjax.train.saved`, whose Orbax manager is read-only: a command never creates, cleans up or
quarantines anything in a run directory (that may still be training). A step's files are checked
against its manifest before it is read; a damaged default step is skipped for the newest
readable one with one warning naming it, as `bertjax pretrain --resume` does; a damaged step
asked for by number is an error naming the readable ones.

The run's layout and configuration come from `bertjax.runs`, which imports no framework.
"""

from __future__ import annotations

import dataclasses
import warnings
from pathlib import Path
from typing import Any

from bertjax.config.heads import MODELS, Model
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.io.report import LoadReport
from bertjax.io.source import RUN, ModelSource
from bertjax.io.weights import build_model, missing_heads_error, saved_params_to_numpy
from bertjax.runs.config import RunConfig, generator_config
from bertjax.runs.layout import RunDir
from bertjax.train.saved import (
    CheckpointCorruptWarning,
    StepReadError,
    best_step,
    finished_steps,
    read_params,
)


def run_heads(config: RunConfig) -> tuple[str, ...]:
    """The head modules the checkpoints of a run of `config` hold: those of the class it trains
    (`RunConfig.model_class`), its encoder's pooler included; an ELECTRA run's generator is a
    masked LM (`mlm_head`) of its own (`generator_weights`)."""
    heads = MODELS[config.model_class].checkpoint_heads
    return (*heads, "mlm_head") if config.electra else heads


GENERATOR = "generator."  # where an ELECTRA run's checkpoints keep the generator's weights


def generator_weights(arrays: dict[str, Any]) -> dict[str, Any]:
    """An ELECTRA run's generator as a masked LM's checkpoint names: its own weights (under
    `generator.`) and the embeddings it shares with the discriminator (`bert.embeddings.`)."""
    own = {k.removeprefix(GENERATOR): v for k, v in arrays.items() if k.startswith(GENERATOR)}
    shared = {k: v for k, v in arrays.items() if k.startswith("bert.embeddings.")}
    return {**shared, **own}


def _readable(directory: Path, step: int) -> bool:
    try:
        read_params(directory, step)
    except StepReadError:
        return False
    return True


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
    steps = finished_steps(run.checkpoints)
    if not steps:
        moved = run.corrupt_checkpoints.is_dir() and any(run.corrupt_checkpoints.iterdir())
        raise InputError(
            f"{run} has no checkpoint yet ({run.checkpoints} holds no step"
            f"{'; damaged ones were moved to ' + str(run.corrupt_checkpoints) if moved else ''}); "
            f"train it (bertjax pretrain --resume --output-dir {run}) or pass another model")
    if step is not None:
        return RunCheckpoint(step, _read_chosen_step(run, step, steps))
    best = best_step(run.checkpoints)
    order = ([best] if best is not None else []) + [s for s in reversed(steps) if s != best]
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
    raise InputError(
        f"no checkpoint of {run} can be read: steps {steps} are all damaged ({damaged[0]}); "
        "pre-train again (bertjax pretrain --output-dir NEW_DIR) or pass another model")


def _read_chosen_step(run: RunDir, step: int, steps: list[int]) -> Any:
    """The params of the step a user chose (`--step`), or an error naming the steps there."""
    if step not in steps:
        raise InputError(f"{run} has no checkpoint step {step}; it has steps {steps}: pass one "
                         "of them with --step")
    try:
        return read_params(run.checkpoints, step)
    except StepReadError as err:
        good = [s for s in steps if s != step and _readable(run.checkpoints, s)]
        fix = (f"choose a readable step: --step {good[-1]} (readable: {good})" if good else
               f"no other step of {run} is readable either ({steps}): pre-train again")
        raise InputError(f"in {run}, {err}; {fix}") from None


def embedding_rows(params: Any) -> int | None:
    """The rows of the word embeddings in saved parameters (None if they are not there)."""
    table: Any = params
    for key in ("bert", "embeddings", "word_embeddings", "embedding"):
        table = table.get(key) if isinstance(table, dict) else None
    table = table.get("value") if isinstance(table, dict) else table
    shape = getattr(table, "shape", None)
    return int(shape[0]) if shape else None


def check_run_tokenizer(run: RunDir, tokenizer: Tokenizer, found: RunCheckpoint) -> None:
    """InputError naming the run's tokenizer.json if it has another vocabulary than the one the
    checkpoint was trained with (its word embeddings' rows): the tokenizer was replaced, the
    checkpoint is fine."""
    rows = embedding_rows(found.params)
    if rows is None or rows == tokenizer.vocab_size:
        return
    copies = [p for p in (run.data(split) / "tokenizer.json" for split in ("train", "eval"))
              if p.is_file() and Tokenizer.load(p).vocab_size == rows]
    fix = (f"restore it from the copy its shards keep: cp {copies[0]} {run.tokenizer}" if copies
           else "put back the run's own tokenizer.json and vocab.txt (from where it was made)")
    raise InputError(f"{run.tokenizer} has {tokenizer.vocab_size} tokens but the checkpoint (step "
                     f"{found.step}) was trained with a vocabulary of {rows}: the tokenizer is "
                     f"not this run's; {fix}")


def load_run_model(
    root: str | Path | ModelSource, *, model_cls: type[Model], step: int | None = None, seed: int = 0,
    missing_heads: str = "init", **config_overrides: Any,
) -> tuple[Any, Tokenizer, LoadReport]:
    """(model, tokenizer, report) of a `bertjax pretrain` run directory (or its `ModelSource`):
    its checkpoint `step`, by default the best (`read_run_checkpoint`), as a `model_cls`
    (`bertjax.io.weights.build_model`). An ELECTRA run is its discriminator, and as a class with
    the masked-LM head its generator (with the generator's own config)."""
    source = root if isinstance(root, ModelSource) else ModelSource(str(root), Path(root), RUN)
    run = RunDir(source.directory)
    config, tokenizer = run.finished_config(source.run)  # read once, by `locate`
    lacking = [h for h in model_cls.head_modules if h not in run_heads(config)]
    if lacking and missing_heads == "error":  # said before a step is read (or found damaged)
        raise missing_heads_error(str(run), lacking, model_cls)
    found = read_run_checkpoint(run, step)
    check_run_tokenizer(run, tokenizer, found)
    bert_config = config.bert_config(tokenizer.vocab_size, tokenizer.special.pad)
    arrays = saved_params_to_numpy(found.params)
    if config.electra and model_cls.spec.masked_lm:  # the run's masked LM: its generator
        bert_config, arrays = generator_config(config, bert_config), generator_weights(arrays)
    model, report = build_model(
        arrays, bert_config.replace(**config_overrides), model_cls, seed=seed,
        source=f"{run} step {found.step}", missing_heads=missing_heads,
        origin={"path": source.given, "directory": str(source.directory), "format": RUN,
                "step": found.step, "skipped_steps": found.skipped})
    return model, tokenizer, report
