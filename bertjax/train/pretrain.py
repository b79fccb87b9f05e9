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
from typing import Any

import numpy as np

from bertjax.io.files import write_json_atomic
from bertjax.train import run_config as rc
from bertjax.train.metrics import MetricsWriter, read_jsonl
from bertjax.train.rundir import RunDir
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
    import jax
    from flax import nnx

    from bertjax.model import BertForPreTraining
    from bertjax.train.distributed import allgather_json, any_process
    from bertjax.train.optim import learning_rate_schedule, make_optimizer
    from bertjax.train.parallel import make_strategy
    from bertjax.train.prefetch import Prefetch
    from bertjax.train.pretrain_data import accuracy_ratio, open_data
    from bertjax.train.step import create_train_state, make_eval_step, make_train_step

    t_start = time.perf_counter()
    run, train, is_main = RunDir(run_dir), config.train, jax.process_index() == 0
    say = (log or _stderr) if is_main else (lambda msg: None)
    checkpointer = _open_run_dir(run, config, resume)
    strategy = make_strategy(train.parallel, fsdp=train.fsdp)
    try:
        strategy.check_batch_size(config.data.batch_size, config.optim.grad_accum_steps)
    except ValueError as err:
        raise PretrainError(str(err)) from err
    data = open_data(config, run)

    bert_config = config.bert_config(data.vocab_size)
    optim = config.optim_config()
    tx = make_optimizer(optim)
    model = BertForPreTraining(bert_config, rngs=nnx.Rngs(train.seed))
    graphdef, state = create_train_state(model, tx, train.seed, train.prng_impl)
    del model
    n_params = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(state.params))
    state, start_step = _restore(checkpointer, state, data, resume, say)
    if start_step >= train.steps:
        say(f"run already finished ({start_step} of {train.steps} steps)")
    state = strategy.place_state(state)
    dropout = bert_config.hidden_dropout_prob > 0 or bert_config.attention_probs_dropout_prob > 0
    train_step = strategy.compile_step(make_train_step(
        graphdef, tx, learning_rate_schedule(optim), grad_accum_steps=optim.grad_accum_steps,
        dropout=dropout, axis_name=strategy.axis_name, prng_impl=train.prng_impl))
    eval_step = strategy.compile_eval(make_eval_step(graphdef, axis_name=strategy.axis_name))
    writer = MetricsWriter(run.metrics, tensorboard_dir=run.tensorboard, enabled=is_main,
                           resume_step=start_step if resume else None)

    def evaluate(step: int) -> dict[str, float]:
        sums = [strategy.host_metrics(eval_step(state.params, strategy.shard_batch(b)))
                for b in data.eval_batches]
        out = _means({k: sum(s[k] for s in sums) for k in sums[0]})
        out.update(baseline_accuracy=data.baseline_accuracy,
                   accuracy_ratio=accuracy_ratio(out["mlm_accuracy"], data.baseline_accuracy))
        writer.log("eval", step, out, flush=True)
        say(_eval_line(step, out))
        return out

    say(f"pretrain: {config.model.preset} ({n_params / 1e6:.2f}M params, vocab "
        f"{data.vocab_size}), batch {config.data.batch_size} x seq {config.data.seq_len}, "
        f"{train.steps} steps, {jax.device_count()} device(s) x {jax.process_count()} "
        f"process(es), {f'resuming at step {start_step}' if start_step else 'from scratch'}")
    say(f"baseline: always predicting the most frequent held-out target {data.baseline_token!r} "
        f"scores MLM accuracy {data.baseline_accuracy:.4f}")
    tokens_per_step = config.data.batch_size * config.data.seq_len
    pending = PendingMetrics(strategy.host_metrics, writer, checkpointer.steps, on_step)
    clock = TrainClock(total=train.steps, start=start_step, tokens_per_step=tokens_per_step,
                       progress=progress and is_main)
    step, stopped, last_eval = start_step, None, {}
    # batches are made and put on the devices one step ahead, in a background thread
    batches = Prefetch(data.batches_with_state(), lambda b: (strategy.shard_batch(b[0]), b[1]))
    try:
        while step < train.steps:
            batch, data_state = next(batches)
            state, metrics = train_step(state, batch)
            step += 1
            pending.add(step, metrics)
            is_last = step == train.steps
            over_time = (time_limit_s is not None and step % train.log_every == 0
                         and any_process(time.perf_counter() - t_start > time_limit_s))
            do_eval = step % train.eval_every == 0 or is_last or over_time
            do_ckpt = do_eval or step % train.checkpoint_every == 0
            if do_ckpt or step % train.log_every == 0 or step == start_step + 1:
                clock.tick(step, pending.flush())  # metrics come to the host only here
            if do_eval:
                last_eval = evaluate(step)
            if do_ckpt:
                checkpointer.save(step, strategy.host_state(state), allgather_json(data_state),
                                  config.to_dict(), eval_loss=last_eval["mlm_loss"] if do_eval else None)
                writer.flush()
            if do_eval or do_ckpt:
                clock.resume()  # evaluation and checkpoints are not training time
            if over_time and not is_last:
                stopped = f"time limit of {time_limit_s:.0f}s reached at step {step}"
                say(stopped)
                break
        pending.flush()
    finally:
        batches.close()
        clock.close()
        writer.close()
        checkpointer.close()

    last_eval = last_eval or _last_eval_record(run)  # a resumed run that had already finished
    result = PretrainResult(
        run_dir=str(run), steps=step, resumed_from=start_step if start_step else None,
        wall_time_s=time.perf_counter() - t_start, train_time_s=clock.seconds,
        tokens_per_s=clock.tokens_per_s, first_step_s=clock.first_step_s, eval=last_eval,
        baseline_accuracy=data.baseline_accuracy, baseline_token=data.baseline_token,
        accuracy_ratio=last_eval.get("accuracy_ratio", math.nan), stopped_early=stopped,
    )
    if is_main:
        write_json_atomic(run.summary, dataclasses.asdict(result))
        plot_curves(run.metrics, run.curves,
                    title=f"bertjax pretrain: {config.model.preset}, {run.root.name}")
    return result


# --- the pieces of the loop ----------------------------------------------------------------------


def _stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _open_run_dir(run: RunDir, config: rc.RunConfig, resume: bool) -> Any:
    """Refuse a used directory without --resume and a changed configuration with it; save the
    configuration of a new run; return the run's Checkpointer."""
    import jax

    from bertjax.train.checkpoint import Checkpointer
    from bertjax.train.distributed import barrier

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


def _restore(checkpointer: Any, state: Any, data: Any, resume: bool,
             say: Callable[[str], None]) -> tuple[Any, int]:
    """The newest good checkpoint's state and step (and the data iterator moved to it), or the
    fresh `state` at step 0."""
    import jax

    from bertjax.train.checkpoint import abstract_like

    restored = checkpointer.restore_latest(abstract_like(state)) if resume else None
    if restored is None:
        if resume:
            say(f"no usable checkpoint in {checkpointer.directory}; starting from step 0")
        return state, 0
    for bad in restored.skipped:
        say(f"warning: checkpoint step {bad} in {checkpointer.directory} is corrupt; skipped")
    data.train.set_state(restored.data_states[jax.process_index()])
    return restored.state, restored.step


class PendingMetrics:
    """Train metrics stay on the device until `flush` brings every pending step to the host at
    once: one sync per log interval, not per step. Each step is then checked (NaN/Inf stops the
    run) and logged to metrics.jsonl; TensorBoard gets one point per flush."""

    def __init__(self, to_host: Callable, writer: MetricsWriter,
                 checkpoint_steps: Callable[[], list[int]],
                 on_step: Callable[[int, dict[str, float]], None] | None):
        self.to_host, self.writer = to_host, writer
        self.checkpoint_steps, self.on_step = checkpoint_steps, on_step
        self.steps: list[tuple[int, Any]] = []

    def add(self, step: int, metrics: Any) -> None:
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
            from tqdm import tqdm

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
    from bertjax.losses import metrics_from_sums

    return {k: float(v) for k, v in metrics_from_sums(sums).items()}


def _eval_line(step: int, e: dict[str, float]) -> str:
    return (f"step {step}: eval MLM loss {e['mlm_loss']:.4f}, MLM accuracy {e['mlm_accuracy']:.4f} "
            f"(baseline {e['baseline_accuracy']:.4f}, x{e['accuracy_ratio']:.2f}), perplexity "
            f"{e['perplexity']:.1f}, NSP accuracy {e['nsp_accuracy']:.4f}")


def _last_eval_record(run: RunDir) -> dict[str, float]:
    records = read_jsonl(run.metrics, "eval")
    return {k: v for k, v in (records[-1] if records else {}).items() if isinstance(v, float)}
