"""Child process: the reference GEMM and the bertjax rows (training step or inference forward).

The training row is the real training code: `create_train_state` + `make_train_step` with
`make_optimizer` (AdamW, clipping, schedule) under `SingleDevice().compile_step` (jit, state
donated). The inference row jits the model's forward at the masked positions, dropout off.

    python -m bertjax.bench.jax_rows SPEC.json RESULT.json
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path
from typing import Any

from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.bench.timing import child_main, peak_rss_bytes, time_steps

GEMM_REPEATS = 5


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or platform.machine()


def device_info() -> dict[str, Any]:
    """What JAX runs on: platform ('cpu', 'gpu', 'tpu'), device kind, count, versions."""
    import jax

    device = jax.local_devices()[0]
    platform = "gpu" if device.platform in ("gpu", "cuda", "rocm") else device.platform
    return {
        "platform": platform,
        "device_kind": _cpu_model() if platform == "cpu" else device.device_kind,
        "device_count": jax.local_device_count(),
        "jax": jax.__version__,
    }


def measure_gemm(size: int | None, dtype: str | None) -> dict[str, Any]:
    """FLOP/s of one large square matmul through JAX: what this device reaches on the easiest
    workload (default float32 4096^2 on CPU, bfloat16 8192^2 elsewhere). Median of repeats."""
    import jax
    import jax.numpy as jnp

    cpu = jax.default_backend() == "cpu"
    size = size or (4096 if cpu else 8192)
    dtype = dtype or ("float32" if cpu else "bfloat16")
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


def bertjax_row(spec: dict[str, Any]) -> dict[str, Any]:
    """Time bertjax's training step (`spec['mode'] == 'train'`) or inference forward."""
    import jax
    from flax import nnx

    from bertjax.config import BertConfig
    from bertjax.model import BertForPreTraining
    from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
    from bertjax.train.parallel import SingleDevice
    from bertjax.train.step import create_train_state, make_train_step

    config = BertConfig(**spec["config"])
    host_batch = pretraining_batch(config, spec["batch"], spec["seq"], spec["predictions"],
                                   spec["seed"])
    strategy = SingleDevice()
    batch = strategy.shard_batch({k: host_batch[k] for k in MODEL_KEYS})
    model = BertForPreTraining(config, rngs=nnx.Rngs(spec["seed"]))
    parameters = sum(int(x.size) for x in jax.tree.leaves(nnx.state(model, nnx.Param)))
    last: dict[str, Any] = {}

    if spec["mode"] == "train":
        optim = OptimConfig(**spec["optim"])
        tx = make_optimizer(optim)
        prng = spec.get("prng_impl", "threefry2x32")
        graphdef, state = create_train_state(model, tx, spec["seed"], prng)
        del model
        dropout = config.hidden_dropout_prob > 0 or config.attention_probs_dropout_prob > 0
        train_step = strategy.compile_step(make_train_step(
            graphdef, tx, learning_rate_schedule(optim), dropout=dropout, prng_impl=prng))
        last["state"] = strategy.place_state(state)

        def step() -> Any:
            last["state"], last["out"] = train_step(last["state"], batch)
            return last["out"]
    else:
        graphdef, params = nnx.split(model, nnx.Param)
        del model
        params = jax.device_put(params, strategy.device)

        def logits(params: Any, batch: dict[str, jax.Array]) -> tuple[jax.Array, jax.Array]:
            out = nnx.merge(graphdef, params)(
                batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"], deterministic=True)
            return out.mlm_logits, out.nsp_logits  # (B, P, V), (B, 2)

        forward = jax.jit(logits)

        def step() -> Any:
            last["out"] = forward(params, batch)
            return last["out"]

    timings = time_steps(step, jax.block_until_ready, steps=spec["steps"], warmup=spec["warmup"])
    memory, memory_source = _peak_memory(strategy.device)
    loss = float(last["out"]["loss"]) if spec["mode"] == "train" else None
    return {
        "first_step_s": timings.first_step_s,
        "step_times_s": timings.step_times_s,
        "pipelined_step_s": timings.pipelined_step_s,
        "peak_memory_bytes": memory,
        "memory_source": memory_source,
        "loss": loss,
        "parameters": parameters,
        "matmul_precision": str(jax.config.jax_default_matmul_precision or "default"),
        "device": " ".join(dict.fromkeys(["jax", strategy.device.platform,
                                          strategy.device.device_kind])),  # "jax cpu", "jax gpu H100"
        "versions": {"jax": jax.__version__, "flax": _version("flax"), "optax": _version("optax")},
    }


def _version(name: str) -> str:
    from importlib.metadata import version

    return version(name)


def run_row(spec: dict[str, Any]) -> dict[str, Any]:
    """The child's job: `kind` 'probe' (the device), 'gemm' (the reference matmul) or 'bertjax'."""
    if spec["kind"] == "probe":
        return device_info()
    if spec["kind"] == "gemm":
        return measure_gemm(spec.get("size"), spec.get("dtype"))
    return bertjax_row(spec)


if __name__ == "__main__":
    sys.exit(child_main(run_row, sys.argv[1:]))
