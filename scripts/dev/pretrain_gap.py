"""Why the pre-training job trains slower than the bench: its compiled step timed in one process
on the bench's batch and on the job's own batches, fed as the job feeds them and not.

    python scripts/dev/pretrain_gap.py RUN_DIR [--steps 30]

RUN_DIR is a `bertjax pretrain` run directory (its run_config.json, tokenizer and shards; the
GPU session's `pretrain` stage leaves one). The model, optimizer and step are the job's own
(`initialise_model`, `assemble` with the run's optimizer and strategy). Each row runs `--steps`
steps back to back with one sync at the end (the job syncs once per log interval):

    bench batch, fixed            the bench's random batch at the job's vocabulary, one device copy
    job batch, fixed              the job's first batch, one device copy: the data's values
    job batches, placed, cycled   16 of the job's batches put on the device first, one per step:
                                  a new argument address each step, no transfer
    job batches, put each step    `device_put` in the loop, as a loop with no prefetching would
    job batches, prefetched       `Prefetch` in a background thread, as the job (and its rate)

On an H200 (1ddfbab) the job ran at 55% of the bench's rate in every log interval of 150 steps
(a steady shortfall, not warm-up), while on a CPU it ran at the bench's rate: the rows tell the
data's values from the feeding. Run it again under XLA_FLAGS=--xla_gpu_enable_command_buffer= to
see whether CUDA graphs' updates for new argument addresses are what costs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.host_memory import keep_freed_memory
from bertjax.train import run_config as rc
from bertjax.train.assembly import assemble
from bertjax.train.parallel import make_strategy
from bertjax.train.prefetch import Prefetch
from bertjax.train.pretrain import initialise_model
from bertjax.train.pretrain_data import training_batches
from bertjax.train.rundir import RunDir

PLACED = 16  # distinct device batches the "placed, cycled" row goes round


def _rows(strategy: Any, bench: dict, batches: Callable[[], Iterator[dict]],
          opened: list[Prefetch]) -> dict[str, Callable[[], Callable[[], Any]]]:
    """Each row's feeder: called once before the row, it returns the per-step batch source
    (a prefetching one is added to `opened`, to be closed)."""
    def fixed(batch: dict) -> Callable[[], Callable[[], Any]]:
        def feeder() -> Callable[[], Any]:
            placed = strategy.shard_batch(batch)
            return lambda: placed
        return feeder

    def cycled() -> Callable[[], Any]:
        placed = [strategy.shard_batch(b) for b in itertools.islice(batches(), PLACED)]
        return itertools.cycle(placed).__next__

    def put_each() -> Callable[[], Any]:
        source = batches()
        return lambda: strategy.shard_batch(next(source))

    def prefetched() -> Callable[[], Any]:
        opened.append(Prefetch(batches(), strategy.shard_batch))
        return opened[-1].__next__

    return {"bench batch, fixed": fixed(bench),
            "job batch, fixed": fixed(next(batches())),
            "job batches, placed, cycled": cycled,
            "job batches, put each step": put_each,
            "job batches, prefetched": prefetched}


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args(argv)
    keep_freed_memory()  # as the command line does, before JAX starts (a CPU step reuses memory)
    run = RunDir(args.run_dir)
    config = rc.RunConfig.from_dict(json.loads(run.config.read_text()))
    tok = WordPieceTokenizer.load(run.tokenizer)
    strategy = make_strategy(config.train.parallel, fsdp=config.train.fsdp)
    training = assemble(initialise_model(config, tok.vocab_size), config.optim_config(), strategy,
                        seed=config.train.seed, prng_impl=config.train.prng_impl)
    state = strategy.place_state(training.state)
    d = config.data
    host = pretraining_batch(config.bert_config(tok.vocab_size), d.batch_size, d.seq_len,
                             d.max_predictions, 0)
    bench = {k: host[k] for k in MODEL_KEYS}

    def batches() -> Iterator[dict]:  # the job's training batches from the start
        return iter(training_batches(run, config, tok))

    tokens = d.batch_size * d.seq_len
    state, metrics = training.train_step(state, strategy.shard_batch(bench))  # compiles
    jax.block_until_ready(metrics)
    print(f"pretrain gap: {config.model.preset}, vocab {tok.vocab_size}, batch {d.batch_size} x "
          f"seq {d.seq_len}, {args.steps} steps a row, one sync; {jax.devices()[0].device_kind}")
    print(f"{'row':32s} {'ms/step':>8s} {'tokens/s':>10s}")
    opened: list[Prefetch] = []
    for name, feeder in _rows(strategy, bench, batches, opened).items():
        feed = feeder()
        for _ in range(3):  # warm-up: the row's first argument addresses
            state, metrics = training.train_step(state, feed())
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(args.steps):
            state, metrics = training.train_step(state, feed())
        jax.block_until_ready(metrics)
        seconds = (time.perf_counter() - start) / args.steps
        print(f"{name:32s} {1e3 * seconds:8.1f} {tokens / seconds:10,.0f}", flush=True)
    for prefetch in opened:
        prefetch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
