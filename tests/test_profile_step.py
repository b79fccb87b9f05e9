"""`scripts/dev/profile_step.py`: what its CPU report sums, and `--cores`.

On a CPU the host timeline holds the XLA ops and the runtime's events around them
("ThunkExecutor::Execute" spans a whole step); counting both made every op's share about a third
of what it is. A hand-made Perfetto trace checks that only the ops are summed, and `--cores` is
checked to pin the process before anything is profiled.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
from pathlib import Path
from typing import Any

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev" / "profile_step.py"


@pytest.fixture(scope="module")
def profile_step() -> Any:
    spec = importlib.util.spec_from_file_location("profile_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _trace(tmp_path: Path, events: list[dict[str, Any]]) -> Path:
    meta = [{"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/host:CPU"}},
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": 7, "args": {"name": "tf_pjrt"}}]
    path = tmp_path / "perfetto_trace.json.gz"
    path.write_bytes(gzip.compress(json.dumps({"traceEvents": meta + events}).encode()))
    return path


def test_a_cpu_trace_sums_the_ops_not_the_runtime_around_them(profile_step: Any,
                                                              tmp_path: Path) -> None:
    def event(name: str, dur: float, hlo: bool = False) -> dict[str, Any]:
        args = {"hlo_op": name, "hlo_module": "jit_train_step"} if hlo else {}
        return {"ph": "X", "pid": 1, "tid": 7, "name": name, "ts": 0, "dur": dur, "args": args}

    trace = _trace(tmp_path, [
        event("ThunkExecutor::Execute", 100.0), event("PjitFunction(train_step)", 101.0),
        event("ThunkExecutor::Execute (wait for completion)", 99.0), event("ParseArguments", 1.0),
        event("AllocateOutputBuffersWithInputReuse", 1.0), event("end: dot.3", 0.5),
        event("dot.3", 60.0, hlo=True), event("ynn_fusion.12", 30.0, hlo=True),
        event("wrapped_reduce-window.4", 5.0, hlo=True), event("dot.3", 4.0, hlo=True),
    ])
    sums, pids = profile_step.kernel_times(trace)
    assert pids == {1: "/host:CPU"}
    assert sums == {"ops": {"dot.3": 64.0, "ynn_fusion.12": 30.0, "wrapped_reduce-window.4": 5.0}}


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="--cores needs Linux")
def test_cores_pins_the_process_before_it_profiles(profile_step: Any, capsys: Any,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    cores = sorted(os.sched_getaffinity(0))
    calls: list[Any] = []
    monkeypatch.setattr(profile_step, "pin_cores", calls.append)
    monkeypatch.setattr(profile_step, "keep_freed_memory", lambda: calls.append("memory"))

    def split(*args: Any) -> dict[str, float]:
        calls.append("profiled")
        return {"forward_ms": 1.0, "forward_backward_ms": 3.0, "backward_over_forward": 2.0}

    monkeypatch.setattr(profile_step, "forward_backward_split", split)
    assert profile_step.main(["--split", "--cores", "1"]) == 0
    assert calls == [cores[:1], "memory", "profiled"]  # pinned before JAX or glibc are touched
    for refused in (str(len(cores) + 1), "0"):
        with pytest.raises(SystemExit) as exit_:
            profile_step.main(["--split", "--cores", refused])
        assert exit_.value.code == 2
        assert f"--cores takes 1 to {len(cores)} (this process's cores), not {refused}" in \
            capsys.readouterr().err
    assert calls == [cores[:1], "memory", "profiled"]  # a refused count changes nothing
