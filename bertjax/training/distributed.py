"""Multi-host start-up: `jax.distributed.initialize`, with gloo collectives on the CPU."""

from __future__ import annotations

_BARRIERS: dict[str, int] = {}  # name -> times this process passed it


def initialize(coordinator_address: str, num_processes: int, process_id: int) -> None:
    """Join the run; call before anything touches a JAX device.

    CPU processes need gloo for cross-process collectives (the default has none); the setting
    only affects the CPU backend, so it is harmless on GPU/TPU hosts.
    """
    import jax

    if not 0 <= process_id < num_processes:
        raise ValueError(f"process id {process_id} must be in [0, {num_processes})")
    jax.config.update("jax_cpu_collectives_implementation", "gloo")
    jax.distributed.initialize(coordinator_address, num_processes, process_id)


def barrier(name: str, timeout_s: float = 3600.0) -> None:
    """Wait until every process reaches `barrier(name)`; a no-op in a single process.

    Uses the coordination service (not a device collective), so one process may spend long
    minutes alone (e.g. training the vocabulary) without tripping gloo's 30 s rendezvous timeout.
    Every process must pass the same names in the same order; a name may be used repeatedly.
    """
    import jax

    if jax.process_count() == 1:
        return
    import orbax.checkpoint as ocp

    count = _BARRIERS[name] = _BARRIERS.get(name, 0) + 1  # barrier ids must be unique
    ocp.multihost.get_barrier_sync_fn()(key=f"{name}_{count}", timeout_ms=int(timeout_s * 1000))
