"""Child process: the device probe, the reference GEMM and the bertjax rows (training step or
inference forward).

The training row is the real training code: `bertjax.train.assembly.assemble` (the model, AdamW
with clipping and schedule, the train step compiled by `SingleDevice`, state donated), as
pre-training and fine-tuning build it. The inference row jits the model's forward at the masked
positions, dropout off. JAX is imported at the top: this module only ever runs as a child, which
pins its cores before JAX initialises its backend (on first use, not on import).

    python -m bertjax.bench.jax_rows SPEC.json RESULT.json
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.bench.stamp import cpu_name
from bertjax.bench.timing import (
    SCHEDULE_STEPS,
    Gemm,
    Job,
    Probe,
    RowSpec,
    child_main,
    peak_rss_bytes,
    time_steps,
)
from bertjax.heads import MODEL_CLASSES
from bertjax.train.assembly import assemble
from bertjax.train.host_memory import keep_freed_memory
from bertjax.train.objectives import MASKED_LM, PRETRAINING
from bertjax.train.parallel import SingleDevice, platform_of

GEMM_REPEATS = 5
HOST_MEMORY = "not set: imported, not run as the bench's child"


def device_info() -> dict[str, Any]:
    """What JAX runs on: platform ('cpu', 'gpu', 'tpu'), device kind, count, versions."""
    device = jax.local_devices()[0]
    kind = platform_of(device)
    return {
        "platform": kind,
        "device_kind": cpu_name() if kind == "cpu" else device.device_kind,
        "device_count": jax.local_device_count(),
        "jax": jax.__version__,
    }


def measure_gemm(size: int, dtype: str) -> dict[str, Any]:
    """FLOP/s of one large square matmul through JAX: what this device reaches on the easiest
    workload (by default float32 4096^2 on CPU, bfloat16 8192^2 elsewhere). Median of repeats."""
    ka, kb = jax.random.split(jax.random.key(0))
    a = jax.random.normal(ka, (size, size), dtype)  # (N, N)
    b = jax.random.normal(kb, (size, size), dtype)  # (N, N)
    matmul = jax.jit(jnp.matmul)
    matmul(a, b).block_until_ready()  # compile
    times = []
    for _ in range(GEMM_REPEATS):
        start = time.perf_counter()
        matmul(a, b).block_until_ready()
        times.append(time.perf_counter() - start)
    median = statistics.median(times)
    return {"size": size, "dtype": dtype, "median_s": median, "repeats": GEMM_REPEATS,
            "flops_per_s": 2 * size**3 / median}


def _peak_memory(device: Any) -> tuple[int, str]:
    stats = device.memory_stats() if hasattr(device, "memory_stats") else None
    if stats and "peak_bytes_in_use" in stats:
        return int(stats["peak_bytes_in_use"]), "jax device.memory_stats() peak_bytes_in_use"
    return peak_rss_bytes(), "peak RSS of the row's process"


Batch = dict[str, jax.Array]


def _training_step(spec: RowSpec, model: Any, strategy: SingleDevice,
                   batch: Batch) -> Callable[[], Any]:
    """One optimizer update per call on `batch`, the state carried over; returns the metrics."""
    objective = PRETRAINING if spec.config.family.next_sentence else MASKED_LM
    training = assemble(model, spec.optim, strategy, steps=SCHEDULE_STEPS, seed=spec.seed,
                        prng_impl=spec.prng_impl, objective=objective)
    state = [strategy.place_state(training.state)]

    def step() -> Any:
        state[0], metrics = training.train_step(state[0], batch)
        return metrics

    return step


def _inference_step(spec: RowSpec, model: Any, strategy: SingleDevice,
                    batch: Batch) -> Callable[[], Any]:
    """The jitted forward at the masked positions, dropout off; returns (MLM, NSP) logits (NSP:
    None for a family without the head)."""
    graphdef, params = nnx.split(model, nnx.Param)
    params = jax.device_put(params, strategy.device)

    def logits(params: Any, batch: Batch) -> tuple[jax.Array, jax.Array | None]:
        out = nnx.merge(graphdef, params)(
            batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
            batch["masked_positions"], deterministic=True)
        return out.mlm_logits, out.nsp_logits  # (B, P, V), (B, 2)

    forward = jax.jit(logits)
    return lambda: forward(params, batch)


def bertjax_row(spec: RowSpec) -> dict[str, Any]:
    """Time bertjax's training step (`spec.mode == 'train'`) or inference forward."""
    strategy = SingleDevice()
    host_batch = pretraining_batch(spec.config, spec.batch, spec.seq, spec.predictions, spec.seed)
    keys = MODEL_KEYS if spec.config.family.next_sentence else MODEL_KEYS[:-1]  # no NSP label
    batch = strategy.shard_batch({k: host_batch[k] for k in keys})
    # BERT's pre-training model; a family pre-trained without NSP (RoBERTa): its masked LM
    model = MODEL_CLASSES[spec.config.family.pretraining_class](spec.config,
                                                                rngs=nnx.Rngs(spec.seed))
    parameters = sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    model_class = f"{type(model).__name__} ({spec.config.model_type})"
    build = _training_step if spec.mode == "train" else _inference_step
    step = build(spec, model, strategy, batch)
    del model  # the step holds what it needs; the model's arrays go with the first donation
    last: list[Any] = [None]

    def timed_step() -> Any:
        last[0] = step()
        return last[0]

    timings = time_steps(timed_step, jax.block_until_ready, steps=spec.steps, warmup=spec.warmup)
    memory, memory_source = _peak_memory(strategy.device)
    return {
        "first_step_s": timings.first_step_s,
        "step_times_s": timings.step_times_s,
        "dispatch_times_s": timings.dispatch_times_s,
        "pipelined_step_s": timings.pipelined_step_s,
        "peak_memory_bytes": memory,
        "memory_source": memory_source,
        "loss": float(last[0]["loss"]) if spec.mode == "train" else None,
        "parameters": parameters,
        "model_class": model_class,
        "matmul_precision": str(jax.config.jax_default_matmul_precision  # type: ignore[attr-defined]
                                or "default"),
        "xla_options": {"XLA_FLAGS": os.environ.get("XLA_FLAGS", ""),  # the forward: a plain jit
                        "compiler_options": (strategy.compiler_options or {})
                        if spec.mode == "train" else {}},
        "host_memory": HOST_MEMORY,  # bertjax.train.host_memory.keep_freed_memory()
        "device": " ".join(dict.fromkeys(["jax", strategy.device.platform,
                                          strategy.device.device_kind])),  # "jax cpu", "jax gpu H100"
        "versions": {"jax": jax.__version__, "flax": version("flax"), "optax": version("optax")},
    }


def run_job(job: Job) -> dict[str, Any]:
    """The child's job: the device (`Probe`), the reference matmul (`Gemm`) or a bertjax row."""
    if isinstance(job, Probe):
        return device_info()
    if isinstance(job, Gemm):
        return measure_gemm(job.size, job.dtype)
    return bertjax_row(job)


if __name__ == "__main__":
    HOST_MEMORY = keep_freed_memory()  # as the command line does, before JAX starts
    sys.exit(child_main(run_job, sys.argv[1:]))
