"""The step-timing loop and the child-process protocol the JAX and torch rows share.

A child is `python -m bertjax.bench.<module> SPEC.json RESULT.json`: it pins itself to the cores
the spec names before importing any framework, runs one row, and writes the raw measurements
(or `{"skipped": reason}`) as JSON. Derived numbers (tokens/s, ratios, MFU) are the parent's job
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

# Environment variables that size the OpenMP / BLAS thread pools of torch and numpy; the parent
# sets them for every child. XLA's CPU thread pool is sized by the process's CPU affinity.
THREAD_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class RowSkippedError(Exception):
    """A row that cannot run here (a missing package, no such device); the message says why."""


@dataclasses.dataclass
class Timings:
    """Raw times of one row, in seconds."""

    first_step_s: float  # the first call: compilation (jit, torch.compile) included
    step_times_s: list[float]  # each timed step, with a device sync after it
    pipelined_step_s: float  # the same number of steps back to back, one sync at the end, / steps


def time_steps(
    step: Callable[[], Any], sync: Callable[[Any], None], *, steps: int, warmup: int
) -> Timings:
    """Time `step()` (which advances its own state): first call, `warmup` untimed calls, `steps`
    calls with `sync(output)` after each, then `steps` calls with one sync at the end."""
    start = time.perf_counter()
    sync(step())
    first = time.perf_counter() - start
    for _ in range(warmup):
        sync(step())
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        sync(step())
        times.append(time.perf_counter() - start)
    start = time.perf_counter()
    out = None
    for _ in range(steps):
        out = step()
    sync(out)
    return Timings(first, times, (time.perf_counter() - start) / steps)


def peak_rss_bytes() -> int:
    """Peak resident memory of this process (Linux reports kilobytes, macOS bytes)."""
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return int(peak if sys.platform == "darwin" else peak * 1024)


def pin_cores(cores: list[int]) -> None:
    """Restrict this process to `cores` (before a framework import sizes its thread pools)."""
    if cores and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, set(cores))


def child_main(run_row: Callable[[dict[str, Any]], dict[str, Any]], argv: list[str]) -> int:
    """Entry point of a child: read the spec, pin, run, write the result (or the skip reason)."""
    spec_path, result_path = argv
    spec = json.loads(Path(spec_path).read_text())
    pin_cores(spec.get("cores", []))
    try:
        result = run_row(spec)
    except RowSkippedError as err:
        result = {"skipped": str(err)}
    Path(result_path).write_text(json.dumps(result))
    return 0
