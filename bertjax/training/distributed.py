"""Multi-host start-up: `jax.distributed.initialize`, with gloo collectives on the CPU."""

from __future__ import annotations


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
