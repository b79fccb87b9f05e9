"""Data-pipeline benchmark on one CPU core: tokenisation MB/s and masked sequences/s from shards.

The process is pinned to one core (`os.sched_setaffinity`) and the tokenizer's thread pool to one
thread (RAYON_NUM_THREADS=1, TOKENIZERS_PARALLELISM=false; they only take effect if the pool has
not started yet in this process). Every figure is the median over `repeats` after `warmup` runs.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bertjax.data import PretrainingBatches, Shards, Tokenizer, corpus_documents, write_shards
from bertjax.data.pairs import create_pairs
from bertjax.errors import InputError


@contextlib.contextmanager
def one_core(cpu: int | None = None) -> Iterator[int | None]:
    """Pin this process to one CPU (the first allowed one by default) and the tokenizer to one
    thread; yields the CPU (None where affinity is unsupported) and restores both on exit."""
    saved_env = {k: os.environ.get(k) for k in ("RAYON_NUM_THREADS", "TOKENIZERS_PARALLELISM")}
    os.environ["RAYON_NUM_THREADS"] = "1"
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    saved = os.sched_getaffinity(0) if hasattr(os, "sched_setaffinity") else None
    try:
        if saved is None:
            yield None
        else:
            if cpu is not None and cpu not in saved:
                raise InputError(f"--cpu {cpu} is not a core this process may use; choose one of "
                                 f"{', '.join(map(str, sorted(saved)))}")
            cpu = min(saved) if cpu is None else cpu
            os.sched_setaffinity(0, {cpu})
            yield cpu
    finally:
        if saved is not None:
            os.sched_setaffinity(0, saved)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _median_time(fn: Callable[[], Any], repeats: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_data_benchmark(
    *,
    corpus: Sequence[str] = ("shakespeare",),
    split: str = "train",
    text_field: str = "text",
    vocab: str | None = None,
    vocab_size: int = 8000,
    seq_len: int = 128,
    batch_size: int = 256,
    max_predictions: int = 20,
    whole_word_mask: bool = False,
    steps: int = 50,
    repeats: int = 5,
    warmup: int = 1,
    cpu: int | None = None,
    print_fn: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Run the benchmark and return its numbers (also printed through `print_fn`)."""
    with one_core(cpu) as pinned:
        return _run(corpus, split, text_field, vocab, vocab_size, seq_len, batch_size,
                    max_predictions, whole_word_mask, steps, repeats, warmup, pinned, print_fn)


def _run(corpus: Sequence[str], split: str, text_field: str, vocab: str | None, vocab_size: int,
         seq_len: int, batch_size: int, max_predictions: int, whole_word_mask: bool, steps: int,
         repeats: int, warmup: int, pinned: int | None,
         print_fn: Callable[[str], None]) -> dict[str, Any]:
    documents = list(corpus_documents(list(corpus), text_field=text_field, split=split))
    sentences = [s for d in documents for s in d]
    mb = sum(len(s.encode("utf-8", "surrogatepass")) for s in sentences) / 1e6
    if vocab:
        tokenizer = Tokenizer.load(vocab)
    else:
        tokenizer = Tokenizer.train(sentences, vocab_size)
    chunk = 4096

    def tokenise() -> None:
        for i in range(0, len(sentences), chunk):
            tokenizer.encode_batch(sentences[i:i + chunk])

    tok_s = _median_time(tokenise, repeats, warmup)
    result: dict[str, Any] = {
        "cpu": pinned, "corpus_mb": round(mb, 3), "documents": len(documents),
        "sentences": len(sentences), "tokenise_mb_per_s": round(mb / tok_s, 3),
    }
    with tempfile.TemporaryDirectory(prefix="bertjax-bench-") as tmp:
        shard_dir = Path(tmp) / "shards"
        start = time.perf_counter()
        meta = write_shards(documents, tokenizer, shard_dir, min_documents=2)
        result["preprocess_mb_per_s"] = round(mb / (time.perf_counter() - start), 3)
        result["tokens"] = meta["tokens"]
        shards = Shards(shard_dir)
        start = time.perf_counter()
        pairs = create_pairs(shards, seq_len)
        result["pairs"] = len(pairs)
        result["pairs_per_s"] = round(len(pairs) / (time.perf_counter() - start))
        batches = PretrainingBatches(shards, seq_len=seq_len, global_batch_size=batch_size,
                                     max_predictions=max_predictions, tokenizer=tokenizer,
                                     whole_word_mask=whole_word_mask)

        def serve() -> None:
            for _ in range(steps):
                next(batches)

        batch_s = _median_time(serve, repeats, warmup)
        result["sequences_per_s"] = round(steps * batch_size / batch_s)
        result["tokens_per_s"] = round(steps * batch_size * seq_len / batch_s)
    print_fn(
        f"data benchmark on {'cpu ' + str(pinned) if pinned is not None else 'one process'} "
        f"(median of {repeats} after {warmup} warm-up)\n"
        f"  corpus         {result['corpus_mb']:.2f} MB, {result['documents']:,} documents, "
        f"{result['sentences']:,} sentences, {result['tokens']:,} tokens\n"
        f"  tokenise       {result['tokenise_mb_per_s']:.2f} MB/s (encode_batch, one thread)\n"
        f"  preprocess     {result['preprocess_mb_per_s']:.2f} MB/s (tokenise + write shards)\n"
        f"  pair creation  {result['pairs_per_s']:,} pairs/s ({result['pairs']:,} pairs)\n"
        f"  batches        {result['sequences_per_s']:,} masked sequences/s "
        f"(seq {seq_len}, batch {batch_size}, {max_predictions} predictions"
        f"{', whole-word' if whole_word_mask else ''}) = {result['tokens_per_s']:,} tokens/s"
    )
    return result
