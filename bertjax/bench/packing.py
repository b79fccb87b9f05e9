"""`bertjax bench pack`: pre-training on a corpus of short documents, unpacked against packed
(`data.packing`), in one run.

The short-document corpus is the bundled plays cut into speeches, every speech a document
(`shakespeare_speech_documents`): most are a line or two, so an NSP pair fills about half of an
unpacked row of 128 tokens. The bundled corpus (whole scenes) is measured beside it, as the case
packing leaves alone. For each corpus: the share of real tokens per row of an epoch's batches,
unpacked and packed (the measurement behind `data.packing=auto`). On the speeches: train steps
of the default recipe's model, both ways, the same rows per step and the same initial weights,
timed alternately after a compiled warm-up; reported per step and as tokens of real text per
second (the padding a row carries is not text). Batches are made before the clock starts, so
the step is timed, not the data pipeline (`bertjax bench data` times that).
"""

from __future__ import annotations

import itertools
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import jax
import numpy as np

from bertjax.common.console import say_unless
from bertjax.data import PretrainingBatches, Tokenizer, write_shards
from bertjax.data.corpus import corpus_documents, shakespeare_speech_documents
from bertjax.data.pair_packing import real_token_share
from bertjax.jobs.pretrain.job import initialise_model
from bertjax.runs import config as rc
from bertjax.train.assembly import assemble

MODES = ("none", "best-fit")


def _fill(shards: Path, tokenizer: Tokenizer, seq_len: int, max_predictions: int,
          batch_size: int) -> dict[str, Any]:
    """The share of real tokens per row of an epoch, unpacked and packed, and the rows each
    takes."""
    out: dict[str, Any] = {}
    for mode in MODES:
        it = PretrainingBatches(shards, seq_len=seq_len, global_batch_size=batch_size,
                                max_predictions=max_predictions, packing=mode, tokenizer=tokenizer,
                                cache_pairs=False)
        rows = it.num_pairs if mode == "none" else it.plan(0).num_rows
        out[mode] = {"pairs": it.num_pairs, "rows": rows,
                     "real_token_share": float(it.lengths.sum()) / (rows * seq_len)}
    out["unpacked_share"] = real_token_share(it.lengths, seq_len)  # what "auto" reads
    out["auto"] = PretrainingBatches(shards, seq_len=seq_len, global_batch_size=batch_size,
                                     max_predictions=max_predictions, packing="auto",
                                     tokenizer=tokenizer, cache_pairs=False).packing
    return out


def _time_steps(config: rc.RunConfig, vocab_size: int, batches: dict[str, list[dict]],
                steps: int, repeats: int, quiet: bool) -> list[dict[str, Any]]:
    """Each mode's train steps timed: `repeats` rounds of `steps` steps, alternating modes."""
    trainings: dict[str, Any] = {}
    for mode, mode_batches in batches.items():
        training = assemble(initialise_model(config, vocab_size), config.optim,
                            steps=config.train.steps, seed=config.train.seed)
        state = training.strategy.place_state(training.state)
        start = time.perf_counter()
        state, metrics = training.train_step(state, mode_batches[0])  # compiles
        jax.block_until_ready(metrics)
        trainings[mode] = [training, state, time.perf_counter() - start]
    times: dict[str, list[float]] = {mode: [] for mode in batches}
    for repeat in range(repeats):
        for mode, mode_batches in batches.items():
            say_unless(quiet, f"repeat {repeat + 1}/{repeats}: {mode} ...")
            training, state, _ = trainings[mode]
            start = time.perf_counter()
            for batch in itertools.islice(itertools.cycle(mode_batches), steps):
                state, metrics = training.train_step(state, batch)
            jax.block_until_ready(metrics)
            times[mode].append((time.perf_counter() - start) / steps)
            trainings[mode][1] = state
    rows = []
    for mode, mode_batches in batches.items():
        real = float(np.mean([b["attention_mask"].sum() for b in mode_batches]))
        pairs = float(np.mean([b.get("next_sentence_weights", b["attention_mask"][:, :1]).sum()
                               for b in mode_batches]))
        step_s = statistics.median(times[mode])
        rows.append({"packing": mode, "step_s": step_s, "min_step_s": min(times[mode]),
                     "max_step_s": max(times[mode]), "first_step_s": trainings[mode][2],
                     "real_tokens_per_step": real, "pairs_per_step": pairs,
                     "real_tokens_per_s": real / step_s, "pairs_per_s": pairs / step_s})
    return rows


def run_packing_benchmark(*, preset: str = "mini", seq_len: int = 128, batch_size: int = 8,
                          max_predictions: int = 20, vocab_size: int = 512, steps: int = 20,
                          repeats: int = 3, quiet: bool = False) -> dict[str, Any]:
    """Real-token shares of both corpora and the packed/unpacked train step on the speeches
    (`batch_size` rows of `seq_len` a step); prints a table unless `quiet`."""
    config = rc.load(overrides={"model.preset": preset, "data.seq_len": seq_len,
                                "data.batch_size": batch_size,
                                "data.max_predictions": max_predictions,
                                "data.vocab_size": vocab_size})
    say_unless(quiet, "training a vocabulary and writing shards of scenes and speeches ...")
    tokenizer = Tokenizer.train(
        (s for d in corpus_documents("shakespeare", split="train") for s in d), vocab_size)
    fills, batches = {}, {}
    with tempfile.TemporaryDirectory(prefix="bertjax-bench-pack-") as tmp:
        for name, documents in (("scenes", corpus_documents("shakespeare", split="train")),
                                ("speeches", shakespeare_speech_documents("train"))):
            write_shards(documents, tokenizer, Path(tmp) / name, min_documents=2)
            fills[name] = _fill(Path(tmp) / name, tokenizer, seq_len, max_predictions,
                                batch_size)
        for mode in MODES:
            it = PretrainingBatches(Path(tmp) / "speeches", seq_len=seq_len,
                                    global_batch_size=batch_size, max_predictions=max_predictions,
                                    packing=mode, tokenizer=tokenizer, cache_pairs=False)
            batches[mode] = [next(it) for _ in range(min(steps, len(it)))]
    rows = _time_steps(config, tokenizer.vocab_size, batches, steps, repeats, quiet)
    result = {"preset": preset, "seq_len": seq_len, "batch_size": batch_size,
              "max_predictions": max_predictions, "vocab_size": vocab_size, "steps": steps,
              "repeats": repeats, "corpora": fills, "rows": rows,
              "speedup_real_tokens": rows[1]["real_tokens_per_s"] / rows[0]["real_tokens_per_s"],
              "device": f"jax {jax.default_backend()} ({jax.devices()[0].device_kind})",
              "versions": {"jax": jax.__version__}}
    if not quiet:
        print(format_table(result))
    return result


def format_table(result: dict[str, Any]) -> str:
    """The corpora's real-token shares, then the timed steps."""
    S, B = result["seq_len"], result["batch_size"]
    lines = [f"share of real tokens per row of {S} (an epoch of the training plays):",
             f"{'corpus':<10} {'pairs':>7} {'unpacked rows':>14} {'share':>6} "
             f"{'packed rows':>12} {'share':>6} {'auto':>9}"]
    for name, f in result["corpora"].items():
        lines.append(f"{name:<10} {f['none']['pairs']:>7} {f['none']['rows']:>14} "
                     f"{f['none']['real_token_share']:>6.1%} {f['best-fit']['rows']:>12} "
                     f"{f['best-fit']['real_token_share']:>6.1%} {f['auto']:>9}")
    lines += [f"train step on the speeches: {result['preset']}, {B} rows x {S} tokens a step, "
              f"median of {result['repeats']} x {result['steps']} steps; {result['device']}",
              f"{'packing':<9} {'step ms':>8} {'pairs/step':>10} {'real tok/step':>13} "
              f"{'real tok/s':>11} {'pairs/s':>8} {'first s':>8}"]
    for r in result["rows"]:
        lines.append(f"{r['packing']:<9} {r['step_s'] * 1e3:>8.1f} {r['pairs_per_step']:>10.1f} "
                     f"{r['real_tokens_per_step']:>13.0f} {r['real_tokens_per_s']:>11.0f} "
                     f"{r['pairs_per_s']:>8.1f} {r['first_step_s']:>8.2f}")
    lines.append(f"packed / unpacked, tokens of real text per second: "
                 f"{result['speedup_real_tokens']:.2f}x")
    return "\n".join(lines)

