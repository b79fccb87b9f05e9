#!/usr/bin/env python
"""Is ELECTRA better here? Pre-train BERT's default recipe (MLM + NSP), the masked LM alone and
ELECTRA's generator + discriminator at equal training FLOPs (both of ELECTRA's networks
counted: `bertjax.bench.flops`), two seeds each, then fine-tune each on every bundled task and
print docs/research.md's table (FLOPs, wall time, held-out pre-training metrics, every task's
test score).

    python scripts/dev/electra_study.py --out runs/electra-study
    python scripts/dev/electra_study.py --out runs/electra-study --seeds 0 --tasks shakespeare-genres
    python scripts/dev/electra_study.py --out runs/electra-study --objectives electra bert

Each step is a `bertjax` command in its own process, one after another (time nothing else
beside it); a run whose directory already holds a summary.json is read, not run again, so the
study resumes where it stopped. The results go to OUT/results.json too.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from bertjax.bench.flops import electra_flops_per_token, model_flops_per_token
from bertjax.runs import config as rc

# objective -> its options beside the default recipe; ELECTRA at the paper's ELECTRA-Small
# masking (15%) and lambda (50), the others at the recipe's 40%
OBJECTIVES = {
    "bert": [],
    "mlm": ["--train.objective=mlm"],
    "electra": ["--train.objective=electra", "--data.mask-prob=0.15"],
}
# task -> (--max-length, the test metric reported)
TASKS = {
    "shakespeare-genres": (128, "accuracy"),
    "shakespeare-characters": (64, "f1"),
    "shakespeare-speakers": (192, "f1"),
    "shakespeare-next-line": (64, "accuracy"),
}
FINETUNE_LEARNING_RATE = "5e-4"  # the README's genre run from the default pre-training


def flops_per_step(options: list[str], vocab_size: int) -> float:
    """Training FLOPs of one optimizer step of a run with `options` (command-line overrides)."""
    flags = dict(o.removeprefix("--").split("=", 1) for o in options)
    config = rc.load(None, {k.replace("-", "_"): v for k, v in flags.items()})
    model = config.bert_config(vocab_size, 0)
    d = config.data
    if config.electra:
        per_token = electra_flops_per_token(model, rc.generator_config(config, model), d.seq_len,
                                            d.predictions, training=True)
    else:
        per_token = model_flops_per_token(model, d.seq_len, d.predictions, training=True)
    return per_token * d.seq_len * d.batch_size


def run(cmd: list[str], out: Path) -> dict:
    """The summary.json of a command writing into `out`, running it first if needed."""
    if not (out / "summary.json").is_file():
        started = time.perf_counter()
        print("$", " ".join(cmd), flush=True)
        subprocess.run([sys.executable, "-m", "bertjax.cli", *cmd], check=True)
        (out / "wall_seconds.txt").write_text(f"{time.perf_counter() - started:.1f}\n")
    summary = json.loads((out / "summary.json").read_text())
    summary["wall_s"] = float((out / "wall_seconds.txt").read_text())
    return summary


def study(out: Path, seeds: list[int], tasks: list[str], objectives: list[str]) -> list[dict]:
    reference_steps = rc.RunConfig().train.steps
    budget = reference_steps * flops_per_step([], rc.RunConfig().data.vocab_size)
    rows = []
    for name in objectives:
        options = OBJECTIVES[name]
        steps = round(budget / flops_per_step(options, rc.RunConfig().data.vocab_size))
        for seed in seeds:
            run_dir = out / f"{name}-{seed}"
            pre = run(["pretrain", f"--output-dir={run_dir}", "--no-progress", *options,
                       f"--train.steps={steps}", f"--train.seed={seed}",
                       f"--train.eval-every={steps // 4}"], run_dir)
            row = {"objective": name, "seed": seed, "steps": steps,
                   "flops": steps * flops_per_step(options, rc.RunConfig().data.vocab_size),
                   "pretrain_wall_s": pre["wall_s"], "train_time_s": pre["train_time_s"],
                   "eval": pre["eval"], "tasks": {}}
            for task in tasks:
                ft_dir = out / f"{name}-{seed}-{task}"
                ft = run(["finetune", str(run_dir), f"--task={task}", f"--output-dir={ft_dir}",
                          f"--optim.learning-rate={FINETUNE_LEARNING_RATE}",
                          f"--max-length={TASKS[task][0]}", "--no-progress"], ft_dir)
                row["tasks"][task] = {"test": ft["test"][TASKS[task][1]], "wall_s": ft["wall_s"]}
            rows.append(row)
            (out / "results.json").write_text(json.dumps(rows, indent=2) + "\n")
    return rows


def table(rows: list[dict], tasks: list[str]) -> str:
    head = ["objective", "seed", "steps", "training PFLOPs", "pre-training time",
            "held-out MLM accuracy", "held-out replaced-token accuracy",
            *(f"{t.removeprefix('shakespeare-')} ({TASKS[t][1]})" for t in tasks)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        e = r["eval"]
        rtd = f"{e['rtd_accuracy']:.3f}" if "rtd_accuracy" in e else "-"
        cells = [r["objective"], str(r["seed"]), f"{r['steps']:,}", f"{r['flops'] / 1e15:.1f}",
                 f"{r['pretrain_wall_s'] / 60:.1f} min", f"{e['mlm_accuracy']:.3f}", rtd,
                 *(f"{r['tasks'][t]['test']:.3f}" for t in tasks)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("runs/electra-study"))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES),
                        choices=list(OBJECTIVES), help="which, in this order (default: all)")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    rows = study(args.out, args.seeds, args.tasks, args.objectives)
    print(table(rows, args.tasks))


if __name__ == "__main__":
    main()
