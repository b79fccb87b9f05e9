"""Profile bertjax's training step (the bench's, `bertjax.bench.jax_rows`) and sum device time
by kernel name: where a step's time goes, in order.

    python scripts/profile_step.py --preset base --batch 256 --dtype bfloat16 --dropout 0.1 \
        --set attention_probs_dropout_prob=0 --out prof.json

`--split` instead times the step's forward pass (the loss) against forward + backward (its
gradient), jitted apart, no optimizer: medians of `--steps` calls after `--warmup`.

It traces `--steps` steps after a warm-up with `jax.profiler.trace(create_perfetto_trace=True)`,
reads the Perfetto JSON it writes and sums each complete event's duration per name on the
device's timelines (processes named `/device:GPU:*`; on a CPU, the XLA ops of the host, not
the runtime's events around them), then
prints the top kernels with their share of the traced device time and of the step's wall time.
Kernel names are grouped by a short stem (digits stripped) as well, so that one fusion kind's
many instances add up. It then traces `--steps` more with a sync after each, as the bench's
tokens/s column times them, and says where such a step's wall time goes (`step_timeline.py`:
the host's dispatch, the device's wait for its first kernel, idle gaps between kernels).

On a CPU the trace overstates every op that runs on several threads: on the 2-core bench machine
a lone 4096 x 256 x 1024 matmul ran 7.2 ms untraced and 15.5 ms traced, while single-threaded
ops (XLA's batched matmuls) keep their time. `--cores 1` runs the process on one core, where
every op is single-threaded and the trace adds 4-12% evenly (the bench's step, two runs: 1,215
and 1,244 ms untraced, 1,264 and 1,391 ms traced; 640 ms untraced on both cores): the shares it
prints are then the step's work. Rank CPU ops with it; confirm a change by timing the step
(`bertjax bench train`, or both versions compiled in one process, steps alternated).
"""

from __future__ import annotations

import argparse
import collections
import gzip
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jax

from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.bench.options import BenchSettings, available_cores
from bertjax.bench.timing import pin_cores
from bertjax.cli.bench import parse_override
from bertjax.train.assembly import assemble
from bertjax.train.host_memory import keep_freed_memory
from bertjax.train.parallel import SingleDevice
from bertjax.train.schedule import OptimConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling, imported as a module too
from step_timeline import Event, format_synced, stem, synced_steps  # noqa: E402

TOP = 30


def _device_pids(events: list[dict[str, Any]]) -> dict[int, str]:
    """Perfetto process ids of the accelerator timelines (or, with none, of the host's XLA ops)."""
    names = {e["pid"]: e["args"]["name"] for e in events
             if e.get("ph") == "M" and e.get("name") == "process_name"}
    devices = {pid: name for pid, name in names.items() if "/device:" in name}
    return devices or {pid: name for pid, name in names.items() if "/host:CPU" in name}


def _read(trace_path: Path) -> tuple[list[dict[str, Any]], dict[int, str]]:
    data = json.loads(gzip.decompress(trace_path.read_bytes()))
    events = data["traceEvents"] if isinstance(data, dict) else data
    return events, _device_pids(events)


def _device_events(events: list[dict[str, Any]],
                   pids: dict[int, str]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(line, event) for each complete event on the device timelines: "kernels" (the "Stream #N"
    threads of a GPU), "ops" (the "XLA Ops" thread: HLO names; on a CPU every XLA op of the
    host), "modules" (the "XLA Modules" thread)."""
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name" and e.get("pid") in pids}
    on_gpu = any(name.startswith("Stream") for name in threads.values())
    for e in events:
        if e.get("ph") != "X" or e.get("pid") not in pids or "dur" not in e:
            continue
        thread = threads.get((e["pid"], e.get("tid")), "")
        # on a CPU an XLA op's own event names its HLO op; the runtime's around them do not
        # ("ThunkExecutor::Execute" spans a whole step, "ParseArguments", "end: dot.3")
        line = ("kernels" if thread.startswith("Stream") else "ops" if "XLA Ops" in thread
                else "modules" if "XLA Modules" in thread else None) if on_gpu else (
            "ops" if e.get("args", {}).get("hlo_op") else None)
        if line:
            yield line, e


def kernel_times(trace_path: Path) -> tuple[dict[str, dict[str, float]], dict[int, str]]:
    """Summed microseconds per event name on the device timelines, by line (`_device_events`).
    Also the pids read."""
    events, pids = _read(trace_path)
    sums: dict[str, dict[str, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    for line, e in _device_events(events, pids):
        sums[line][e["name"]] += float(e["dur"])
    return {k: dict(v) for k, v in sums.items()}, pids


def step_events(trace_path: Path, step_name: str = "train_step"
                ) -> tuple[list[Event], list[Event], list[Event]]:
    """A trace's host calls of the jitted `step_name` ("PjitFunction(train_step)"), the device's
    kernels (a CPU's XLA ops) and every host event, as (start µs, duration µs, name)."""
    events, pids = _read(trace_path)
    device, seen = collections.defaultdict(list), set()
    for line, e in _device_events(events, pids):
        device[line].append((float(e["ts"]), float(e["dur"]), e["name"]))
        seen.add(id(e))
    on_gpu = bool(device.get("kernels"))  # a GPU's host is its own process; a CPU's is not
    host = [(float(e["ts"]), float(e["dur"]), e["name"]) for e in events
            if e.get("ph") == "X" and "dur" in e
            and (e.get("pid") not in pids if on_gpu else id(e) not in seen)]
    calls = [h for h in host if h[2] == f"PjitFunction({step_name})"]
    return calls, device.get("kernels") or device.get("ops", []), host


def synced_timeline(trace_path: Path, step_name: str = "train_step") -> dict[str, Any]:
    """`step_timeline.synced_steps` of a trace of synced steps (`step_events`)."""
    return synced_steps(*step_events(trace_path, step_name))


def profiler_options() -> Any:
    """`jax.profiler` options for a step's trace: the host's runtime events, no Python calls
    (tracing them would slow the host ten times)."""
    options = jax.profiler.ProfileOptions()
    options.python_tracer_level = 0
    options.host_tracer_level = 1
    return options


def profile(settings: BenchSettings, steps: int, warmup: int, out_dir: Path) -> dict[str, Any]:
    s = settings.resolve(jax.default_backend())
    config = s.bert_config(s.dtypes[0])
    strategy = SingleDevice()
    host = pretraining_batch(config, s.batch, s.seq, s.predictions, s.seed)
    batch = strategy.shard_batch({k: host[k] for k in MODEL_KEYS})
    from flax import nnx

    from bertjax.heads import BertForPreTraining

    training = assemble(BertForPreTraining(config, rngs=nnx.Rngs(0)),
                        OptimConfig(flatten=s.flat_optimizer), strategy, steps=1_000_000, seed=0,
                        prng_impl=s.prng_impl)
    state = strategy.place_state(training.state)
    for _ in range(warmup):
        state, metrics = training.train_step(state, batch)
    jax.block_until_ready(metrics)
    start = time.perf_counter()
    for _ in range(steps):  # untraced, back to back: the step rate the trace should explain
        state, metrics = training.train_step(state, batch)
    jax.block_until_ready(metrics)
    untraced = (time.perf_counter() - start) / steps
    options = profiler_options()
    start = time.perf_counter()
    with jax.profiler.trace(str(out_dir / "pipelined"), create_perfetto_trace=True,
                            profiler_options=options):
        for _ in range(steps):
            state, metrics = training.train_step(state, batch)
        jax.block_until_ready(metrics)
    wall = (time.perf_counter() - start) / steps
    synced_walls = []
    with jax.profiler.trace(str(out_dir / "synced"), create_perfetto_trace=True,
                            profiler_options=options):
        for _ in range(steps):  # as the bench's tokens/s column: a sync after each step
            start = time.perf_counter()
            state, metrics = training.train_step(state, batch)
            jax.block_until_ready(metrics)
            synced_walls.append(time.perf_counter() - start)
    trace = next((out_dir / "pipelined").rglob("perfetto_trace.json.gz"))
    lines, pids = kernel_times(trace)
    main_line = "kernels" if "kernels" in lines else "ops"
    report: dict[str, Any] = {
        "config": {"preset": s.preset, "batch": s.batch, "seq": s.seq, "dtype": config.dtype,
                   "dropout": [config.hidden_dropout_prob, config.attention_probs_dropout_prob],
                   "attn_implementation": config.attn_implementation, "prng": s.prng_impl,
                   "overrides": dict(s.overrides), "flat_optimizer": s.flat_optimizer},
        "device": str(jax.devices()[0].device_kind),
        "timelines": sorted(pids.values()),
        "traced_steps": steps,
        "wall_ms_per_step_traced": 1e3 * wall,
        "wall_ms_per_step_untraced": 1e3 * untraced,
        "device_ms_per_step": sum(lines.get(main_line, {}).values()) / steps / 1e3,
        "synced": {"wall_ms_per_step_traced": 1e3 * statistics.median(synced_walls),
                   **synced_timeline(next((out_dir / "synced").rglob("perfetto_trace.json.gz")))},
    }
    for line, sums in lines.items():
        stems: dict[str, float] = collections.defaultdict(float)
        for name, us in sums.items():
            stems[stem(name)] += us
        report[f"{line}_us_per_step"] = _per_step(sums, steps)
        report[f"{line}_stems_us_per_step"] = _per_step(stems, steps)
    return report


def forward_backward_split(settings: BenchSettings, steps: int, warmup: int) -> dict[str, float]:
    """Median ms of the jitted pre-training loss and of its gradient on the bench's batch."""
    from flax import nnx

    from bertjax.heads import BertForPreTraining
    from bertjax.train.objectives import PRETRAINING

    s = settings.resolve(jax.default_backend())
    config = s.bert_config(s.dtypes[0])
    host = pretraining_batch(config, s.batch, s.seq, s.predictions, s.seed)
    batch = {k: jax.numpy.asarray(v) for k, v in host.items()}
    graphdef, params = nnx.split(BertForPreTraining(config, rngs=nnx.Rngs(0)), nnx.Param)
    counts = PRETRAINING.counts(batch)

    def loss(p: Any) -> jax.Array:
        return PRETRAINING.loss(PRETRAINING.forward_sums(nnx.merge(graphdef, p), batch, None), counts)

    def median_ms(fn: Any) -> float:
        for _ in range(warmup + 1):
            jax.block_until_ready(fn(params))
        times = []
        for _ in range(steps):
            start = time.perf_counter()
            jax.block_until_ready(fn(params))
            times.append(time.perf_counter() - start)
        return 1e3 * sorted(times)[len(times) // 2]

    forward, both = median_ms(jax.jit(loss)), median_ms(jax.jit(jax.grad(loss)))
    return {"forward_ms": forward, "forward_backward_ms": both,
            "backward_over_forward": (both - forward) / forward}


def _per_step(sums: dict[str, float], steps: int) -> dict[str, float]:
    return dict(sorted(((k, v / steps) for k, v in sums.items()), key=lambda kv: -kv[1]))


def print_report(report: dict[str, Any]) -> None:
    c = report["config"]
    total = report["device_ms_per_step"] * 1e3
    print(f"profile: {report['device']} {c}; wall {report['wall_ms_per_step_untraced']:.1f} "
          f"ms/step ({report['wall_ms_per_step_traced']:.1f} traced), device busy "
          f"{report['device_ms_per_step']:.1f} ms/step on "
          f"{', '.join(report['timelines'])}")
    for key in [k for k in report if k.endswith("_us_per_step")]:
        print(f"  top {TOP} by {key.removesuffix('_us_per_step')}: us/step  % of device time")
        for name, us in list(report[key].items())[:TOP]:
            print(f"    {us:9.1f}  {100 * us / total:5.1f}%  {name[:110]}")
    print(f"  synced: wall {report['synced']['wall_ms_per_step_traced']:.1f} ms/step traced")
    print("\n".join(format_synced(report["synced"])))


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default=None)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--batch", type=int, default=None)
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--dropout", type=float, default=None)
    parser.add_argument("--prng-impl", default="threefry2x32")
    parser.add_argument("--flat-optimizer", action="store_true",
                        help="the optimizer over one vector (the GPU recipe's)")
    parser.add_argument("--set", dest="overrides", action="append", default=[], type=parse_override)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--out", default=None, help="write the report as JSON here")
    parser.add_argument("--split", action="store_true",
                        help="time the forward against forward + backward instead of profiling")
    parser.add_argument("--cores", type=int, default=None,
                        help="run on this many of the process's cores (Linux), set before JAX "
                             "starts: 1 makes a CPU trace honest")
    args = parser.parse_args(argv)
    if args.cores is not None:
        if not hasattr(os, "sched_setaffinity"):
            parser.error("--cores needs Linux (os.sched_setaffinity); run without it, or pin the "
                         "process with the system's own tool")
        cores = available_cores()
        if not 1 <= args.cores <= len(cores):
            parser.error(f"--cores takes 1 to {len(cores)} (this process's cores), not {args.cores}")
        pin_cores(cores[:args.cores])  # XLA sizes its thread pool from this
    keep_freed_memory()  # as the command line does, before JAX starts
    settings = BenchSettings(preset=args.preset, seq=args.seq, batch=args.batch,
                             dtypes=(args.dtype,), dropout=args.dropout, prng_impl=args.prng_impl,
                             overrides=tuple(args.overrides), flat_optimizer=args.flat_optimizer)
    if args.split:
        split = forward_backward_split(settings, args.steps, args.warmup)
        print(f"forward {split['forward_ms']:.0f} ms, forward + backward "
              f"{split['forward_backward_ms']:.0f} ms: the backward is "
              f"{split['backward_over_forward']:.2f}x the forward")
        return 0
    with tempfile.TemporaryDirectory(prefix="bertjax-profile-") as tmp:
        report = profile(settings, args.steps, args.warmup, Path(tmp))
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1) + "\n")
    print_report(report)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
