"""The pre-training job: `pretrain(config, run_dir)` is what `bertjax pretrain` runs.

Data, model, optimizer, the loop, evaluation, checkpoints, metrics; the files it writes are listed
in `bertjax.train.rundir`. Resume is exact: the state (params, optimizer, step, RNG key), the batch
iterator's position and RNG are restored from the newest good checkpoint, dropout keys are derived
from (seed, step), and the metrics log is cut back to that step, so a killed and resumed run ends
bitwise equal to an uninterrupted one on the CPU.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path

import jax
import numpy as np
from flax import nnx
from tqdm import tqdm

from bertjax.files import write_json_atomic
from bertjax.losses import metrics_from_sums
from bertjax.model import BertForPreTraining
from bertjax.train import run_config as rc
from bertjax.train.assembly import Strategy, assemble
from bertjax.train.checkpoint import Checkpointer, abstract_like
from bertjax.train.distributed import allgather_json, any_process, barrier
from bertjax.train.metrics import MetricsWriter, read_jsonl
from bertjax.train.parallel import make_strategy
from bertjax.train.prefetch import Prefetch
from bertjax.train.pretrain_data import PretrainData, accuracy_ratio, open_data
from bertjax.train.rundir import RunDir
from bertjax.train.step import Batch, Metrics, TrainState
from bertjax.viz.curves import plot_curves

# Keys of a train record that are a pure function of (config, step): the resume test compares them.
TRAIN_METRIC_KEYS = (
    "loss", "mlm_loss", "nsp_loss", "mlm_accuracy", "nsp_accuracy", "grad_norm", "learning_rate",
)


class PretrainError(RuntimeError):
    """A run that cannot start or continue, with a message meant for the user."""


class NonFiniteLossError(PretrainError):
    """The loss or gradient norm became NaN or Inf."""


@dataclasses.dataclass
class PretrainResult:
    """What a finished (or stopped) run reports; also written to summary.json."""

    run_dir: str
    steps: int
    resumed_from: int | None
    wall_time_s: float
    train_time_s: float  # steady-state training: no compilation, evaluation or checkpoints
    tokens_per_s: float  # padded tokens per second of train_time_s
    first_step_s: float  # the run's first step, compilation included
    eval: dict[str, float]
    baseline_accuracy: float
    baseline_token: str
    accuracy_ratio: float
    stopped_early: str | None = None


def pretrain(
    config: rc.RunConfig,
    run_dir: str | Path,
    *,
    resume: bool = False,
    progress: bool = True,
    time_limit_s: float | None = None,
    on_step: Callable[[int, dict[str, float]], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> PretrainResult:
    """Pre-train (or continue) the run in `run_dir`; returns its summary.

    `time_limit_s` stops cleanly (with a checkpoint) once that much wall time has passed.
    `on_step(step, metrics)` sees each step's host metrics (tests use it to inject faults).
    """
    t_start = time.perf_counter()
    run, is_main = RunDir(run_dir), jax.process_index() == 0
    say = (log or _stderr) if is_main else _quiet
    checkpointer = _open_run_dir(run, config, resume)
    job, state = _set_up(config, run, checkpointer, resume, say)
    writer = MetricsWriter(run.metrics, tensorboard_dir=run.tensorboard, enabled=is_main,
                           resume_step=job.start_step if resume else None)
    pending = PendingMetrics(job.strategy.host_metrics, writer, checkpointer.steps, on_step)
    clock = TrainClock(total=config.train.steps, start=job.start_step,
                       tokens_per_step=config.data.batch_size * config.data.seq_len,
                       progress=progress and is_main)
    schedule = StepSchedule.of(config.train, start=job.start_step, started=t_start,
                               time_limit_s=time_limit_s)
    # batches are made and put on the devices one step ahead, in a background thread
    batches = Prefetch(job.data.batches_with_state(),
                       lambda b: (job.strategy.shard_batch(b[0]), b[1]))
    try:
        end = _train(job, state, batches, schedule, pending, clock, writer)
    finally:
        batches.close()
        clock.close()
        writer.close()
        checkpointer.close()

    last_eval = end.last_eval or _last_eval_record(run)  # a resumed run that had already finished
    result = PretrainResult(
        run_dir=str(run), steps=end.step, resumed_from=job.start_step or None,
        wall_time_s=time.perf_counter() - t_start, train_time_s=clock.seconds,
        tokens_per_s=clock.tokens_per_s, first_step_s=clock.first_step_s, eval=last_eval,
        baseline_accuracy=job.data.baseline_accuracy, baseline_token=job.data.baseline_token,
        accuracy_ratio=last_eval.get("accuracy_ratio", math.nan), stopped_early=end.stopped,
    )
    if is_main:
        write_json_atomic(run.summary, dataclasses.asdict(result))
        plot_curves(read_jsonl(run.metrics), run.curves,
                    title=f"bertjax pretrain: {config.model.preset}, {run.root.name}")
    return result


# --- setting up ----------------------------------------------------------------------------------


@dataclasses.dataclass
class _Job:
    """The parts of a run the loop works with, made once by `_set_up`."""

    config: rc.RunConfig
    strategy: Strategy
    data: PretrainData
    checkpointer: Checkpointer
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    eval_step: Callable[[nnx.State, Batch], Metrics]
    start_step: int
    say: Callable[[str], None]


def _set_up(config: rc.RunConfig, run: RunDir, checkpointer: Checkpointer, resume: bool,
            say: Callable[[str], None]) -> tuple[_Job, TrainState]:
    """Strategy, data, model and optimizer; the state restored (on resume) and placed."""
    train, optim = config.train, config.optim_config()
    strategy = make_strategy(train.parallel, fsdp=train.fsdp)
    try:
        strategy.check_batch_size(config.data.batch_size, optim.grad_accum_steps)
    except ValueError as err:
        raise PretrainError(str(err)) from err
    data = open_data(config, run)
    model = BertForPreTraining(config.bert_config(data.vocab_size), rngs=nnx.Rngs(train.seed))
    training = assemble(model, optim, strategy, seed=train.seed, prng_impl=train.prng_impl)
    del model
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(training.state.params))
    state, start_step = _restore(checkpointer, training.state, data, resume, say)
    if start_step >= train.steps:
        say(f"run already finished ({start_step} of {train.steps} steps)")
    say(f"pretrain: {config.model.preset} ({n_params / 1e6:.2f}M params, vocab "
        f"{data.vocab_size}), batch {config.data.batch_size} x seq {config.data.seq_len}, "
        f"{train.steps} steps, {jax.device_count()} device(s) x {jax.process_count()} "
        f"process(es), {f'resuming at step {start_step}' if start_step else 'from scratch'}")
    say(f"baseline: always predicting the most frequent held-out target {data.baseline_token!r} "
        f"scores MLM accuracy {data.baseline_accuracy:.4f}")
    job = _Job(config=config, strategy=strategy, data=data, checkpointer=checkpointer,
               train_step=training.train_step, eval_step=training.eval_step,
               start_step=start_step, say=say)
    return job, strategy.place_state(state)


def _open_run_dir(run: RunDir, config: rc.RunConfig, resume: bool) -> Checkpointer:
    """Refuse a used directory without --resume and a changed configuration with it; save the
    configuration of a new run; return the run's Checkpointer."""
    run.root.mkdir(parents=True, exist_ok=True)
    checkpointer = Checkpointer(run.checkpoints, keep_last=config.train.keep_checkpoints,
                                keep_best=1, quarantine=run.corrupt_checkpoints)
    existing, saved = checkpointer.steps(), run.saved_config()
    if not resume and (existing or saved is not None):
        raise PretrainError(
            f"{run} already holds a run "
            f"({'checkpoint steps ' + str(existing) if existing else run.config.name}); "
            "pass --resume to continue it, or choose another --output-dir"
        )
    diffs = rc.differences(saved, config) if resume and saved is not None else []
    if diffs:
        raise PretrainError(
            f"cannot resume {run}: the requested configuration differs from the saved one in "
            f"{len(diffs)} field(s):\n  " + "\n  ".join(diffs)
            + "\nresume with the same options (or only --resume), or use another --output-dir"
        )
    barrier("bertjax_pretrain_run_dir_checked")  # every process checked before process 0 writes
    if saved is None and jax.process_index() == 0:
        write_json_atomic(run.config, config.to_dict())
    return checkpointer


def _restore(checkpointer: Checkpointer, state: TrainState, data: PretrainData, resume: bool,
             say: Callable[[str], None]) -> tuple[TrainState, int]:
    """The newest good checkpoint's state and step (and the data iterator moved to it), or the
    fresh `state` at step 0."""
    restored = checkpointer.restore_latest(abstract_like(state)) if resume else None
    if restored is None:
        if resume:
            say(f"no usable checkpoint in {checkpointer.directory}; starting from step 0")
        return state, 0
    for bad in restored.skipped:
        say(f"warning: checkpoint step {bad} in {checkpointer.directory} is corrupt; skipped")
    data.train.set_state(restored.data_states[jax.process_index()])
    return restored.state, restored.step


# --- the loop ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """What follows one optimizer step."""

    log: bool  # bring the pending metrics to the host (a device sync), log them, tick the clock
    eval: bool  # evaluate on the held-out batches
    checkpoint: bool  # save a checkpoint
    stop: bool  # the time limit has passed before the last step: stop after the checkpoint


@dataclasses.dataclass(frozen=True)
class StepSchedule:
    """When the loop logs, evaluates, checkpoints and stops.

    Evaluation every `eval_every` steps, at the last step and at a stop; a checkpoint with every
    evaluation and every `checkpoint_every` steps; metrics come to the host every `log_every`
    steps, after the run's first step and before each evaluation or checkpoint. The time limit
    is checked every `log_every` steps, agreed by every process (a collective).
    """

    total: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    start: int  # the step the run (re)started at
    started: float  # time.perf_counter() at the start of the job
    time_limit_s: float | None = None

    @classmethod
    def of(cls, train: rc.TrainSection, *, start: int, started: float,
           time_limit_s: float | None) -> StepSchedule:
        return cls(total=train.steps, log_every=train.log_every, eval_every=train.eval_every,
                   checkpoint_every=train.checkpoint_every, start=start, started=started,
                   time_limit_s=time_limit_s)

    def due(self, step: int) -> StepPlan:
        """The plan after `step` (a collective on the steps that check the time limit)."""
        is_last = step == self.total
        over_time = (self.time_limit_s is not None and step % self.log_every == 0
                     and any_process(time.perf_counter() - self.started > self.time_limit_s))
        evaluate = step % self.eval_every == 0 or is_last or over_time
        checkpoint = evaluate or step % self.checkpoint_every == 0
        log = checkpoint or step % self.log_every == 0 or step == self.start + 1
        return StepPlan(log=log, eval=evaluate, checkpoint=checkpoint,
                        stop=over_time and not is_last)


@dataclasses.dataclass
class _LoopEnd:
    step: int
    stopped: str | None  # why the loop stopped before the last step
    last_eval: dict[str, float]  # the newest evaluation ({} if none ran)


def _train(job: _Job, state: TrainState, batches: Prefetch, schedule: StepSchedule,
           pending: PendingMetrics, clock: TrainClock, writer: MetricsWriter) -> _LoopEnd:
    """Train from `job.start_step` to the last step or a stop, following `schedule`."""
    step, last_eval = job.start_step, {}
    while step < schedule.total:
        batch, data_state = next(batches)
        state, metrics = job.train_step(state, batch)
        step += 1
        pending.add(step, metrics)
        due = schedule.due(step)
        if due.log:
            clock.tick(step, pending.flush())  # metrics come to the host only here
        if due.eval:
            last_eval = _evaluate(job, state.params, step, writer)
        if due.checkpoint:
            job.checkpointer.save(step, job.strategy.host_state(state),
                                  allgather_json(data_state), job.config.to_dict(),
                                  eval_loss=last_eval["mlm_loss"] if due.eval else None)
            writer.flush()
        if due.eval or due.checkpoint:
            clock.resume()  # evaluation and checkpoints are not training time
        if due.stop:
            stopped = f"time limit of {schedule.time_limit_s:.0f}s reached at step {step}"
            job.say(stopped)
            pending.flush()
            return _LoopEnd(step, stopped, last_eval)
    pending.flush()
    return _LoopEnd(step, None, last_eval)


def _evaluate(job: _Job, params: nnx.State, step: int, writer: MetricsWriter) -> dict[str, float]:
    """Held-out means (and the baseline comparison), logged and printed."""
    strategy, data = job.strategy, job.data
    sums = [strategy.host_metrics(job.eval_step(params, strategy.shard_batch(b)))
            for b in data.eval_batches]
    out = _means({k: sum(s[k] for s in sums) for k in sums[0]})
    out.update(baseline_accuracy=data.baseline_accuracy,
               accuracy_ratio=accuracy_ratio(out["mlm_accuracy"], data.baseline_accuracy))
    writer.log("eval", step, out, flush=True)
    job.say(_eval_line(step, out))
    return out


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _quiet(message: str) -> None:
    """What processes other than 0 say: nothing."""


class PendingMetrics:
    """Train metrics stay on the device until `flush` brings every pending step to the host at
    once: one sync per log interval, not per step. Each step is then checked (NaN/Inf stops the
    run) and logged to metrics.jsonl; TensorBoard gets one point per flush."""

    def __init__(self, to_host: Callable[[Metrics], dict[str, float]], writer: MetricsWriter,
                 checkpoint_steps: Callable[[], list[int]],
                 on_step: Callable[[int, dict[str, float]], None] | None):
        self.to_host, self.writer = to_host, writer
        self.checkpoint_steps, self.on_step = checkpoint_steps, on_step
        self.steps: list[tuple[int, Metrics]] = []

    def add(self, step: int, metrics: Metrics) -> None:
        self.steps.append((step, metrics))

    def flush(self) -> dict[str, float]:
        """Log the pending steps; returns the newest one's metrics ({} if none was pending)."""
        host: dict[str, float] = {}
        for i, (step, metrics) in enumerate(self.steps, 1):
            host = self.to_host(metrics)
            if self.on_step is not None:
                self.on_step(step, host)
            for key in ("loss", "grad_norm"):
                if not math.isfinite(host.get(key, 0.0)):
                    self._stop(step, key, host[key])
            # every step to metrics.jsonl; the newest of each flush to TensorBoard (host time)
            self.writer.log("train", step, host, tensorboard=i == len(self.steps))
        self.steps.clear()
        return host

    def _stop(self, step: int, key: str, value: float) -> None:
        good = self.checkpoint_steps()
        raise NonFiniteLossError(
            f"{key} is {value} at step {step}: stopping. The last good checkpoint is "
            + (f"step {good[-1]}" if good else "none (none was saved)")
            + "; lower optim.learning_rate or raise optim.warmup_steps and resume from it"
        )


class TrainClock:
    """Training time and tokens/s between metric flushes (each a device sync), leaving out the
    first step (compilation) and the evaluations and checkpoints (`resume` after them); drives
    the progress bar."""

    def __init__(self, *, total: int, start: int, tokens_per_step: int, progress: bool):
        self.tokens_per_step = tokens_per_step
        self.started = time.perf_counter()
        self.first_step_s = 0.0
        self.seconds, self.steps = 0.0, 0
        self.mark: tuple[float, int] | None = None
        self.bar = None
        if progress:
            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True,
                            desc="pretrain", file=sys.stderr)

    @property
    def tokens_per_s(self) -> float:
        return self.steps * self.tokens_per_step / self.seconds if self.seconds > 0 else 0.0

    def tick(self, step: int, metrics: dict[str, float]) -> None:
        """The device has finished `step` (its metrics are on the host)."""
        now = time.perf_counter()
        rate = 0.0
        if self.mark is None:
            self.first_step_s = now - self.started
        else:
            seconds, steps = now - self.mark[0], step - self.mark[1]
            self.seconds, self.steps = self.seconds + seconds, self.steps + steps
            rate = steps * self.tokens_per_step / max(seconds, 1e-9)
        self.mark = (now, step)
        if self.bar is not None and metrics:
            self.bar.set_postfix(loss=f"{metrics['loss']:.3f}", lr=f"{metrics['learning_rate']:.2e}",
                                 tok_s=f"{rate:,.0f}", refresh=False)
            self.bar.update(step - self.bar.n)

    def resume(self) -> None:
        """Training starts again now (after an evaluation or a checkpoint)."""
        if self.mark is not None:
            self.mark = (time.perf_counter(), self.mark[1])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def _means(sums: dict[str, float]) -> dict[str, float]:
    return {k: float(v) for k, v in metrics_from_sums(sums).items()}


def _eval_line(step: int, e: dict[str, float]) -> str:
    return (f"step {step}: eval MLM loss {e['mlm_loss']:.4f}, MLM accuracy {e['mlm_accuracy']:.4f} "
            f"(baseline {e['baseline_accuracy']:.4f}, x{e['accuracy_ratio']:.2f}), perplexity "
            f"{e['perplexity']:.1f}, NSP accuracy {e['nsp_accuracy']:.4f}")


def _last_eval_record(run: RunDir) -> dict[str, float]:
    records = read_jsonl(run.metrics, "eval")
    return {k: v for k, v in (records[-1] if records else {}).items() if isinstance(v, float)}
