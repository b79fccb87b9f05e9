"""The word embeddings' gradient alone, on the bench's token ids and on a pre-training run's:
the scatter-add that a gather's gradient is, in bfloat16 (the table cast first, as `nnx.Embed`
does) and in float32 (rows gathered from the float32 table, then cast, as `bertjax.model` does).

    python scripts/dev/embedding_grad.py RUN_DIR [--repeats 20]

Real text repeats rows (padding, [MASK], frequent words); uniformly random ids hardly do. A
scatter-add serialises where many updates hit one row, so its time depends on the ids' values.
Prints the median ms of the jitted gradient (a sync after each call) per order and ids.
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.bench.batch import pretraining_batch
from bertjax.data.tokenizer import Tokenizer
from bertjax.jobs.pretrain.data import training_batches
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir


def _cast_then_gather(table: jax.Array, ids: jax.Array) -> jax.Array:
    return jnp.take(table.astype(jnp.bfloat16), ids, axis=0)  # (B, S, H)


def _gather_then_cast(table: jax.Array, ids: jax.Array) -> jax.Array:
    return jnp.take(table, ids, axis=0).astype(jnp.bfloat16)  # (B, S, H)


ORDERS = {"bf16 scatter (cast, then gather)": _cast_then_gather,
          "f32 scatter (gather, then cast)": _gather_then_cast}


def _median_ms(fn: Any, *args: Any, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compiles
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(fn(*args))
        times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(times)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    run = RunDir(args.run_dir)
    config = rc.RunConfig.from_dict(json.loads(run.config.read_text()))
    tok = Tokenizer.load(run.tokenizer)
    d = config.data
    bert = config.bert_config(tok.vocab_size)
    job_ids = next(iter(training_batches(run, config, tok)))["input_ids"]
    bench_ids = pretraining_batch(bert, d.batch_size, d.seq_len, d.predictions, 0)["input_ids"]
    rng = np.random.default_rng(0)
    table = jnp.asarray(rng.normal(0, 0.02, (tok.vocab_size, bert.hidden_size)), jnp.float32)
    upstream = jnp.asarray(rng.normal(0, 1, (*job_ids.shape, bert.hidden_size)), jnp.bfloat16)
    print(f"embedding gradient: table {tok.vocab_size} x {bert.hidden_size}, ids {job_ids.shape}; "
          f"{jax.devices()[0].device_kind}")
    for name, ids in (("bench", bench_ids), ("job", job_ids)):
        top = collections.Counter(np.asarray(ids).ravel().tolist()).most_common(3)
        print(f"  {name} ids: {len(np.unique(ids))} distinct; busiest rows (id, tokens) {top}")
    print(f"{'order':34s} {'bench ids ms':>13s} {'job ids ms':>11s}")
    for name, take in ORDERS.items():
        grad = jax.jit(jax.grad(lambda t, i, take=take: jnp.vdot(
            take(t, i).astype(jnp.float32), upstream.astype(jnp.float32))))
        ms = [_median_ms(grad, table, jnp.asarray(ids), repeats=args.repeats)
              for ids in (bench_ids, job_ids)]
        print(f"{name:34s} {ms[0]:13.2f} {ms[1]:11.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
