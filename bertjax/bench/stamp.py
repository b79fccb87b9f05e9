"""Where a benchmark's numbers come from, written into its JSON: the machine, the command, the
commit and the date. The documentation's tables are rendered from that JSON
(`bertjax.bench.tables`), so each table says what produced it and re-measuring is re-running
the command.

No framework import.
"""

from __future__ import annotations

import datetime
import os
import platform
import re
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from bertjax.common.files import write_json_atomic

KINDS = ("train", "infer", "embed", "data", "corpus", "finetune", "pack")


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else what `platform` knows."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def commit() -> str | None:
    """The bertjax checkout's commit (`-dirty` if it has changes), None outside a git checkout.
    `BERTJAX_COMMIT` names it where the code runs from a copy without git (a lent GPU machine);
    a full hexadecimal hash is shortened as git's own is here (12 digits, `-dirty` kept)."""
    named = os.environ.get("BERTJAX_COMMIT")
    if named:
        full = re.fullmatch(r"([0-9a-fA-F]{40})(-dirty)?", named)
        return full[1][:12].lower() + (full[2] or "") if full else named
    root = Path(__file__).resolve().parents[2]
    try:
        head = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root,
                              capture_output=True, text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"{head}-dirty" if dirty else head


def provenance(kind: str, accelerator: str | None = None) -> dict[str, Any]:
    """The stamp of a result of benchmark `kind`: machine, command, commit, date (UTC)."""
    if kind not in KINDS:
        raise ValueError(f"unknown benchmark kind {kind!r}; one of {KINDS}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    machine = f"{cpu_name()}, {cores} cores"
    command = " ".join(["bertjax", *sys.argv[1:]]) \
        if Path(sys.argv[0]).name in ("bertjax", "__main__.py") \
        else " ".join([Path(sys.executable).name, *sys.argv])
    if os.environ.get("XLA_FLAGS"):  # they change what XLA compiles: part of the command
        command = f"XLA_FLAGS={shlex.quote(os.environ['XLA_FLAGS'])} {command}"
    return {
        "kind": kind,
        "machine": f"{accelerator} ({machine})" if accelerator else machine,
        "command": command,
        "commit": commit(),
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d"),
    }


def write_result(result: dict[str, Any], path: str | Path, kind: str,
                 accelerator: str | None = None) -> Path:
    """`result` with its `provenance` stamp, written atomically as JSON to `path`."""
    write_json_atomic(path, {**result, "provenance": provenance(kind, accelerator)})
    return Path(path)
