"""Why the pre-training job trains slower than the bench: its compiled step timed in one process
on the bench's batch and on the job's own batches, fed as the job feeds them and not.

    python scripts/dev/pretrain_gap.py RUN_DIR [--steps 30]

RUN_DIR is a `bertjax pretrain` run directory (its run_config.json, tokenizer and shards; the
GPU session's `pretrain` stage leaves one). The model, optimizer and step are the job's own
(`initialise_model`, `assemble` with the run's optimizer and strategy). Each row runs `--steps`
steps back to back with one sync at the end (the job syncs once per log interval):

    bench batch, fixed                    the bench's random batch at the job's vocabulary
    job batch, fixed                      the job's first batch: the data's values
    job batches, 2 placed, alternating    a new argument address each step, two in all, no
                                          transfer
    job batches, 32 placed, cycled        more addresses than XLA keeps traced cuBLAS/cuDNN
                                          graphs for (16); each seen once before timing
    job batches, put before each step     `device_put` in the loop, no thread
    job batches, put after each dispatch  made ahead in a thread, put once the step is queued
    job batches, prefetched               `Prefetch` puts them from its thread, as the job does
    job batches, prefetched, one slot     the same, each then copied into one donated buffer:
                                          the step's batch at one address all along
    the job's loop                        the same with the iterator's state taken after each
                                          batch and the metrics on the host every log interval

The rows tell the data's values from the feeding. On an H100 (c8bb6d0) the job ran at 54% of
the bench's rate, and so did its step on its first batch fixed in place (94.3 against 53.3 ms)
however fed, with XLA's CUDA graphs on or off (GAP_FLAGS): the values. The trace put 39.5 ms in
the word embeddings' bfloat16 scatter-add, which serialises on the rows real text repeats; a
float32 one (9d28ee6) brought every row to the bench's 53 ms (docs/benchmarks.md).

`--trace-steps N` then traces N more steps of the rows `--trace` names (a part of the row's
name; by default the bench's batch and the job's loop) with `jax.profiler` and prints, per step,
the device's busy and idle time, how often the host calls the step and the host's events by
name and the kernels' time by stem: where the job's loop waits.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import jax

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its siblings, imported as modules
from profile_step import profiler_options, step_events  # noqa: E402
from step_timeline import format_pipelined, pipelined_window  # noqa: E402

from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.data.tokenizer import Tokenizer
from bertjax.jobs.pretrain.data import training_batches
from bertjax.jobs.pretrain.job import initialise_model
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.assembly import assemble
from bertjax.train.host_memory import keep_freed_memory
from bertjax.train.parallel import make_strategy
from bertjax.train.prefetch import Prefetch

TRACE_CACHE = 16  # XLA's default xla_cmd_buffer_trace_cache_size: cuBLAS/cuDNN graphs by address


class Feed:
    """One row's batches: `next()` gives the step's (on the device), `after(metrics)` runs once
    the step has been dispatched; `close()` ends any thread. `warmup` steps run before timing
    (every address of a cycled row once)."""

    def __init__(self, next_batch: Callable[[], Any],
                 after: Callable[[Any], None] = lambda metrics: None,
                 close: Callable[[], None] = lambda: None, warmup: int = 3):
        self.next, self.after, self.close, self.warmup = next_batch, after, close, warmup


def _feeds(strategy: Any, bench: dict, batches: Callable[[], Iterator[dict]],
           job_loop: Callable[[], Feed]) -> dict[str, Callable[[], Feed]]:
    """Each row's feed, made just before the row runs."""
    put = strategy.shard_batch

    def fixed(batch: dict) -> Callable[[], Feed]:
        def feed() -> Feed:
            placed = put(batch)
            return Feed(lambda: placed)
        return feed

    def cycled(n: int) -> Callable[[], Feed]:
        def feed() -> Feed:
            placed = [put(b) for b in itertools.islice(batches(), n)]
            return Feed(itertools.cycle(placed).__next__, warmup=max(3, n))
        return feed

    def put_before() -> Feed:
        source = batches()
        return Feed(lambda: put(next(source)))

    def put_after() -> Feed:  # made ahead in a thread, put right after the step's dispatch
        made = Prefetch(batches(), lambda b: b)
        slot = [put(next(made))]
        return Feed(lambda: slot[0], after=lambda _: slot.__setitem__(0, put(next(made))),
                    close=made.close)

    def prefetched() -> Feed:  # the job's prefetching alone
        ahead = Prefetch(batches(), put)
        return Feed(ahead.__next__, close=ahead.close)

    def one_slot() -> Feed:  # prefetched, then copied into one donated buffer (one address)
        ahead = Prefetch(batches(), put)
        slot = [next(ahead)]

        def next_batch() -> Any:
            slot[0] = _copy_into(slot[0], next(ahead))
            return slot[0]
        return Feed(next_batch, close=ahead.close)

    return {"bench batch, fixed": fixed(bench),
            "job batch, fixed": fixed(next(batches())),
            "job batches, 2 placed, alternating": cycled(2),
            f"job batches, {2 * TRACE_CACHE} placed, cycled": cycled(2 * TRACE_CACHE),
            "job batches, put before each step": put_before,
            "job batches, put after each dispatch": put_after,
            "job batches, prefetched": prefetched,
            "job batches, prefetched, one slot": one_slot,
            "the job's loop": job_loop}


def _copy(slot: Any, new: Any) -> Any:
    """`new`'s values written over `slot`'s (donated: the output is in the slot's buffers)."""
    return jax.tree.map(lambda s, n: jax.lax.dynamic_update_slice(s, n, (0,) * n.ndim), slot, new)


_copy_into = jax.jit(_copy, donate_argnums=0)


def _job_loop(strategy: Any, train: Any, log_every: int) -> Feed:
    """As `bertjax pretrain` feeds and logs: the iterator's state taken after each batch in the
    prefetching thread, metrics brought to the host every `log_every` steps."""
    ahead = Prefetch(((b, train.get_state()) for b in train),
                     lambda item: (strategy.shard_batch(item[0]), item[1]))
    pending: list[Any] = []

    def after(metrics: Any) -> None:
        pending.append(metrics)
        if len(pending) == log_every:
            for m in pending:
                strategy.host_metrics(m)
            pending.clear()

    return Feed(lambda: next(ahead)[0], after=after, close=ahead.close)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--trace-steps", type=int, default=0,
                        help="then trace this many steps of the rows --trace names")
    parser.add_argument("--trace", action="append", default=None,
                        help="a part of a row's name (repeat for several); default: the bench's "
                             "batch and the job's loop")
    parser.add_argument("--rows", action="append", default=None,
                        help="run only the rows whose name holds this (repeat for several)")
    args = parser.parse_args(argv)
    traced = args.trace or ["bench batch", "job's loop"]
    keep_freed_memory()  # as the command line does, before JAX starts (a CPU step reuses memory)
    run = RunDir(args.run_dir)
    config = rc.RunConfig.from_dict(json.loads(run.config.read_text()))
    tok = Tokenizer.load(run.tokenizer)
    strategy = make_strategy(config.train.parallel, fsdp=config.train.fsdp)
    training = assemble(initialise_model(config, tok.vocab_size), config.optim, strategy,
                        steps=config.train.steps, seed=config.train.seed, prng_impl=config.train.prng_impl)
    state = strategy.place_state(training.state)
    d = config.data
    host = pretraining_batch(config.bert_config(tok.vocab_size), d.batch_size, d.seq_len,
                             d.predictions, 0)
    bench = {k: host[k] for k in MODEL_KEYS}

    def batches() -> Iterator[dict]:  # the job's training batches from the start
        return iter(training_batches(run, config, tok))

    tokens = d.batch_size * d.seq_len
    state, metrics = training.train_step(state, strategy.shard_batch(bench))  # compiles
    jax.block_until_ready(metrics)
    print(f"pretrain gap: {config.model.preset}, vocab {tok.vocab_size}, batch {d.batch_size} x "
          f"seq {d.seq_len}, {args.steps} steps a row, one sync; {jax.devices()[0].device_kind}")
    print(f"{'row':38s} {'ms/step':>8s} {'tokens/s':>10s}")
    rows = _feeds(strategy, bench, batches, lambda: _job_loop(
        strategy, training_batches(run, config, tok), config.train.log_every))
    reports: dict[str, dict[str, Any]] = {}
    for name, make in rows.items():
        if args.rows and not any(r in name for r in args.rows):
            continue
        feed = make()
        try:
            for _ in range(feed.warmup):
                state, metrics = training.train_step(state, feed.next())
                feed.after(metrics)
            jax.block_until_ready(metrics)
            start = time.perf_counter()
            for _ in range(args.steps):
                state, metrics = training.train_step(state, feed.next())
                feed.after(metrics)
            jax.block_until_ready(metrics)
            seconds = (time.perf_counter() - start) / args.steps
            if args.trace_steps and any(t in name for t in traced):
                state, reports[name] = _traced(training.train_step, state, feed, args.trace_steps)
        finally:
            feed.close()
        print(f"{name:38s} {1e3 * seconds:8.1f} {tokens / seconds:10,.0f}", flush=True)
    for name, report in reports.items():
        print("\n".join(format_pipelined(name, report)))
    return 0


def _traced(step: Callable, state: Any, feed: Feed, steps: int) -> tuple[Any, dict[str, Any]]:
    """`steps` more steps of a row under `jax.profiler`, summed up (`pipelined_window`)."""
    with tempfile.TemporaryDirectory(prefix="bertjax-gap-") as tmp:
        with jax.profiler.trace(tmp, create_perfetto_trace=True,
                                profiler_options=profiler_options()):
            for _ in range(steps):
                state, metrics = step(state, feed.next())
                feed.after(metrics)
            jax.block_until_ready(metrics)
        trace = next(Path(tmp).rglob("perfetto_trace.json.gz"))
        return state, pipelined_window(*step_events(trace))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
