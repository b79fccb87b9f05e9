"""The fine-tuning job: any task (`bertjax.tasks.task.Task`: sequence or token classification,
extractive question answering, multiple choice)
trained with AdamW and warm-up, evaluated every epoch, the best epoch kept as a Hugging Face
directory.

`finetune(model, tokenizer, train, validation, output_dir, task=...)` is what `bertjax finetune`
runs. The output directory holds

    model/                    the best epoch by the task's validation rank (classification:
                              accuracy then macro-F1; tagging: entity F1 then token accuracy;
                              question answering: F1 then exact match; choice: accuracy),
                              exported: transformers' class of the same name and AutoTokenizer
                              load it
    metrics.jsonl, tensorboard/   a train record per step (brought to the host every `LOG_EVERY`
                              steps), one eval record per epoch
    the task's report         classification: confusion_validation.png (and confusion_test.png);
                              tagging: entities_validation.json (and _test): per-type rows;
                              answers_*.json, choices_*.json: each question's prediction
    summary.json              task, labels, scores, the task's non-neural baseline, timing
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.common.console import to_stderr
from bertjax.common.files import atomic_directory, check_output_directory, write_json_atomic
from bertjax.common.input_overlap import Inputs
from bertjax.data.packing import RowLayout, pack_layout
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.io.weights import save_model
from bertjax.jobs.finetune.config import FinetuneConfig
from bertjax.tasks.classification import ClassificationTask
from bertjax.tasks.task import Task, TaskScores
from bertjax.train.assembly import assemble
from bertjax.train.loop import PendingMetrics, TrainClock, flush_and_tick
from bertjax.train.metrics import MetricsWriter
from bertjax.train.parallel import SingleDevice
from bertjax.train.step import Batch, Metrics, TrainState
from bertjax.use.encode import check_max_length
from bertjax.use.packed import row_limit, token_budget

__all__ = ["LOG_EVERY", "FinetuneConfig", "FinetuneResult", "check_inputs", "check_output_dir",
           "finetune", "length_grouped_batches"]

LOG_EVERY = 10  # optimizer steps between metric syncs (and progress-bar updates)


@dataclasses.dataclass
class FinetuneResult:
    """What a run reports; also written to summary.json."""

    output_dir: str
    task: str  # the task's kind
    labels: list[str]
    train_examples: int
    best_epoch: int
    validation: dict[str, float]
    test: dict[str, float] | None
    baseline: str  # the task's non-neural predictor, fitted on the training examples
    baseline_scores: dict[str, float]  # its scores on the test set (validation if none)
    seconds: float
    train_seconds: float = 0.0  # the training steps' wall time, compilation included
    steps: int = 0  # optimizer steps taken


def finetune(
    model: Any,
    tokenizer: Tokenizer,
    train: Sequence[Any],
    validation: Sequence[Any],
    output_dir: str | Path,
    config: FinetuneConfig = FinetuneConfig(),  # noqa: B008 - frozen
    *,
    task: Task | None = None,
    test: Sequence[Any] | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> FinetuneResult:
    """Fine-tune `model` (the task's head, its `config.id2label` the labels; sequence
    classification if no `task` is given) on `train`; returns the scores of the best epoch on
    `validation` (and `test`).

    `output_dir` must be new or empty; everything is checked before it is made, and it is written
    aside and renamed into place at the end, so a failed or interrupted run leaves nothing there.
    """
    started = time.perf_counter()
    chosen: Task = task or ClassificationTask()
    say = log or to_stderr
    out = Path(output_dir)
    check_output_dir(out)
    if not isinstance(model, chosen.model_class):
        raise InputError(f"{chosen.kind} fine-tunes a {chosen.model_class.__name__}, got "
                         f"{type(model).__name__}; load the model with model_cls="
                         f"{chosen.model_class.__name__}")
    check_inputs(chosen, model.config, train, validation, test, config)
    with atomic_directory(out, replace=out.exists()) as work:
        run, state = _set_up(chosen, model, tokenizer, train, validation, test, work, config, say)
        best = _train(run, state, validation, progress, say)
        return _finish(run, best, test, say, started, out)


def check_output_dir(path: Path, what: str = "output directory", *,
                     inputs: Inputs | None = None) -> None:
    """Refuse an output directory that is a file, holds anything, cannot be made, or is, lies in
    or holds one of `inputs` (the model, the data files: `bertjax.common.input_overlap`)."""
    check_output_directory(path, is_ours=lambda p: (p / "summary.json").is_file(),
                           made_by="bertjax finetune", what=what,
                           replace_hint="remove it to fine-tune again there", inputs=inputs)


def check_inputs(task: Task, model_config: Any, train: Sequence[Any],
                 validation: Sequence[Any], test: Sequence[Any] | None,
                 config: FinetuneConfig) -> None:
    """Everything that can be checked before a run starts: labels, batch size, length."""
    if not train:
        raise InputError("the training data holds no examples: give --train FILE with at least "
                         "one example")
    if not validation:
        raise InputError("the validation data holds no examples: the best epoch is chosen on "
                         "them; give --validation FILE or a larger --validation-fraction")
    for what, examples in (("the training data", train), ("the validation data", validation),
                           ("the test data", test or [])):
        task.check(examples, model_config.id2label, what)
    check_max_length(config.max_length, model_config.max_sequence_length, "--max-length")
    task.check_length(config.max_length)
    batch = config.examples_per_step
    if batch is not None and len(train) < batch:
        raise InputError(f"{len(train)} training examples make no batch of {batch}; "
                         f"lower --batch-size to {len(train)} or less")
    if any(getattr(e, "text_pair", None) for e in (*train, *validation, *(test or []))) \
            and config.max_length < 5:
        raise InputError(f"--max-length {config.max_length} leaves no room for text pairs "
                         "([CLS] A [SEP] B [SEP]); pass --max-length 5 or more")


def _train(run: _Run, state: TrainState, validation: Sequence[Any], progress: bool,
           say: Callable[[str], None]) -> _BestEpoch:
    """Every epoch, then the validation scores; the best epoch is exported to model/."""
    config, out = run.config, run.out
    writer = MetricsWriter(out / "metrics.jsonl", tensorboard_dir=out / "tensorboard")
    pending = PendingMetrics(run.strategy.host_metrics, writer, advice=lambda: (
        "lower the learning rate (--optim.learning-rate) or raise the warm-up "
        "(--optim.warmup-fraction) and fine-tune again"))
    clock = TrainClock(total=run.steps_per_epoch * config.epochs, start=0, tokens_per_step=None,
                       progress=progress, desc="finetune")
    rng = np.random.default_rng(config.seed)
    best: _BestEpoch | None = None
    try:
        for epoch in range(1, config.epochs + 1):
            started = time.perf_counter()
            state, step = _train_epoch(run, state, epoch, rng, pending, clock, writer)
            run.train_seconds += time.perf_counter() - started  # the last step synced its metrics
            current = nnx.merge(run.graphdef, state.params)
            scores = run.task.evaluate(current, run.tokenizer, validation, config.max_length,
                                       config.max_tokens)
            writer.log("eval", step, {"epoch": epoch, **scores.metrics}, flush=True)
            say(f"epoch {epoch}: validation {scores.line}")
            if best is None or scores.rank > best.scores.rank:
                best = _BestEpoch(epoch, scores, jax.device_get(state.params))
                save_model(current, out / "model", tokenizer=run.tokenizer,
                           overwrite=True)  # this run's own, written aside: a better epoch's
            clock.resume()  # validation is not training time
    finally:
        clock.close()
        writer.close()
    assert best is not None  # epochs >= 1 (FinetuneConfig checks)
    return best


# --- the pieces of a run -------------------------------------------------------------------------


@dataclasses.dataclass
class _Run:
    """A fine-tuning run's fixed parts, made once by `_set_up`."""

    task: Task
    config: FinetuneConfig
    model_config: Any
    tokenizer: Tokenizer
    train: Sequence[Any]  # the training units (examples, or windows of them)
    out: Path
    strategy: SingleDevice
    graphdef: nnx.GraphDef
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    train_lengths: np.ndarray  # (N_train,) tokens of each training example, before any cut
    steps_per_epoch: int
    packed: _Packed | None  # with max_tokens: the training units packed into rows
    baseline: str
    baseline_scores: TaskScores
    examples: int  # training examples (before any windows)
    train_seconds: float = 0.0  # the training loops' wall time so far

    @property
    def labels(self) -> tuple[str, ...]:
        return self.model_config.id2label


@dataclasses.dataclass
class _Packed:
    """The training units' arrays, packed once into rows (`FinetuneConfig.max_tokens`)."""

    arrays: dict[str, np.ndarray]  # every unit's `Task.batch`
    layout: RowLayout  # where each unit sits
    rows: int  # rows per step

    @classmethod
    def of(cls, task: Task, tokenizer: Tokenizer, units: Sequence[Any],
           config: FinetuneConfig, model_config: Any) -> _Packed:
        assert config.max_tokens is not None  # packed runs only
        arrays = task.batch(tokenizer, units, config.max_length, model_config)
        lengths = task.pack_lengths(arrays)
        budget = token_budget(config.max_tokens, int(lengths.max()), row_limit(
            arrays["input_ids"], model_config.max_sequence_length), "--max-tokens")
        layout = pack_layout(lengths, budget.row_len)
        if layout.num_rows < budget.rows:
            raise InputError(f"the {len(units)} training units fill {layout.num_rows} packed rows "
                             f"of {budget.row_len} tokens, fewer than a step's {budget.rows} "
                             f"(--max-tokens {config.max_tokens}); lower --max-tokens to "
                             f"{layout.num_rows * budget.row_len} or less")
        accum = config.optim.grad_accum_steps
        if budget.rows % accum:
            raise InputError(f"optim.grad_accum_steps ({accum}) splits each step into micro-"
                             f"batches of rows: --max-tokens {config.max_tokens} makes steps of "
                             f"{budget.rows} rows of {budget.row_len} tokens, which it does not "
                             f"divide; give --max-tokens a multiple of {accum * budget.row_len}")
        return cls(arrays, layout, budget.rows)

    def epoch(self, rng: np.random.Generator) -> list[tuple[np.ndarray, RowLayout]]:
        """This epoch's batches: the rows shuffled, cut into steps (an incomplete one left out)."""
        steps = self.layout.num_rows // self.rows
        return self.layout.batches(self.rows, rng.permutation(self.layout.num_rows)[
            :steps * self.rows])

    def line(self) -> str:
        lengths = self.layout.length
        share = lengths.sum() / (self.layout.num_rows * self.layout.seq_len)
        per_step = len(lengths) / self.layout.num_rows * self.rows
        return (f"packed into {self.layout.num_rows} rows of {self.layout.seq_len} tokens "
                f"({share:.0%} real tokens), {self.rows} rows a step: about {per_step:.0f} "
                "examples a step")


@dataclasses.dataclass
class _BestEpoch:
    """The best epoch so far by the task's validation rank; its parameters on the host."""

    epoch: int
    scores: TaskScores
    params: nnx.State


def _set_up(task: Task, model: Any, tokenizer: Tokenizer, train: Sequence[Any],
            validation: Sequence[Any], test: Sequence[Any] | None, output_dir: str | Path,
            config: FinetuneConfig, say: Callable[[str], None]) -> tuple[_Run, TrainState]:
    """Assemble the training (the inputs are checked, `output_dir` exists); the placed state."""
    labels = model.config.id2label
    units = task.units(tokenizer, train, config.max_length)
    lengths = task.lengths(tokenizer, units)
    packed = None if config.max_tokens is None else _Packed.of(task, tokenizer, units, config,
                                                               model.config)
    steps_per_epoch = (len(units) // config.unpacked_batch_size if packed is None
                       else packed.layout.num_rows // packed.rows)
    total = steps_per_epoch * config.epochs
    strategy = SingleDevice()
    training = assemble(model, config.optim, strategy, steps=total, seed=config.seed,
                        objective=task.objective)
    held_out = task.lengths(tokenizer, task.units(tokenizer, [*validation, *(test or [])],
                                                  config.max_length))
    cut = int(np.sum(lengths > config.max_length) + np.sum(held_out > config.max_length))
    if cut:
        say(f"{cut} examples are longer than {config.max_length} tokens and are cut to fit")
    baseline, baseline_scores = task.baseline(train, test or validation, labels)
    windows = f" ({len(units)} windows)" if len(units) != len(train) else ""
    named = f", {len(labels)} labels" if task.kind.endswith("classification") else ""
    say(f"fine-tuning {task.kind} on {len(train)} examples{windows}{named}, "
        f"{config.epochs} epochs of {steps_per_epoch} steps; baseline ({baseline}): "
        f"{baseline_scores.line}")
    if packed is not None:
        say(f"{len(units)} training units {packed.line()}")
    run = _Run(task=task, config=config, model_config=model.config, tokenizer=tokenizer,
               train=units, out=Path(output_dir), strategy=strategy,
               graphdef=training.graphdef, train_step=training.train_step,
               train_lengths=lengths, steps_per_epoch=steps_per_epoch, packed=packed,
               baseline=baseline, baseline_scores=baseline_scores, examples=len(train))
    return run, strategy.place_state(training.state)


def _train_epoch(run: _Run, state: TrainState, epoch: int, rng: np.random.Generator,
                 pending: PendingMetrics, clock: TrainClock, writer: MetricsWriter
                 ) -> tuple[TrainState, int]:
    """One pass over the training batches; returns the state and the last step's number."""
    step = 0
    for b, batch in enumerate(_epoch_batches(run, rng)):
        state, metrics = run.train_step(state, run.strategy.shard_batch(batch))
        step = (epoch - 1) * run.steps_per_epoch + b + 1
        pending.add(step, metrics)
        if step % LOG_EVERY == 0 or b == run.steps_per_epoch - 1:
            flush_and_tick(pending, clock, writer, step)  # metrics come to the host only here
    return state, step


def _epoch_batches(run: _Run, rng: np.random.Generator) -> Iterator[dict[str, np.ndarray]]:
    """One epoch's training batches: length-grouped and padded, or packed rows."""
    config = run.config
    if run.packed is None:
        for rows in length_grouped_batches(run.train_lengths, config.unpacked_batch_size, rng):
            yield run.task.batch(run.tokenizer, [run.train[i] for i in rows], config.max_length,
                                 run.model_config)
        return
    arrays = run.packed.arrays
    for members, layout in run.packed.epoch(rng):
        yield run.task.pack({k: v[members] for k, v in arrays.items()}, layout,
                            run.tokenizer.special.pad)


def _finish(run: _Run, best: _BestEpoch, test: Sequence[Any] | None,
            say: Callable[[str], None], started: float, final: Path) -> FinetuneResult:
    """The best epoch's reports and test scores; summary.json written (in `run.out`, which
    becomes `final`)."""
    out, labels, task = run.out, run.labels, run.task
    task.report(best.scores, labels, out / "validation", f"validation, epoch {best.epoch}")
    test_scores = None
    if test:
        model = nnx.merge(run.graphdef, best.params)
        test_scores = task.evaluate(model, run.tokenizer, test, run.config.max_length,
                                    run.config.max_tokens)
        task.report(test_scores, labels, out / "test", "test")
        say(f"test (epoch {best.epoch}): {test_scores.line}; baseline {run.baseline_scores.line}")
    result = FinetuneResult(
        output_dir=str(final), task=task.kind, labels=list(labels), train_examples=run.examples,
        best_epoch=best.epoch, validation=best.scores.metrics,
        test=None if test_scores is None else test_scores.metrics, baseline=run.baseline,
        baseline_scores=run.baseline_scores.metrics, seconds=time.perf_counter() - started,
        train_seconds=run.train_seconds, steps=run.steps_per_epoch * run.config.epochs)
    write_json_atomic(out / "summary.json", dataclasses.asdict(result))
    return result


def length_grouped_batches(lengths: np.ndarray, batch_size: int, rng: np.random.Generator,
                           group: int = 50) -> list[np.ndarray]:
    """One epoch's batches (incomplete last batch dropped): a random order, cut into groups of
    `group` batches, each group sorted by length before it is cut into batches, the batches then
    shuffled. Rows of a batch have similar lengths, so little of each batch is padding (Hugging
    Face's `group_by_length`), while every epoch still sees a new random mix."""
    n = len(lengths) // batch_size
    order = rng.permutation(len(lengths))[: n * batch_size]  # the rows left out are random
    span = group * batch_size
    grouped = np.concatenate([chunk[np.argsort(lengths[chunk], kind="stable")]
                              for chunk in np.split(order, range(span, len(order), span))])
    batches = [grouped[i * batch_size:(i + 1) * batch_size] for i in range(n)]
    return [batches[i] for i in rng.permutation(n)]
