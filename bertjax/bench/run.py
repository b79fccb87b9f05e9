"""Run `bertjax bench train|infer`: probe the device, measure the reference GEMM, run each row in
its own subprocess one after the other (never in parallel), then print the table and write JSON.

Every child gets the same threads: it is pinned to the same cores (XLA sizes its CPU pool by the
affinity), OMP/MKL/OPENBLAS_NUM_THREADS name that count, and torch calls `set_num_threads`. Each
child also gets empty compile caches (torch inductor and Triton in a fresh directory, JAX's
persistent cache off), so the first-step time is a cold compile in every row.

This process (the parent) imports neither JAX nor torch: initialising JAX's GPU backend here
would take the memory the children need.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import bertjax
from bertjax.bench.flops import counted_as, datasheet_peak, model_flops_per_token
from bertjax.bench.options import (
    HF_IMPLS,
    INSTALL_HINT,
    TORCH_IMPLS,
    BenchError,
    BenchSettings,
    Row,
)
from bertjax.bench.report import add_ratios, format_table, summarize_row
from bertjax.bench.stamp import write_result
from bertjax.bench.timing import THREAD_ENV, Gemm, Job, Pinning, Probe, RowSpec, write_job
from bertjax.common.console import to_stderr
from bertjax.train.schedule import OptimConfig

# AdamW as in BERT (OptimConfig's defaults), no warm-up, over `timing.SCHEDULE_STEPS` updates
BENCH_OPTIM = OptimConfig()
ERROR_TAIL_LINES = 25


class ChildFailedError(RuntimeError):
    """A child process exited without a result; the message is the end of its output."""


def _installed(module: str) -> bool:
    try:
        return find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def missing_requirement(row: Row, platform: str) -> str | None:
    """Why `row` cannot run on JAX's `platform`, or None when it can."""
    if row.impl not in TORCH_IMPLS:
        return None
    if not _installed("torch"):
        return f"torch is not installed; {INSTALL_HINT}"
    if row.impl in HF_IMPLS and not _installed("transformers"):
        return f"transformers is not installed; {INSTALL_HINT}"
    if platform not in ("cpu", "gpu"):
        return f"the torch rows run on CPU or CUDA, not on JAX's device ({platform})"
    return None


def child_env(threads: int, cache_dir: Path) -> dict[str, str]:
    """The environment of every child: same thread counts, bertjax importable, cold caches."""
    env = dict(os.environ)
    env.update({name: str(threads) for name in THREAD_ENV})
    root = str(Path(bertjax.__file__).resolve().parents[1])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    env["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir / "inductor")
    env["TRITON_CACHE_DIR"] = str(cache_dir / "triton")
    env["JAX_ENABLE_COMPILATION_CACHE"] = "false"
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_child(module: str, job: Job, workdir: Path) -> dict[str, Any]:
    """Run `python -m bertjax.bench.<module>` on `job` and return its JSON result."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_path, result_path = workdir / "spec.json", workdir / "result.json"
    write_job(job, spec_path)
    proc = subprocess.run(
        [sys.executable, "-m", f"bertjax.bench.{module}", str(spec_path), str(result_path)],
        env=child_env(job.threads, workdir / "cache"), capture_output=True, text=True, check=False,
    )
    if proc.returncode != 0 or not result_path.is_file():
        tail = (proc.stdout + proc.stderr).strip().splitlines()[-ERROR_TAIL_LINES:]
        raise ChildFailedError(f"exit status {proc.returncode}\n" + "\n".join(tail))
    return json.loads(result_path.read_text())


def _row_spec(s: BenchSettings, row: Row, platform: str, pinning: Pinning) -> RowSpec:
    """What a child needs to run `row`: the full model config, the batch shape, the optimizer."""
    assert s.batch is not None and s.predictions is not None, "resolve() first"
    assert s.steps is not None and s.warmup is not None, "resolve() first"
    return RowSpec(
        cores=pinning.cores, threads=pinning.threads, impl=row.impl, mode=s.mode, dtype=row.dtype,
        config=s.bert_config(row.dtype), seq=s.seq, batch=s.batch, predictions=s.predictions,
        steps=s.steps, warmup=s.warmup, seed=s.seed,
        optim=dataclasses.replace(BENCH_OPTIM, flatten=s.flat_optimizer),
        compile_backend=s.compile_backend, prng_impl=s.prng_impl,
        device="cuda" if platform == "gpu" else "cpu",
    )


def _run_row(s: BenchSettings, row: Row, platform: str, pinning: Pinning,
             workdir: Path) -> tuple[str, Any]:
    """('ran', raw result), ('skipped', reason) or ('failed', the end of the child's output)."""
    reason = missing_requirement(row, platform)
    if reason:
        return "skipped", reason
    module = "jax_rows" if row.impl == "bertjax" else "torch_rows"
    try:
        result = run_child(module, _row_spec(s, row, platform, pinning), workdir)
    except ChildFailedError as err:
        return "failed", str(err)
    return ("skipped", result["skipped"]) if "skipped" in result else ("ran", result)


def run_benchmark(
    settings: BenchSettings,
    *,
    print_fn: Callable[[str], None] = print,
    progress: Callable[[str], None] = to_stderr,
) -> dict[str, Any]:
    """Run every row of `settings`, print the table through `print_fn` and return the report
    (also written to `settings.json_path` when set). Raises BenchError for bad options."""
    if settings.mode not in ("train", "infer"):
        raise BenchError(f"mode must be 'train' or 'infer', got {settings.mode!r}")
    settings.check_threads()  # the rest needs the device's defaults: validated after the probe
    pinning = Pinning(cores=tuple(settings.cores()),
                      threads=settings.threads or len(settings.cores()))
    with tempfile.TemporaryDirectory(prefix="bertjax-bench-") as tmp:
        work = Path(tmp)
        try:
            device = run_child("jax_rows", Probe(pinning.cores, pinning.threads), work / "probe")
            s = settings.resolve(device["platform"])
            s.validate()
            progress(f"bench {s.mode}: {len(s.rows())} row(s) on {device['platform']} "
                     f"({device['device_kind']}), one subprocess each")
            start = time.perf_counter()
            assert s.gemm_size is not None and s.gemm_dtype is not None  # resolved
            gemm = run_child("jax_rows", Gemm(cores=pinning.cores, threads=pinning.threads,
                                              size=s.gemm_size, dtype=s.gemm_dtype), work / "gemm")
        except ChildFailedError as err:
            raise BenchError(f"JAX failed in a child process: {err}") from err
        progress(f"  reference GEMM {gemm['dtype']} {gemm['size']}^3: "
                 f"{gemm['flops_per_s'] / 1e9:,.1f} GFLOP/s ({time.perf_counter() - start:.1f} s)")
        raw, skipped, failed = _run_rows(s, device["platform"], pinning, work, progress)

    report = build_report(s, device, gemm, raw, skipped, failed)
    print_fn(format_table(report))
    if s.json_path:
        try:
            write_result(report, s.json_path, s.mode, accelerator=None
                         if device["platform"] == "cpu" else f"{device['device_kind']}")
        except OSError as err:  # checked before the run; the disk may still fill up
            raise BenchError(f"cannot write --json {s.json_path}: {err.strerror or err}; the "
                             "table above holds the numbers") from err
        progress(f"wrote {s.json_path}")
    return report


def _run_rows(
    s: BenchSettings, platform: str, pinning: Pinning, work: Path, progress: Callable[[str], None]
) -> tuple[list[tuple[Row, dict[str, Any]]], list[dict[str, str]], list[dict[str, str]]]:
    """Each row in its own child, one after the other: (ran, skipped, failed)."""
    rows = s.rows()
    raw, skipped, failed = [], [], []
    for index, row in enumerate(rows, 1):
        start = time.perf_counter()
        status, value = _run_row(s, row, platform, pinning, work / f"row{index}")
        if status == "ran":
            raw.append((row, value))
            note = f"{time.perf_counter() - start:.1f} s"
        elif status == "skipped":
            skipped.append({"row": row.name, "reason": value})
            note = f"skipped ({value})"
        else:
            failed.append({"row": row.name, "error": value})
            note = f"FAILED\n{value}"
        progress(f"  [{index}/{len(rows)}] {row.name}: {note}")
    return raw, skipped, failed


def build_report(
    s: BenchSettings,
    device: dict[str, Any],
    gemm: dict[str, Any],
    raw: list[tuple[Row, dict[str, Any]]],
    skipped: list[dict[str, str]],
    failed: list[dict[str, str]],
) -> dict[str, Any]:
    """Everything the run measured, derived and skipped, as one JSON-ready dict."""
    assert s.batch is not None and s.predictions is not None  # resolved
    config = s.bert_config()
    flops = model_flops_per_token(config, s.seq, s.predictions, training=s.mode == "train")
    peak = datasheet_peak(device["device_kind"]) if device["platform"] != "cpu" else None
    rows = [summarize_row(row, result, tokens_per_step=s.batch * s.seq, flops_per_token=flops,
                          gemm_flops_per_s=gemm["flops_per_s"],
                          peak_flops_per_s=peak[1] if peak else None) for row, result in raw]
    add_ratios(rows)
    cores = s.cores()
    torch_threads = sorted({result["torch_threads"] for _, result in raw if "torch_threads" in result})
    return {
        "benchmark": s.mode,
        "settings": s.to_json(),
        "config": dataclasses.asdict(config),
        "device": device,
        "threads": {
            "count": s.threads, "cores": cores, "env": dict.fromkeys(THREAD_ENV, str(s.threads)),
            "torch_threads": torch_threads,
            "description": f"{s.threads} thread(s) for XLA and torch alike: pinned to cores "
                           f"{_ranges(cores)} (XLA sizes its pool by the affinity), "
                           f"{'/'.join(n.split('_')[0] for n in THREAD_ENV)}_NUM_THREADS="
                           f"{s.threads}, torch.set_num_threads({s.threads})",
        },
        "model_flops_per_token": flops,
        "model_flops_counted_as": counted_as(config),
        "model_flops_note": f"{counted_as(config)} matmul FLOPs (bertjax.bench.flops."
                            "model_flops_per_token), the same for every row: MFU ratios equal "
                            "tokens/s ratios",
        "tokens_per_step": s.batch * s.seq,
        "gemm": gemm,
        "datasheet_peak": {"name": peak[0], "flops_per_s": peak[1], "dtype": "bfloat16 dense"}
        if peak else None,
        "rows": rows,
        "skipped": skipped,
        "failed": failed,
    }


def _ranges(cores: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    parts, start = [], None
    for i, core in enumerate(cores):
        start = core if start is None else start
        if i + 1 == len(cores) or cores[i + 1] != core + 1:
            parts.append(str(start) if start == core else f"{start}-{core}")
            start = None
    return ",".join(parts)
