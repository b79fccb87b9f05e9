"""Multi-host: start-up through `jax.distributed.initialize` (gloo collectives on the CPU), a
barrier, and the few host-side collectives the pre-training job needs; each is a no-op (or a
plain copy) in a single process."""

from __future__ import annotations

import json
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from jax.experimental import multihost_utils

from bertjax.errors import InputError

_BARRIERS: dict[str, int] = {}  # name -> times this process passed it


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """Join the run; call before anything touches a JAX device.

    CPU processes need gloo for cross-process collectives (the default has none); the setting
    only affects the CPU backend, so it is harmless on GPU/TPU hosts.
    """
    if not 0 <= process_id < num_processes:
        raise InputError(f"process id {process_id} must be in [0, {num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id)


def barrier(name: str, timeout_s: float = 3600.0) -> None:
    """Wait until every process reaches `barrier(name)`; a no-op in a single process.

    Uses the coordination service (not a device collective), so one process may spend long
    minutes alone (e.g. training the vocabulary) without tripping gloo's 30 s rendezvous timeout.
    Every process must pass the same names in the same order; a name may be used repeatedly.
    """
    if jax.process_count() == 1:
        return
    count = _BARRIERS[name] = _BARRIERS.get(name, 0) + 1  # barrier ids must be unique
    ocp.multihost.get_barrier_sync_fn()(key=f"{name}_{count}", timeout_ms=int(timeout_s * 1000))


def any_process(flag: bool) -> bool:
    """True on every process if `flag` is true on any (a collective when there are several)."""
    if jax.process_count() == 1:
        return flag
    return bool(np.any(multihost_utils.process_allgather(np.array([flag]))))


def gather_rows(batches: list[dict[str, np.ndarray]], keys: tuple[str, ...]
                ) -> list[dict[str, np.ndarray]]:
    """`batches` with the `keys` arrays of every process's rows (process order), other keys
    dropped: a statistic of the global batch (a baseline), not only this process's rows.
    Arrays are (local rows, ...) in each process."""
    if jax.process_count() == 1:
        return [{k: b[k] for k in keys} for b in batches]
    local = {k: np.stack([b[k] for b in batches]) for k in keys}  # (batches, B_local, ...)
    gathered = multihost_utils.process_allgather(local)  # (processes, batches, B_local, ...)
    return [
        {k: np.asarray(v[:, i]).reshape(-1, *v.shape[3:]) for k, v in gathered.items()}
        for i in range(len(batches))
    ]  # each (processes * B_local, ...)


def allgather_json(value: Any) -> list[Any]:
    """Every process's JSON-serialisable `value`, in process order."""
    if jax.process_count() == 1:
        return [value]
    raw = np.frombuffer(json.dumps(value).encode(), np.uint8)
    lengths = multihost_utils.process_allgather(np.array([raw.size], np.int64))
    padded = np.zeros(int(np.max(lengths)), np.uint8)
    padded[: raw.size] = raw
    everything = multihost_utils.process_allgather(padded)  # (processes, max_len)
    return [
        json.loads(bytes(everything[i, : int(lengths[i][0])]).decode())
        for i in range(everything.shape[0])
    ]
