"""How much memory this process may use, so that a batch size given as a number of token slots
(`--max-tokens`) is refused before any work when its batch cannot fit, instead of failing in the
middle of it (or being killed) for lack of memory.

The limit is the smallest of the machine's memory, its control group's (a container's) and the
process's own (`ulimit -v` and `-d`); what is available subtracts what is in use from each.

Imports nothing but the standard library: the command line's parser asks before JAX is imported.
"""

from __future__ import annotations

import os
import resource
from pathlib import Path

from bertjax.errors import InputError

# The least one token slot of a packed batch costs, whatever the model: its int32 inputs and
# packing arrays (about 40 bytes) and the smallest model's activations. A budget whose batch
# would need more memory than the process may use at this rate is refused when it is read.
TOKEN_BYTES_FLOOR = 64
_GIB = 1024**3
_CGROUP_V2 = Path("/sys/fs/cgroup")
_CGROUP_V1 = Path("/sys/fs/cgroup/memory")


def _read_int(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None  # "max": no limit


def _meminfo() -> dict[str, int]:
    """/proc/meminfo and /proc/self/status's sizes in bytes, by name (empty where absent)."""
    sizes = {}
    for source in ("/proc/meminfo", "/proc/self/status"):
        try:
            lines = Path(source).read_text().splitlines()
        except OSError:
            continue
        for line in lines:
            name, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
                sizes[name] = int(parts[0]) * 1024
    return sizes


def _limits(sizes: dict[str, int]) -> list[tuple[int, int]]:
    """(limit, in use) of every bound on this process's memory that is set."""
    bounds = []
    try:
        total = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        bounds.append((total, total - sizes.get("MemAvailable", total)))
    except (ValueError, OSError):
        pass
    for limit_file, usage_file in ((_CGROUP_V2 / "memory.max", _CGROUP_V2 / "memory.current"),
                                   (_CGROUP_V1 / "memory.limit_in_bytes",
                                    _CGROUP_V1 / "memory.usage_in_bytes")):
        limit = _read_int(limit_file)
        if limit is not None and limit < 2**60:  # v1 says "no limit" with a huge number
            bounds.append((limit, _read_int(usage_file) or 0))
    for which, used in ((resource.RLIMIT_AS, "VmSize"), (resource.RLIMIT_DATA, "VmData")):
        soft, _ = resource.getrlimit(which)
        if soft != resource.RLIM_INFINITY:
            bounds.append((soft, sizes.get(used, 0)))
    return bounds


def memory_limit() -> int:
    """The most memory this process may ever use, in bytes."""
    bounds = _limits(_meminfo())
    return min((limit for limit, _ in bounds), default=2**62)


def available_memory() -> int:
    """The memory this process may still use now, in bytes."""
    bounds = _limits(_meminfo())
    return max(0, min((limit - used for limit, used in bounds), default=2**62))


def gib(size: int) -> str:
    """`size` bytes for a message: "3.5 GiB"."""
    return f"{size / _GIB:.1f} GiB"


def largest_max_tokens() -> int:
    """The largest token budget whose batch could fit in this process's memory at all."""
    return memory_limit() // TOKEN_BYTES_FLOOR


def check_max_tokens(value: int, option: str) -> None:
    """Raise InputError naming `option` and the largest value that makes sense if a batch of
    `value` token slots cannot fit in this process's memory, whatever the model."""
    largest = largest_max_tokens()
    if value > largest:
        raise InputError(f"{option} {value} is more token slots than a batch can hold in the "
                         f"memory this process may use ({gib(memory_limit())}, at least "
                         f"{TOKEN_BYTES_FLOOR} bytes a slot): pass {option} {largest} or less "
                         "(a batch holds no more than its inputs fill, so a larger value gains "
                         "nothing)")
