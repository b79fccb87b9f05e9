"""Where a synced step's wall time goes (`profile_step.py` traces steps with a sync after each,
as `bertjax bench train`'s tokens/s column does): for each call of the step, read from the
trace's host call event and the device's kernels that follow it,

- dispatch: how long the call ran on the host (until it returned);
- start: from the call to the device's first kernel (the device idles meanwhile);
- span, busy and idle: from the first kernel's start to the last one's end, the time some kernel
  ran (their union) and the rest, idle gaps inside the step;
- the idle gaps by the kernels around them (the host launching too slowly, a wait, a copy), and
  the host's events inside the call by name (they nest: "PjitFunction" holds the others).

Pure functions over (start µs, duration µs, name) tuples; `profile_step.py` reads them out of a
Perfetto trace.
"""

from __future__ import annotations

import bisect
import collections
import re
import statistics
from collections.abc import Sequence
from typing import Any

Event = tuple[float, float, str]  # (start µs, duration µs, name)
MIN_GAP_US = 5.0  # idle gaps shorter than this are the launch queue's normal spacing
TOP = 12


def stem(name: str) -> str:
    """A kernel name without its numbering: 'loop_add_fusion_12' -> 'loop_add_fusion'."""
    return re.sub(r"(_\d+)+$|\.\d+$", "", name)


def _merged(kernels: Sequence[Event]) -> list[tuple[float, float, str, str]]:
    """The kernels' union as (start, end, first kernel's name, last kernel's name) spans."""
    spans: list[list[Any]] = []
    for start, dur, name in sorted(kernels):
        end = start + dur
        if spans and start <= spans[-1][1]:
            if end > spans[-1][1]:
                spans[-1][1], spans[-1][3] = end, name
        else:
            spans.append([start, end, name, name])
    return [tuple(s) for s in spans]


def _one_step(call: Event, kernels: Sequence[Event], gaps: dict[str, float]) -> dict[str, float]:
    spans = _merged(kernels)
    busy = sum(end - start for start, end, _, _ in spans)
    for before, after in zip(spans, spans[1:], strict=False):
        gap = after[0] - before[1]
        if gap >= MIN_GAP_US:
            gaps[f"{stem(before[3])} -> {stem(after[2])}"] += gap
    first, last = spans[0][0], spans[-1][1]
    return {"dispatch_ms": call[1] / 1e3, "start_ms": (first - call[0]) / 1e3,
            "span_ms": (last - first) / 1e3, "busy_ms": busy / 1e3,
            "idle_ms": (last - first - busy) / 1e3, "call_to_end_ms": (last - call[0]) / 1e3,
            "kernels": float(len(kernels))}


def synced_steps(calls: Sequence[Event], kernels: Sequence[Event],
                 host: Sequence[Event]) -> dict[str, Any]:
    """Medians over the steps of `calls` (each step's kernels: those that start after its call
    and before the next), the idle gaps and the host's events per step, largest first."""
    calls, kernels = sorted(calls), sorted(kernels)
    starts = [k[0] for k in kernels]
    gaps: dict[str, float] = collections.defaultdict(float)
    hosts: dict[str, float] = collections.defaultdict(float)
    steps = []
    for i, call in enumerate(calls):
        end = calls[i + 1][0] if i + 1 < len(calls) else float("inf")
        mine = kernels[bisect.bisect_left(starts, call[0]):bisect.bisect_left(starts, end)]
        if not mine:
            continue
        steps.append(_one_step(call, mine, gaps))
        for start, dur, name in host:
            if call[0] <= start < call[0] + call[1]:
                hosts[name] += dur
    if not steps:
        return {"steps": 0}
    n = len(steps)
    return {"steps": n,
            **{k: statistics.median(s[k] for s in steps) for k in steps[0]},
            "idle_gaps_us_per_step": _top(gaps, n), "host_us_per_step": _top(hosts, n)}


def _top(sums: dict[str, float], steps: int) -> dict[str, float]:
    return dict(sorted(((k, v / steps) for k, v in sums.items()), key=lambda kv: -kv[1])[:TOP])


def format_synced(report: dict[str, Any]) -> list[str]:
    """The report's lines for the console."""
    if not report.get("steps"):
        return ["  synced steps: no step call and kernels found in the trace"]
    r = report
    lines = [f"  synced steps ({r['steps']}, medians each): dispatch {r['dispatch_ms']:.1f} ms; call "
             f"to first kernel {r['start_ms']:.1f} ms; kernels' span {r['span_ms']:.1f} ms, busy "
             f"{r['busy_ms']:.1f}, idle {r['idle_ms']:.1f}; call to last kernel's end "
             f"{r['call_to_end_ms']:.1f} ms; {r['kernels']:.0f} kernels"]
    for title, key in (("idle gaps by the kernels around them", "idle_gaps_us_per_step"),
                       ("host events inside the call (nested)", "host_us_per_step")):
        lines.append(f"  {title}: us/step")
        lines += [f"    {us:9.1f}  {name[:110]}" for name, us in r[key].items()]
    return lines


def pipelined_window(calls: Sequence[Event], kernels: Sequence[Event],
                     host: Sequence[Event]) -> dict[str, Any]:
    """Steps traced back to back (no sync between them): per step, the wall time of the window
    (first call to last kernel's end), the device's busy and idle time in it, the median gap
    between two calls' starts (the loop's period on the host) and a call's median length, and
    every host event by name (all threads; nested events each count) and the kernels' time by
    stem."""
    calls, kernels = _outermost(calls), sorted(kernels)
    if not calls or not kernels:
        return {"steps": 0}
    n = len(calls)
    spans = _merged([k for k in kernels if k[0] >= calls[0][0]])
    busy = sum(end - start for start, end, _, _ in spans)
    window = spans[-1][1] - calls[0][0]
    hosts: dict[str, float] = collections.defaultdict(float)
    for start, dur, name in host:
        if calls[0][0] <= start <= spans[-1][1]:
            hosts[name] += dur
    stems: dict[str, float] = collections.defaultdict(float)
    for start, dur, name in kernels:
        if start >= calls[0][0]:
            stems[stem(name)] += dur
    periods = [b[0] - a[0] for a, b in zip(calls, calls[1:], strict=False)] or [window]
    return {"steps": n, "wall_ms": window / n / 1e3, "busy_ms": busy / n / 1e3,
            "idle_ms": (window - busy) / n / 1e3,
            "call_period_ms": statistics.median(periods) / 1e3,
            "call_ms": statistics.median(c[1] for c in calls) / 1e3,
            "host_us_per_step": _top(hosts, n), "kernel_stems_us_per_step": _top(stems, n)}


def format_pipelined(name: str, report: dict[str, Any]) -> list[str]:
    """The console lines of `pipelined_window`'s report for the row `name`."""
    r = report
    if not r.get("steps"):
        return [f"  trace of {name}: no step call and kernels found"]
    lines = [f"  trace of {name} ({r['steps']} steps, per step): wall {r['wall_ms']:.1f} ms, "
             f"device busy {r['busy_ms']:.1f}, idle {r['idle_ms']:.1f}; a call every "
             f"{r['call_period_ms']:.1f} ms, each {r['call_ms']:.1f} ms on the host"]
    for title, key in (("host events", "host_us_per_step"),
                       ("kernels by stem", "kernel_stems_us_per_step")):
        lines.append(f"   {title}: us/step")
        lines += [f"    {us:9.1f}  {ev[:110]}" for ev, us in list(r[key].items())[:8]]
    return lines


def _outermost(calls: Sequence[Event]) -> list[Event]:
    """The calls not inside another (a jitted call's event may hold one of the same name)."""
    out: list[Event] = []
    for call in sorted(calls, key=lambda c: (c[0], -c[1])):
        if not out or call[0] >= out[-1][0] + out[-1][1]:
            out.append(call)
    return out
