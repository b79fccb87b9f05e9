"""The pre-training job's rate against the bench's, measured in one lease: prints the comparison
and writes it as JSON that `bertjax.bench.tables` renders (kind "pretrain-job").

    python scripts/dev/pretrain_vs_bench.py SUMMARY_JSON BENCH_JSON [METRICS_JSONL] \
        [--json OUT --command "bertjax pretrain ..." --commit SHA]

SUMMARY_JSON is the run's summary.json, BENCH_JSON a `bertjax bench train --json` report with a
bertjax row at the same settings, METRICS_JSONL the run's metrics.jsonl (its `speed` records,
one per log interval). `share_of_pipelined` is the job's tokens/s over the bench's pipelined
tokens/s (the bench's loop, one sync at the end, as a training loop runs).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any


def compare(job: dict[str, Any], bench: dict[str, Any], speed: list[dict[str, Any]]
            ) -> dict[str, Any]:
    """The job's rates beside the bench's bertjax row."""
    row = next(r for r in bench["rows"] if r["impl"] == "bertjax")
    pipelined = row["pipelined_tokens_per_s"]
    out: dict[str, Any] = {
        "job": {"tokens_per_s": job["tokens_per_s"], "first_step_s": job["first_step_s"],
                "steps": job["steps"],
                "intervals": [{"step": r["step"], "tokens_per_s": r["tokens_per_s"]}
                              for r in speed]},
        "bench": {"row": row["row"], "pipelined_tokens_per_s": pipelined,
                  "tokens_per_s": row["tokens_per_s"], "command": bench["provenance"]["command"]},
        "share_of_pipelined": job["tokens_per_s"] / pipelined,
        "share_of_synced": job["tokens_per_s"] / row["tokens_per_s"]}
    if len(speed) > 1:  # the bench leaves 10 warm-up steps out: leave the first interval out
        steps = [b["step"] - a["step"] for a, b in zip(speed, speed[1:], strict=False)]
        seconds = sum(n / r["steps_per_s"] for n, r in zip(steps, speed[1:], strict=False))
        tokens_per_step = speed[0]["tokens_per_s"] / speed[0]["steps_per_s"]
        rate = sum(steps) / seconds * tokens_per_step
        out["job"]["after_first_interval"] = {"from_step": speed[0]["step"], "tokens_per_s": rate}
        out["share_of_pipelined_after_first_interval"] = rate / pipelined
    return out


def lines(result: dict[str, Any]) -> list[str]:
    """The console lines of `compare`'s result."""
    job, bench = result["job"], result["bench"]
    out = [f"pretrain job: {job['tokens_per_s']:,.0f} tokens/s (first step "
           f"{job['first_step_s']:.1f} s) = {result['share_of_pipelined']:.0%} of the bench's "
           f"pipelined {bench['pipelined_tokens_per_s']:,.0f}, {result['share_of_synced']:.0%} of "
           f"its synced {bench['tokens_per_s']:,.0f}"]
    if job["intervals"]:  # each log interval's rate: warm-up steps, or a shortfall all along
        out.append("  by log interval (step: tokens/s): " + ", ".join(
            f"{r['step']}: {r['tokens_per_s']:,.0f}" for r in job["intervals"]))
    after = job.get("after_first_interval")
    if after:
        out.append(f"  after step {after['from_step']}: {after['tokens_per_s']:,.0f} tokens/s = "
                   f"{result['share_of_pipelined_after_first_interval']:.0%} of the bench's "
                   "pipelined")
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("summary", type=Path)
    parser.add_argument("bench", type=Path)
    parser.add_argument("metrics", type=Path, nargs="?")
    parser.add_argument("--json", type=Path, help="write the comparison here")
    parser.add_argument("--command", default="bertjax pretrain", help="the job's command line")
    parser.add_argument("--commit", default=None, help="the tree's commit (default: the bench's)")
    args = parser.parse_args(argv)
    bench = json.loads(args.bench.read_text())
    speed = [r for r in map(json.loads, args.metrics.read_text().splitlines())
             if r["kind"] == "speed"] if args.metrics and args.metrics.is_file() else []
    result = compare(json.loads(args.summary.read_text()), bench, speed)
    print("\n".join(lines(result)))
    if args.json:
        stamp = bench["provenance"]
        result = {"what": "bertjax pretrain against the bench's bertjax row at the same settings, "
                          "in one lease",
                  "provenance": {"kind": "pretrain-job", "machine": stamp["machine"],
                                 "commit": args.commit or stamp["commit"], "date": stamp["date"],
                                 "command": args.command}, **result}
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
