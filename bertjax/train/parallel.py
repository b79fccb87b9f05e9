"""Parallel strategies behind one interface, so the same train step runs under each.

    none   one device: `jax.jit`, state donated.
    pmap   classic data parallelism: state replicated on every local device, the batch split
           along its first axis, gradients summed with `lax.psum` inside the step.
    mesh   `jax.jit` over a `Mesh(("data", "fsdp"))`: the batch is one global array sharded over
           both axes; with fsdp > 1 every parameter (and its optimizer moments) is sharded along
           its largest dimension divisible by the fsdp size. XLA inserts the collectives.

Both pmap and mesh span processes after `jax.distributed.initialize`: each process passes its own
rows of the global batch (`shard_batch`), and `host_state` gathers one full copy of the state on
every process for checkpoints.

On a GPU, none and mesh compile the steps with `GPU_COMPILER_OPTIONS` (pmap takes no compiler
options).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from jax.sharding import Mesh, NamedSharding
from jax.sharding import PartitionSpec as P

from bertjax.errors import InputError
from bertjax.train.choices import PARALLEL_CHOICES

NONE, PMAP, MESH = PARALLEL_CHOICES  # the names, written once (bertjax.train.choices)

# XLA options of the train and eval steps on a GPU (`jax.jit(compiler_options=...)`), each left
# out where XLA_FLAGS names it (the user's choice wins). Without Triton's matmul fusions cuBLAS
# takes every matmul, autotuned over far fewer candidates: a much shorter compile and a step no
# slower, measured on an H100 (docs/benchmarks.md, "Each change measured").
GPU_COMPILER_OPTIONS: dict[str, Any] = {"xla_gpu_enable_triton_gemm": False}


def compiler_options(platform: str) -> dict[str, Any] | None:
    """The options the steps compile with on `platform` ("cpu", "gpu", "tpu"): on a GPU
    `GPU_COMPILER_OPTIONS` less those XLA_FLAGS sets; None (XLA's defaults) elsewhere."""
    if platform != "gpu":
        return None
    named = {flag.split("=", 1)[0].lstrip("-") for flag in os.environ.get("XLA_FLAGS", "").split()}
    return {k: v for k, v in GPU_COMPILER_OPTIONS.items() if k not in named} or None


def platform_of(device: Any) -> str:
    """A device's platform as JAX's backends name it: "gpu" for CUDA and ROCm devices."""
    return "gpu" if device.platform in ("gpu", "cuda", "rocm") else device.platform


def _check_divisible(kind: str, batch_size: int, devices: int, grad_accum_steps: int) -> None:
    if batch_size % (devices * grad_accum_steps):
        what = f"{devices} device(s)" + (
            f" x {grad_accum_steps} accumulation steps" if grad_accum_steps > 1 else "")
        raise InputError(
            f"batch size {batch_size} is not divisible by the {what} of parallel={kind!r}; use a "
            f"batch size that is a multiple of {devices * grad_accum_steps}"
        )


def _first_local(x: jax.Array) -> np.ndarray:
    return np.asarray(x.addressable_data(0))


class SingleDevice:
    """parallel='none': one device of one process."""

    kind = NONE
    axis_name = None

    def __init__(self) -> None:
        if jax.process_count() > 1:
            raise InputError("parallel='none' runs on one device of one process; with several "
                             "processes use parallel='pmap' or parallel='mesh'")
        self.device = jax.local_devices()[0]
        self.num_devices = 1
        self.compiler_options = compiler_options(platform_of(self.device))

    def check_batch_size(self, batch_size: int, grad_accum_steps: int = 1) -> None:
        _check_divisible(self.kind, batch_size, 1, grad_accum_steps)

    def place_state(self, state: Any) -> Any:
        return jax.device_put(state, self.device)

    def compile_step(self, fn: Callable, state: Any) -> Callable:
        """`fn(state, batch)` jitted, the state donated."""
        return jax.jit(fn, donate_argnums=0, compiler_options=self.compiler_options)

    def compile_eval(self, fn: Callable) -> Callable:
        return jax.jit(fn, compiler_options=self.compiler_options)

    def shard_batch(self, batch: dict[str, np.ndarray]) -> Any:
        return jax.device_put(batch, self.device)

    def host_state(self, state: Any) -> Any:
        return jax.device_get(state)

    def host_metrics(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return {k: float(v) for k, v in jax.device_get(metrics).items()}


class Pmap:
    """parallel='pmap': replicated state, per-device batch slices, `psum` over `axis_name`."""

    kind = PMAP
    axis_name = "batch"

    compiler_options = None  # jax.pmap takes none: XLA_FLAGS sets them for pmap

    def __init__(self) -> None:
        # pmap must be given every process's devices (in the same order on each process), or
        # each process maps and psums over its own devices only and the replicas drift apart.
        self.devices = jax.devices()
        self.local_devices = [d for d in self.devices if d.process_index == jax.process_index()]
        self.num_local = len(self.local_devices)
        self.num_devices = jax.device_count()
        mesh = Mesh(np.array(self.local_devices), (self.axis_name,))
        self.sharding = NamedSharding(mesh, P(self.axis_name))

    def check_batch_size(self, batch_size: int, grad_accum_steps: int = 1) -> None:
        _check_divisible(self.kind, batch_size, self.num_devices, grad_accum_steps)

    def place_state(self, state: Any) -> Any:
        n = self.num_local
        return jax.tree.map(
            lambda x: jax.device_put(np.broadcast_to(np.asarray(x), (n, *np.shape(x))),
                                     self.sharding), state)  # (devices, ...)

    def compile_step(self, fn: Callable, state: Any) -> Callable:
        return jax.pmap(fn, axis_name=self.axis_name, devices=self.devices, donate_argnums=0)

    def compile_eval(self, fn: Callable) -> Callable:
        return jax.pmap(fn, axis_name=self.axis_name, devices=self.devices)

    def shard_batch(self, batch: dict[str, np.ndarray]) -> Any:
        n = self.num_local
        return jax.tree.map(
            lambda x: jax.device_put(x.reshape(n, x.shape[0] // n, *x.shape[1:]), self.sharding),
            batch)  # (B, ...) -> (devices, B / devices, ...)

    def host_state(self, state: Any) -> Any:
        return jax.tree.map(_first_local, state)  # replicas are identical

    def host_metrics(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return {k: float(_first_local(v)[0]) for k, v in metrics.items()}


class MeshStrategy:
    """parallel='mesh': one jit over a (data, fsdp) mesh of every device of every process."""

    kind = MESH
    axis_name = None  # XLA partitions the global computation; no named axis in the step

    def __init__(self, fsdp: int = 1) -> None:
        devices = np.array(jax.devices())
        if fsdp < 1 or devices.size % fsdp:
            raise InputError(f"fsdp={fsdp} does not divide the {devices.size} devices; choose a "
                             f"divisor of {devices.size}")
        self.fsdp = fsdp
        self.num_devices = devices.size
        self.mesh = Mesh(devices.reshape(devices.size // fsdp, fsdp), ("data", "fsdp"))
        self.batch_sharding = NamedSharding(self.mesh, P(("data", "fsdp")))
        self.replicated = NamedSharding(self.mesh, P())
        self.compiler_options = compiler_options(platform_of(devices.flat[0]))

    def check_batch_size(self, batch_size: int, grad_accum_steps: int = 1) -> None:
        _check_divisible(self.kind, batch_size, self.num_devices, grad_accum_steps)

    def spec(self, shape: tuple[int, ...]) -> P:
        """Shard the largest dimension divisible by the fsdp size; replicate otherwise."""
        if self.fsdp == 1 or not shape:
            return P()
        dims = [d for d in np.argsort(shape, kind="stable")[::-1] if shape[d] % self.fsdp == 0]
        if not dims:
            return P()
        spec: list[str | None] = [None] * len(shape)
        spec[int(dims[0])] = "fsdp"
        return P(*spec)

    def state_sharding(self, state: Any) -> Any:
        """Each leaf's sharding, from its shape alone (`spec`)."""
        return jax.tree.map(lambda x: NamedSharding(self.mesh, self.spec(np.shape(x))), state)

    def place_state(self, state: Any) -> Any:
        def put(x: Any, sharding: NamedSharding) -> jax.Array:
            host = np.asarray(x)
            return jax.make_array_from_callback(host.shape, sharding, lambda index: host[index])

        return jax.tree.map(put, state, self.state_sharding(state))

    def compile_step(self, fn: Callable, state: Any) -> Callable:
        """`fn(state, batch)` jitted over the mesh, the state donated and kept in the shardings
        `place_state` gives `state` (any state of the same shapes)."""
        return jax.jit(fn, out_shardings=(self.state_sharding(state), self.replicated),
                       donate_argnums=0, compiler_options=self.compiler_options)

    def compile_eval(self, fn: Callable) -> Callable:
        return jax.jit(fn, out_shardings=self.replicated, compiler_options=self.compiler_options)

    def shard_batch(self, batch: dict[str, np.ndarray]) -> Any:
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(self.batch_sharding, x), batch)

    def host_state(self, state: Any) -> Any:
        def gather(x: jax.Array) -> np.ndarray:
            if x.is_fully_addressable:
                return np.asarray(x)
            if x.is_fully_replicated:
                return _first_local(x)
            from jax.experimental import multihost_utils

            return np.asarray(multihost_utils.process_allgather(x, tiled=True))

        return jax.tree.map(gather, state)

    def host_metrics(self, metrics: dict[str, jax.Array]) -> dict[str, float]:
        return {k: float(_first_local(v)) for k, v in metrics.items()}


STRATEGIES: dict[str, type] = {cls.kind: cls for cls in (SingleDevice, Pmap, MeshStrategy)}


def make_strategy(kind: str = "none", fsdp: int = 1) -> SingleDevice | Pmap | MeshStrategy:
    """The strategy named by `--train.parallel` (`fsdp` only applies to 'mesh')."""
    if kind not in STRATEGIES:
        raise InputError(f"unknown parallel strategy {kind!r}; choose one of {PARALLEL_CHOICES}")
    return MeshStrategy(fsdp) if kind == "mesh" else STRATEGIES[kind]()
