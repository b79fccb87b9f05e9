"""`scripts/dev/profile_step.py`: what its CPU report sums, where a synced GPU step's time goes
(`step_timeline.py`, on a hand-made trace), and `--cores`.

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

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "dev" / "profile_step.py"


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


def test_a_synced_gpu_trace_says_where_each_step_waits(profile_step: Any, tmp_path: Path) -> None:
    """Two steps of a hand-made GPU trace: the host's call, the kernels after it (one inside
    another's span, two back to back), idle gaps between them, host events inside and outside
    the calls."""
    meta = [{"ph": "M", "name": "process_name", "pid": 2, "args": {"name": "/device:GPU:0"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 9,
             "args": {"name": "Stream #13(Compute)"}},
            {"ph": "M", "name": "thread_name", "pid": 2, "tid": 5, "args": {"name": "Steps"}}]

    def on(pid: int, tid: int, name: str, ts: float, dur: float) -> dict[str, Any]:
        return {"ph": "X", "pid": pid, "tid": tid, "name": name, "ts": ts, "dur": dur}

    call = "PjitFunction(train_step)"
    trace = _trace(tmp_path, meta + [
        on(1, 7, call, 0, 100), on(1, 7, "ParseArguments", 10, 5), on(1, 7, "idle host", 500, 3),
        on(2, 5, "a device line that is no stream", 20, 50),
        on(2, 9, "a_fusion_1", 30, 20), on(2, 9, "b_fusion_2", 50, 10),
        on(2, 9, "c_fusion", 80, 20), on(2, 9, "d_fusion", 85, 5),
        on(1, 7, call, 1000, 100), on(1, 7, "ParseArguments", 1002, 7),
        on(2, 9, "a_fusion_3", 1010, 40), on(2, 9, "c_fusion_4", 1100, 10),
    ])
    report = profile_step.synced_timeline(trace)
    # step 1: first kernel 30 us after the call, span 30-100 = busy 50 + idle 20 (60 to 80);
    # step 2: 10 us, span 1010-1110 = busy 50 + idle 50: medians of two are their means
    expected = {"steps": 2, "dispatch_ms": 0.1, "start_ms": 0.02, "span_ms": 0.085,
                "busy_ms": 0.05, "idle_ms": 0.035, "call_to_end_ms": 0.105, "kernels": 3}
    assert {k: report[k] for k in expected} == pytest.approx(expected)
    assert report["idle_gaps_us_per_step"] == {"a_fusion -> c_fusion": 25.0,
                                               "b_fusion -> c_fusion": 10.0}
    assert report["host_us_per_step"] == {call: 100.0, "ParseArguments": 6.0}
