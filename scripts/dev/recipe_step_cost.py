#!/usr/bin/env python
"""What a pre-training recipe costs per step: model FLOPs and step times, side by side.

Each recipe is a set of `bertjax pretrain` overrides (as `sweep_recipe.py` names them). Every
recipe's train step is built as the job builds it (its model, local init, optimizer, objective)
and fed its own batch shape from a run directory's training data; the steps are then timed in
rounds, one recipe after another within each round, so that a machine shared with other work
slows them alike. It prints per recipe: FLOPs per step, the median step time, the whole run's
training time at that rate, the same estimated for a machine whose float32 GEMM runs at
`--target-gflops` (the time scaled by the two machines' GEMM rates: the same share of the GEMM
rate on both), and this machine's GEMM rate (float32 4096^2, as `bertjax bench` measures it).

    python scripts/dev/recipe_step_cost.py RUN_DIR default s64-b10 [--rounds 5 --steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))
from sweep_recipe import CANDIDATES  # noqa: E402

from bertjax.bench.flops import model_flops_per_token  # noqa: E402
from bertjax.bench.jax_rows import measure_gemm  # noqa: E402
from bertjax.jobs.pretrain.data import training_batches  # noqa: E402
from bertjax.jobs.pretrain.job import initialise_model  # noqa: E402
from bertjax.runs import config as rc  # noqa: E402
from bertjax.runs.layout import RunDir  # noqa: E402
from bertjax.train.assembly import assemble  # noqa: E402
from bertjax.train.objectives import pretraining  # noqa: E402


def build(run: RunDir, overrides: list[str]) -> tuple[rc.RunConfig, object, list, float]:
    """(config, train_step with its state in a closure, batches, FLOPs per step)."""
    config = rc.load(None, dict(o.split("=", 1) for o in overrides))
    _, tok = run.finished_config()
    model = initialise_model(config, tok.vocab_size)
    t = config.train
    training = assemble(model, config.optim, steps=t.steps, seed=t.seed,
                        objective=pretraining(t.mlm_loss_weight, t.nsp_loss_weight))
    state = [training.strategy.place_state(training.state)]
    batches = training_batches(run, config, tok)
    fixed = [training.strategy.shard_batch(next(batches)) for _ in range(8)]
    d = config.data
    flops = model_flops_per_token(config.bert_config(tok.vocab_size), d.seq_len,
                                  d.predictions, training=True) * d.seq_len * d.batch_size

    def step(i: int) -> None:
        state[0], metrics = training.train_step(state[0], fixed[i % len(fixed)])
        jax.block_until_ready(metrics)

    step(0)  # compile
    return config, step, fixed, flops


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir", help="a pre-training run whose vocabulary and shards to use")
    p.add_argument("recipes", nargs="+", choices=sorted(CANDIDATES))
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=20, help="steps per recipe per round")
    p.add_argument("--target-gflops", type=float, default=140.0)
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    built = {name: build(run, CANDIDATES[name]) for name in args.recipes}
    times: dict[str, list[float]] = {name: [] for name in built}
    for _ in range(args.rounds):
        for name, (_, step, _, _) in built.items():
            start = time.perf_counter()
            for i in range(args.steps):
                step(i)
            times[name].append((time.perf_counter() - start) / args.steps)
    gemm = measure_gemm(4096, "float32")["flops_per_s"]
    scale = gemm / (args.target_gflops * 1e9)
    print(f"float32 GEMM here: {gemm / 1e9:.0f} GFLOP/s; {args.rounds} rounds of {args.steps} "
          f"steps per recipe, interleaved")
    print(f"| recipe | steps | GFLOP/step | ms/step (median, spread) | share of GEMM | training "
          f"s here | at {args.target_gflops:.0f} GFLOP/s |")
    print("|---|---|---|---|---|---|---|")
    for name, (config, _, _, flops) in built.items():
        median = statistics.median(times[name])
        spread = max(times[name]) - min(times[name])
        steps = config.train.steps
        print(f"| {name} | {steps} | {flops / 1e9:.2f} | {1e3 * median:.1f} ({1e3 * spread:.1f}) "
              f"| {flops / median / gemm:.0%} | {steps * median:.0f} | "
              f"{steps * median * scale:.0f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
