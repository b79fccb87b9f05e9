#!/usr/bin/env python
"""Sweep pre-training recipes for the default run, at equal wall budgets, on held-out plays.

Each candidate is a set of `bertjax pretrain` overrides. A candidate gets as many steps as fit in
`--budget-s` seconds of training at its own step rate, measured once per shape (model, batch,
sequence, predictions, vocabulary) by a short calibration run; so a faster recipe gets more
steps, and its learning-rate schedule still ends where the run ends. A warm-up given as a
percentage (`optim.warmup_steps=10%`) is that share of the candidate's steps.

    python scripts/sweep_recipe.py --budget-s 150 --out runs/sweep            # proxies
    python scripts/sweep_recipe.py --budget-s 560 --seeds 0 1 --only a b      # finalists
    python scripts/sweep_recipe.py --steps 1600 --seeds 0 1 --only a b        # at a step count

Every finished run appends one JSON line to OUT/results.jsonl (a rerun skips what is there);
the table printed at the end (markdown) is what the README keeps. Runs go one at a time: never
time anything beside it.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

# name -> overrides on the recipe `bertjax pretrain` runs with no options ("default", which has
# local_attention_layers=4 since 2026-11-25; "bert-init" is the default before that)
CANDIDATES: dict[str, list[str]] = {
    "default": [],
    "bert-init": ["model.local_attention_layers=0"],
    "warm10": ["optim.warmup_steps=10%"],
    "lr5e-4": ["optim.learning_rate=5e-4", "optim.warmup_steps=10%"],
    "lr2e-3": ["optim.learning_rate=2e-3", "optim.warmup_steps=10%"],
    "b32-lr2e-3": ["data.batch_size=32", "optim.learning_rate=2e-3", "optim.warmup_steps=10%"],
    "b32-lr1e-3": ["data.batch_size=32", "optim.warmup_steps=10%"],
    "seq64-b16": ["data.seq_len=64", "data.batch_size=16", "data.max_predictions=10",
                  "optim.warmup_steps=10%"],
    "tiny": ["model.preset=tiny", "optim.warmup_steps=10%"],
    "small": ["model.preset=small", "optim.warmup_steps=10%"],
    "b2-0.98": ["optim.b2=0.98", "optim.warmup_steps=10%"],
    "mask30": ["data.mask_prob=0.3", "data.max_predictions=40", "optim.warmup_steps=10%"],
    "mask40": ["data.mask_prob=0.4", "data.max_predictions=52", "optim.warmup_steps=10%"],
    "seq32-b32": ["model.local_attention_layers=0", "data.seq_len=32", "data.batch_size=32",
                  "data.max_predictions=6"],
    # heads that start out reading their neighbours (bertjax.train.local_init)
    "local1": ["model.local_attention_layers=1"],
    "local2": ["model.local_attention_layers=2"],
    "local4": ["model.local_attention_layers=4"],
    "local4-mask30": ["data.mask_prob=0.3", "data.max_predictions=40"],
    # next-sentence prediction (docs/research.md, "Next-sentence prediction")
    "nsp-only": ["train.mlm_loss_weight=0"],
    "far": ["data.not_next=far"],
    "nsp-only-far": ["train.mlm_loss_weight=0", "data.not_next=far"],
    "s64-b10": ["data.seq_len=64", "data.batch_size=10", "data.max_predictions=10"],
    "s64-b10-far": ["data.seq_len=64", "data.batch_size=10", "data.max_predictions=10",
                    "data.not_next=far"],
    "s64-b10-far-local3": ["data.seq_len=64", "data.batch_size=10", "data.max_predictions=10",
                           "data.not_next=far", "model.local_attention_layers=3"],
    "far-lr2e-3": ["data.not_next=far", "optim.learning_rate=2e-3"],
    "far-local3": ["data.not_next=far", "model.local_attention_layers=3"],
    "far-nsp-only": ["data.not_next=far", "train.mlm_loss_weight=0"],
    "s64-b10-far-nsp-only": ["data.seq_len=64", "data.batch_size=10", "data.max_predictions=10",
                             "data.not_next=far", "train.mlm_loss_weight=0"],
}
SHAPE_KEYS = ("model.preset", "data.batch_size", "data.seq_len", "data.max_predictions",
              "data.vocab_size")
DEFAULT_SHAPE = {"model.preset": "mini", "data.batch_size": "8", "data.seq_len": "128",
                 "data.max_predictions": "52", "data.vocab_size": "512"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--budget-s", type=float, default=150.0, help="training seconds per run")
    p.add_argument("--steps", type=int, default=None,
                   help="run every candidate for this many steps instead of --budget-s seconds")
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--only", nargs="+", default=None, choices=sorted(CANDIDATES))
    p.add_argument("--out", type=Path, default=Path("runs/sweep"))
    p.add_argument("--calibrate-steps", type=int, default=40)
    p.add_argument("--keep-runs", action="store_true", help="keep each run's directory")
    p.add_argument("--calibrate-only", action="store_true",
                   help="measure every candidate shape's step rate (on a quiet machine), no runs")
    return p.parse_args(argv)


def _flag(override: str) -> str:
    """"section.field_name=value" as the option `--section.field-name=value`."""
    name, value = override.split("=", 1)
    return f"--{name.replace('_', '-')}={value}"


def pretrain(out: Path, overrides: list[str], steps: int, seed: int) -> dict:
    """One `bertjax pretrain` run; its summary.json."""
    args = [sys.executable, "-m", "bertjax.cli", "pretrain", "--output-dir", str(out),
            "--no-progress", f"--train.steps={steps}", f"--train.seed={seed}",
            f"--train.eval-every={steps}", f"--train.checkpoint-every={steps}",
            *(_flag(o) for o in overrides)]
    subprocess.run(["rm", "-rf", str(out)], check=True)
    subprocess.run(args, check=True, stdout=subprocess.DEVNULL)
    summary = json.loads((out / "summary.json").read_text())
    summary["train_nsp_accuracy"] = train_nsp_accuracy(out, steps)
    return summary


def train_nsp_accuracy(run: Path, steps: int) -> float:
    """The mean training NSP accuracy over the run's last fifth of steps (its training pairs, as
    each step saw them): beside the held-out one, it tells learning apart from generalising."""
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    last = [r["nsp_accuracy"] for r in records
            if r.get("kind", "train") == "train" and "nsp_accuracy" in r
            and r.get("step", 0) > steps - max(1, steps // 5)]
    return sum(last) / len(last) if last else float("nan")


def shape_of(overrides: list[str]) -> dict[str, str]:
    given = dict(o.split("=", 1) for o in overrides)
    return {k: given.get(k, DEFAULT_SHAPE[k]) for k in SHAPE_KEYS}


def steps_per_s(shape: dict[str, str], args: argparse.Namespace, cache: dict) -> float:
    """Optimizer steps per second of training for this shape (a calibration run, cached)."""
    key = json.dumps(shape, sort_keys=True)
    if key not in cache:
        summary = pretrain(args.out / "calibration", [f"{k}={v}" for k, v in shape.items()],
                           args.calibrate_steps, seed=0)
        tokens_per_step = int(shape["data.batch_size"]) * int(shape["data.seq_len"])
        cache[key] = summary["tokens_per_s"] / tokens_per_step
        (args.out / "calibration.json").write_text(json.dumps(cache, indent=1))
    return cache[key]


def resolve(overrides: list[str], steps: int) -> list[str]:
    """Percent warm-ups as steps."""
    out = []
    for o in overrides:
        name, value = o.split("=", 1)
        if value.endswith("%"):
            value = str(max(1, round(steps * float(value[:-1]) / 100)))
        out.append(f"{name}={value}")
    return out


def table(rows: list[dict]) -> str:
    lines = ["| recipe | seed | steps | MLM acc at 15% | x baseline | at own rate | NSP acc |"
             " train NSP | MLM loss | train s | wall s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = r["eval"]
        own = e.get("own_rate_mlm_accuracy")
        lines.append(f"| {r['name']} | {r['seed']} | {r['steps']} | {e['mlm_accuracy']:.4f} | "
                     f"{e['accuracy_ratio']:.2f} | {'-' if own is None else f'{own:.4f}'} | "
                     f"{e['nsp_accuracy']:.3f} | {r.get('train_nsp_accuracy', float('nan')):.3f} | "
                     f"{e['mlm_loss']:.3f} | {r['train_time_s']:.0f} |"
                     f" {r['wall_time_s']:.0f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    results_file = args.out / "results.jsonl"
    done = [json.loads(line) for line in results_file.read_text().splitlines()] \
        if results_file.exists() else []
    cal_file = args.out / "calibration.json"
    cache = json.loads(cal_file.read_text()) if cal_file.exists() else {}
    rows = []
    for name in args.only or CANDIDATES:
        overrides = CANDIDATES[name]
        if args.steps and not args.calibrate_only:
            steps = args.steps
        else:
            rate = steps_per_s(shape_of(overrides), args, cache)
            steps = max(10, int(args.budget_s * rate))
        if args.calibrate_only:
            print(f"{name}: {rate:.2f} steps/s -> {steps} steps in {args.budget_s:.0f}s")
            continue
        for seed in args.seeds:
            prior = [r for r in done if (r["name"], r["seed"], r["budget_s"], r["steps"]) ==
                     (name, seed, args.budget_s, steps)]
            if prior:
                rows.append(prior[0])
                continue
            summary = pretrain(args.out / f"{name}-s{seed}", resolve(overrides, steps), steps, seed)
            row = {"name": name, "seed": seed, "budget_s": args.budget_s,
                   "overrides": resolve(overrides, steps), **summary}
            with results_file.open("a") as f:
                f.write(json.dumps(row) + "\n")
            rows.append(row)
            print(table([row]).splitlines()[-1], flush=True)
            if not args.keep_runs:
                subprocess.run(["rm", "-rf", str(args.out / f"{name}-s{seed}")], check=True)
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
