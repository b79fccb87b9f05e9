"""The step-timing loop and the child-process protocol the JAX and torch rows share.

A child is `python -m bertjax.bench.<module> SPEC.json RESULT.json`: SPEC.json is one job (`Probe`,
`Gemm` or `RowSpec`, written by `write_job`); the child pins itself to the cores the job names
before any framework sizes its thread pools (JAX's backend starts on first use, not on import;
torch is imported by the row), runs it, and writes the raw measurements (or `{"skipped": reason}`)
as JSON. Derived numbers (tokens/s, ratios, MFU) are the parent's job
(`bertjax.bench.report`), so they are computed in one place.
"""

from __future__ import annotations

import dataclasses
import json
import os
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bertjax.config import BertConfig
from bertjax.train.schedule import OptimConfig

# The updates the bench's learning-rate schedule spans: far beyond any timed run, so the rate
# stays near its peak (its value does not change the work of a step).
SCHEDULE_STEPS = 1_000_000
# Environment variables that size the OpenMP / BLAS thread pools of torch and numpy; the parent
# sets them for every child. XLA's CPU thread pool is sized by the process's CPU affinity.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


@dataclasses.dataclass(frozen=True)
class Pinning:
    """What every job says: the cores its child is pinned to, the threads of its pools."""

    cores: tuple[int, ...]
    threads: int


@dataclasses.dataclass(frozen=True)
class Probe(Pinning):
    """Job: report the device JAX finds."""


@dataclasses.dataclass(frozen=True)
class Gemm(Pinning):
    """Job: time the reference square matmul of `size` in `dtype`."""

    size: int
    dtype: str


@dataclasses.dataclass(frozen=True)
class RowSpec(Pinning):
    """Job: time one row, an implementation's training step or inference forward."""

    impl: str  # bertjax, hf-eager, hf-compiled or bert_torch
    mode: str  # train or infer
    dtype: str  # compute dtype of the row (the config's for bertjax, autocast for torch)
    config: BertConfig  # the whole model configuration, dtype included
    seq: int
    batch: int
    predictions: int
    steps: int
    warmup: int
    seed: int
    optim: OptimConfig
    compile_backend: str  # of torch.compile (hf-compiled)
    prng_impl: str  # of bertjax's dropout
    device: str  # torch's: "cuda" when JAX runs on a GPU, else "cpu"


JOBS: dict[str, type] = {"probe": Probe, "gemm": Gemm, "row": RowSpec}
Job = Probe | Gemm | RowSpec


def write_job(job: Job, path: Path) -> None:
    """Write `job` as the JSON a child reads with `read_job`."""
    name = next(name for name, kind in JOBS.items() if isinstance(job, kind))
    path.write_text(json.dumps({"job": name, **dataclasses.asdict(job)}))


def read_job(path: Path) -> Job:
    """The job `write_job` wrote, with its nested configurations rebuilt."""
    data = json.loads(path.read_text())
    kind = JOBS[data.pop("job")]
    data["cores"] = tuple(data["cores"])
    if kind is RowSpec:
        config = data["config"]
        data["config"] = BertConfig(**{**config, "id2label": tuple(config["id2label"])})
        data["optim"] = OptimConfig(**data["optim"])
    return kind(**data)


class RowSkippedError(Exception):
    """A row that cannot run here (a missing package, no such device); the message says why."""


@dataclasses.dataclass
class Timings:
    """Raw times of one row, in seconds."""

    first_step_s: float  # the first call: compilation (jit, torch.compile) included
    step_times_s: list[float]  # each timed step, with a device sync after it
    dispatch_times_s: list[float]  # of the same steps, until `step()` returned (host-side work)
    pipelined_step_s: float  # the same number of steps back to back, one sync at the end, / steps


def time_steps(
    step: Callable[[], Any], sync: Callable[[Any], None], *, steps: int, warmup: int
) -> Timings:
    """Time `step()` (which advances its own state): first call, `warmup` untimed calls, `steps`
    calls with `sync(output)` after each (also timed until `step()` returns: the host's share),
    then `steps` calls with one sync at the end."""
    start = time.perf_counter()
    sync(step())
    first = time.perf_counter() - start
    for _ in range(warmup):
        sync(step())
    times, dispatches = [], []
    for _ in range(steps):
        start = time.perf_counter()
        out = step()
        dispatches.append(time.perf_counter() - start)
        sync(out)
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = step()
    sync(out)
    return Timings(first, times, dispatches, (time.perf_counter() - start) / steps)


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def pin_cores(cores: list[int]) -> None:
    """Restrict this process to `cores` (before a framework import sizes its thread pools)."""
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))


def child_main(run_job: Callable[[Any], dict[str, Any]], argv: list[str]) -> int:
    """Entry point of a child: read the job, pin, run, write the result (or the skip reason)."""
    spec_path, result_path = argv
    job = read_job(Path(spec_path))
    pin_cores(list(job.cores))
    try:
        result = run_job(job)
    except RowSkippedError as err:
        result = {"skipped": str(err)}
    Path(result_path).write_text(json.dumps(result))
    return 0
