"""What every training loop needs around its step, shared by pre-training and fine-tuning: metrics
that stay on the device until a log interval (`PendingMetrics`, which also stops on a NaN or
infinite loss), a clock of training time and tokens/s with a progress bar (`TrainClock`), and the
plan of when a loop logs, evaluates, checkpoints and stops (`StepSchedule`).
"""

from __future__ import annotations

import dataclasses
import math
import sys
import time
from collections.abc import Callable
from typing import Any

from tqdm import tqdm

from bertjax.train.distributed import any_process
from bertjax.train.metrics import MetricsWriter

Metrics = dict[str, Any]  # one step's metrics, device arrays until flushed


class NonFiniteLossError(RuntimeError):
    """The loss or gradient norm became NaN or Inf."""


@dataclasses.dataclass(frozen=True)
class StepPlan:
    """What follows one optimizer step."""

    log: bool  # bring the pending metrics to the host (a device sync), log them, tick the clock
    eval: bool  # evaluate on the held-out batches
    checkpoint: bool  # save a checkpoint
    stop: bool  # the time limit has passed or Ctrl-C was pressed before the last step: stop
    # after the checkpoint
    interrupted: bool = False  # Ctrl-C's stop (no evaluation unless one is due: it is prompt)


@dataclasses.dataclass(frozen=True)
class StepSchedule:
    """When a loop logs, evaluates, checkpoints and stops.

    Evaluation every `eval_every` steps, at the last step and at a time-limit stop; a checkpoint
    with every evaluation, every `checkpoint_every` steps and at any stop; metrics come to the
    host every `log_every` steps, after the run's first step and before each evaluation or
    checkpoint. The time limit is checked every `log_every` steps, agreed by every process (a
    collective); so is Ctrl-C with several processes (in one, after every step).
    """

    total: int
    log_every: int
    eval_every: int
    checkpoint_every: int
    start: int  # the step the run (re)started at
    started: float  # time.perf_counter() at the start of the job
    time_limit_s: float | None = None
    processes: int = 1  # jax.process_count(): with one, Ctrl-C is checked after every step

    def due(self, step: int, ctrl_c: bool = False) -> StepPlan:
        """The plan after `step`, `ctrl_c` telling whether Ctrl-C was pressed in this process
        (a collective on the steps that check the time limit)."""
        is_last = step == self.total
        check = step % self.log_every == 0
        over_time = (self.time_limit_s is not None and check
                     and any_process(time.perf_counter() - self.started > self.time_limit_s))
        interrupted = (check or self.processes == 1) and any_process(ctrl_c)
        stop = (over_time or interrupted) and not is_last
        evaluate = step % self.eval_every == 0 or is_last or over_time
        checkpoint = evaluate or step % self.checkpoint_every == 0 or stop
        log = checkpoint or check or step == self.start + 1
        return StepPlan(log=log, eval=evaluate, checkpoint=checkpoint, stop=stop,
                        interrupted=interrupted and not is_last)


class PendingMetrics:
    """Train metrics stay on the device until `flush` brings every pending step to the host at
    once: one sync per log interval, not per step. Each step is then checked (NaN/Inf raises
    NonFiniteLossError, its message ending with `advice()`: what to do, said when it happens) and
    logged; TensorBoard gets one point per flush."""

    def __init__(self, to_host: Callable[[Metrics], dict[str, float]], writer: MetricsWriter, *,
                 advice: Callable[[], str],
                 on_step: Callable[[int, dict[str, float]], None] | None = None):
        self.to_host, self.writer, self.advice, self.on_step = to_host, writer, advice, on_step
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
                    self.steps.clear()
                    raise NonFiniteLossError(f"{key} is {host[key]} at step {step}: stopping. "
                                             f"{self.advice()}")
            # every step to the log; the newest of each flush to TensorBoard (host time)
            self.writer.log("train", step, host, tensorboard=i == len(self.steps))
        self.steps.clear()
        return host


class TrainClock:
    """Training time and tokens/s between metric flushes (each a device sync), leaving out the
    first step (compilation) and whatever the loop does between steps (`resume` after an
    evaluation or a checkpoint); drives the progress bar."""

    def __init__(self, *, total: int, start: int, tokens_per_step: int | None, progress: bool,
                 desc: str = "train"):
        self.tokens_per_step = tokens_per_step
        self.started = time.perf_counter()
        self.first_step_s = 0.0
        self.seconds, self.steps = 0.0, 0
        self.mark: tuple[float, int] | None = None
        self.bar = None
        if progress:
            self.bar = tqdm(total=total, initial=start, unit="step", dynamic_ncols=True,
                            desc=desc, file=sys.stderr)

    @property
    def tokens_per_s(self) -> float:
        """Tokens per second of training time (0 before two flushes, or without a token count)."""
        if not self.tokens_per_step or self.seconds <= 0:
            return 0.0
        return self.steps * self.tokens_per_step / self.seconds

    def tick(self, step: int, metrics: dict[str, float]) -> dict[str, float]:
        """The device has finished `step` (its metrics are on the host). Returns the speed since
        the last tick, for the metrics log: steps/s and (given a token count) tokens/s; {} at
        the first tick (compilation) and when no step passed."""
        now = time.perf_counter()
        rate, speed = 0.0, {}
        if self.mark is None:
            self.first_step_s = now - self.started
        elif step > self.mark[1]:
            seconds, steps = max(now - self.mark[0], 1e-9), step - self.mark[1]
            self.seconds, self.steps = self.seconds + seconds, self.steps + steps
            speed = {"steps_per_s": steps / seconds}
            if self.tokens_per_step:
                rate = steps * self.tokens_per_step / seconds
                speed["tokens_per_s"] = rate
        self.mark = (now, step)
        if self.bar is not None and metrics:
            postfix = {"loss": f"{metrics['loss']:.3f}"}
            if self.tokens_per_step:
                postfix["tok_s"] = f"{rate:,.0f}"
            if "learning_rate" in metrics:
                postfix["lr"] = f"{metrics['learning_rate']:.2e}"
            self.bar.set_postfix(postfix, refresh=False)
            self.bar.update(step - self.bar.n)
        return speed

    def resume(self) -> None:
        """Training starts again now (after an evaluation or a checkpoint)."""
        if self.mark is not None:
            self.mark = (time.perf_counter(), self.mark[1])

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def flush_and_tick(pending: PendingMetrics, clock: TrainClock, writer: MetricsWriter,
                   step: int) -> None:
    """Bring the pending steps' metrics to the host (a device sync), log them, tick `clock` and
    log the speed since its last tick as a "speed" record (TensorBoard's speed/*)."""
    speed = clock.tick(step, pending.flush())
    if speed:
        writer.log("speed", step, speed)
