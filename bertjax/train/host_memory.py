"""Host memory for XLA on a CPU: keep freed blocks for reuse instead of handing them back.

XLA's CPU runtime allocates the temporaries of each execution as one large block and frees it when
the step ends. glibc serves a block that large with a fresh `mmap` and unmaps it on `free`, so
every step page-faults its whole temporary memory again, inside the matmuls. `keep_freed_memory()`
asks glibc to serve large blocks from one heap and keep it (`mallopt`: one arena, no `mmap`, a
2 GiB trim threshold), so the next step reuses pages already mapped: faster steps for more
resident memory (measured in docs/design.md, "Speed").

A process-wide setting, so the library never applies it on its own: the command line calls it
first thing for every command that computes with JAX, and a custom training loop on a CPU opts in
with one call before its first JAX computation (its threads keep the malloc arena they first
allocated in). It imports no JAX and changes nothing on a machine with a JAX accelerator plugin
installed (JAX runs there, with other memory), outside glibc, or with
`BERTJAX_KEEP_FREED_MEMORY=0`.
"""

from __future__ import annotations

import ctypes
import importlib.metadata
import importlib.util
import os
import pkgutil
import platform

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


def keep_freed_memory() -> str:
    """Make glibc keep large freed blocks for reuse (see the module docstring); call it before
    JAX computes anything (importing JAX is fine). Returns what was done: "kept", or why not
    ("disabled by ...", "not glibc ...", "accelerator plugin ...")."""
    if os.environ.get(DISABLE_ENV, "1") == "0":
        return f"disabled by {DISABLE_ENV}=0"
    libc_name, _ = platform.libc_ver()
    if platform.system() != "Linux" or libc_name != "glibc":
        return f"not glibc ({platform.system()} {libc_name or 'unknown libc'}): left as it is"
    plugin = _accelerator_plugin()
    if plugin:
        return f"accelerator plugin {plugin} installed: left as it is"
    libc = ctypes.CDLL(None)  # the C library already loaded into this process
    done: list[int] = []
    for param, value in ((M_ARENA_MAX, 1), (M_MMAP_MAX, 0), (M_TRIM_THRESHOLD, TRIM_THRESHOLD)):
        if libc.mallopt(param, value) != 1:
            return f"mallopt({param}, {value}) refused; applied before it: {done or 'nothing'}"
        done.append(param)
    return "kept"
