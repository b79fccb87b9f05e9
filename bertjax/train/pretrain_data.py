"""The pre-training job's data: vocabulary, shards, the training batches, the held-out batches
and the baseline every evaluation is compared with."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import jax
import numpy as np

from bertjax.data.batches import PretrainingBatches
from bertjax.data.corpus import corpus_documents
from bertjax.data.shards import write_shards
from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.train import run_config as rc
from bertjax.train.distributed import barrier, gather_rows
from bertjax.train.rundir import RunDir

EVAL_SEED = 12345  # the held-out batches' masks and pairs: the same in every evaluation and run

Batch = dict[str, np.ndarray]


@dataclasses.dataclass
class PretrainData:
    """What the loop needs from the data pipeline."""

    train: PretrainingBatches  # iterator of batches with get_state() / set_state(state)
    eval_batches: list[Batch]  # fixed held-out batches (this process's rows)
    vocab_size: int
    baseline_token: str  # the most frequent held-out target (all processes' rows)
    baseline_accuracy: float  # the accuracy of always predicting it

    def batches_with_state(self) -> Iterator[tuple[Batch, dict[str, Any]]]:
        """Training batches, each with the iterator state right after it (what a checkpoint
        taken after that batch's step must hold)."""
        for batch in self.train:
            yield batch, self.train.get_state()


def open_data(config: rc.RunConfig, run: RunDir) -> PretrainData:
    """Vocabulary (trained on the training split), shards, batches; made once per run directory.

    The vocabulary and the tokenised shards are made once and reused on resume (the same
    corpus makes the same ones, but the corpus may have changed since). With several processes
    only process 0 makes them; the others wait for it, then read its files.
    """
    d = config.data
    splits = ("train", "eval")
    if jax.process_index() == 0:
        if not run.tokenizer.is_file():
            sentences = (s for doc in corpus_documents(d.corpus, split="train") for s in doc)
            WordPieceTokenizer.train(sentences, vocab_size=d.vocab_size).save(run.root)
        tok = WordPieceTokenizer.load(run.tokenizer)
        for split in splits:
            if not (run.data(split) / "meta.json").is_file():
                write_shards(corpus_documents(d.corpus, split=split), tok, run.data(split),
                             corpus=d.corpus, overwrite=True)
    barrier("bertjax_pretrain_data_ready")  # process 0's vocabulary and shards are on disk
    tok = WordPieceTokenizer.load(run.tokenizer)
    common = dict(seq_len=d.seq_len, global_batch_size=d.batch_size,
                  max_predictions=d.max_predictions, mask_prob=d.mask_prob,
                  process_index=jax.process_index(), process_count=jax.process_count(),
                  tokenizer=tok)
    train = PretrainingBatches(run.data("train"), seed=config.train.seed, **common)
    held_out = PretrainingBatches(run.data("eval"), seed=EVAL_SEED, **common)
    eval_batches = [next(held_out) for _ in range(d.eval_batches)]
    token, accuracy = baseline(gather_rows(eval_batches, ("masked_ids", "masked_weights")))
    return PretrainData(train=train, eval_batches=eval_batches, vocab_size=tok.vocab_size,
                        baseline_token=tok.id_to_token(token), baseline_accuracy=accuracy)


def baseline(batches: list[Batch]) -> tuple[int, float]:
    """The most frequent masked target of `batches` and the accuracy of always guessing it."""
    counts: dict[int, float] = {}
    total = 0.0
    for b in batches:
        ids = np.asarray(b["masked_ids"]).ravel()
        w = np.asarray(b["masked_weights"], np.float64).ravel()
        total += float(w.sum())
        for token, weight in zip(*np.unique(ids[w > 0], return_counts=True), strict=True):
            counts[int(token)] = counts.get(int(token), 0.0) + float(weight)
    if not counts:
        return 0, 0.0
    token = max(counts, key=lambda t: (counts[t], -t))
    return token, counts[token] / total


def accuracy_ratio(accuracy: float, baseline_accuracy: float) -> float:
    """How many times the baseline's accuracy `accuracy` is (inf for a zero baseline)."""
    return accuracy / baseline_accuracy if baseline_accuracy else float("inf")

