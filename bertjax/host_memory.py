"""Host memory for XLA on a CPU: keep freed blocks for reuse instead of handing them back.

XLA's CPU runtime allocates the temporaries of each execution as one block (854 MB for the bench's
training step of `mini`, seq 128, batch 32) and frees it when the step ends. glibc serves a block
that large with a fresh `mmap` and unmaps it on `free`, so every step page-faults its whole
temporary memory again: 208k faults and ~370 ms of kernel time per step on two cores, with the
first touches landing inside the matmuls. `keep_freed_memory()` asks glibc to serve large blocks
from one heap and keep it (`mallopt`: one arena, no `mmap`, trim threshold 2 GiB), so the next step
reuses the same, already mapped pages. `bertjax bench train --impl bertjax --dtype float32` on
a 2-core Intel Xeon (docs/design.md, "Speed"): 958 -> 785 ms a step, peak RSS 1.54 -> 3.81 GiB.
The freed blocks stay mapped, and when a small allocation splits one the next is placed anew:
a loop of 100 such steps counting each step's faults (`getrusage`) saw 84 steps without any.

It has to run before JAX starts its thread pools (a thread keeps the malloc arena it first
allocated in), so the command line calls it first thing (for every command that computes with
JAX); a Python user who trains on a CPU calls it before touching JAX. It imports no JAX and
changes nothing on a machine with an accelerator plugin installed (JAX would run there, with
other memory), outside glibc, once JAX has started, or with `BERTJAX_KEEP_FREED_MEMORY=0`.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import pkgutil
import platform
import sys

DISABLE_ENV = "BERTJAX_KEEP_FREED_MEMORY"
# glibc's mallopt parameters (malloc.h)
M_TRIM_THRESHOLD, M_MMAP_MAX, M_ARENA_MAX = -1, -4, -8
TRIM_THRESHOLD = 2**31 - 1  # the largest int mallopt takes: keep up to 2 GiB free at the heap's top
TPU_PACKAGES = ("libtpu", "libtpu-nightly")  # JAX's TPU backend: a package, not a plugin


def _installed_plugins() -> list[str]:
    """JAX's PJRT plugins as JAX discovers them (`jax_plugins` entry points and modules of the
    `jax_plugins` namespace package: CUDA, ROCm, Metal, ...) and the TPU runtime, found without
    importing JAX."""
    found = [e.name for e in importlib.metadata.entry_points(group="jax_plugins")]
    spec = importlib.util.find_spec("jax_plugins")
    if spec is not None and spec.submodule_search_locations:
        found += [m.name for m in pkgutil.iter_modules(spec.submodule_search_locations)]
    for name in TPU_PACKAGES:
        try:
            importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found.append(name)
    return found


def _accelerator_plugin() -> str | None:
    """The first installed JAX accelerator plugin, unless JAX_PLATFORMS puts the CPU first."""
    if os.environ.get("JAX_PLATFORMS", "").split(",")[0].strip() == "cpu":
        return None
    plugins = _installed_plugins()
    return plugins[0] if plugins else None


def _jax_started() -> bool:
    """Whether JAX has opened its backends (and started the thread pools) in this process.

    The one private JAX import in bertjax, on purpose: JAX offers no public way to ask this
    without opening the backends itself (`jax.extend.backend` has none as of 0.10), and asking
    must not start them. If the module moves, this answers True, so `keep_freed_memory` leaves
    glibc as it is: only the CPU speed-up is lost, never correctness.
    """
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge  # private: see the docstring
    except ImportError:
        return True
    return bool(getattr(xla_bridge, "backends_are_initialized", lambda: True)())


def keep_freed_memory() -> str:
    """Make glibc keep large freed blocks for reuse (see the module docstring); call before JAX
    starts. Returns what was done: "kept", or why not ("disabled by ...", "not glibc ...",
    "accelerator plugin ...", "JAX has started ...")."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return f"disabled by {DISABLE_ENV}=0"
    libc_name, _ = platform.libc_ver()
    if platform.system() != "Linux" or libc_name != "glibc":
        return f"not glibc ({platform.system()} {libc_name or 'unknown libc'}): left as it is"
    if _jax_started():
        return "JAX has started already (its threads keep their arenas): left as it is"
    plugin = _accelerator_plugin()
    if plugin:
        return f"accelerator plugin {plugin} installed: left as it is"
    libc = ctypes.CDLL(None)  # the C library already loaded into this process
    done = []
    for param, value in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if libc.mallopt(param, value) != 1:
            return f"mallopt({param}, {value}) refused; applied before it: {done or 'nothing'}"
        done.append(param)
    return "kept"
