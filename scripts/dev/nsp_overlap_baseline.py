#!/usr/bin/env python
"""How much next-sentence signal a run's pairs carry that needs no model: piece overlap.

For each pair [CLS] A [SEP] B [SEP] (as the model sees it, masked), the feature is the share of
B's distinct pieces (specials and [MASK] left out) that also occur in A, or with `--feature
tfidf` the cosine of the two segments' piece counts weighted by inverse document frequency
(the training pairs' segments are the documents). A continuation from the same scene shares
names, words and spelling with A more often than a segment from another play; a threshold
fitted on the run's training batches is then scored on its held-out batches (the pairs every
evaluation uses). A model whose NSP accuracy stays under this has not yet learnt even to compare
its two segments' words.

    python scripts/nsp_overlap_baseline.py RUN_DIR [--train-batches 2000] [--feature tfidf]

For a run on the bundled plays it first says how often a NotNext pair's B comes from A's own
play (`data.not_next`: "any" other scene, or "far"), in the run's training and held-out pairs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

import numpy as np

from bertjax.data.batches import PretrainingBatches
from bertjax.data.formats.text import read_utf8
from bertjax.data.shakespeare import parse_play, shakespeare_play_files, shakespeare_plays
from bertjax.jobs.pretrain.data import EVAL_SEED, held_out_batches, training_batches
from bertjax.runs.layout import RunDir


def overlaps(batches: Iterable[dict], special: set[int]) -> tuple[np.ndarray, np.ndarray]:
    """(feature, label) per pair: the share of B's distinct pieces found in A; 1 = NotNext."""
    features, labels = [], []
    for b in batches:
        for ids, types, mask, label in zip(b["input_ids"], b["token_type_ids"],
                                           b["attention_mask"], b["next_sentence_label"],
                                           strict=True):
            real = mask > 0
            a = {int(t) for t in ids[real & (types == 0)]} - special
            b_pieces = {int(t) for t in ids[real & (types == 1)]} - special
            features.append(len(a & b_pieces) / max(len(b_pieces), 1))
            labels.append(int(label))
    return np.asarray(features), np.asarray(labels)


def piece_counts(batches: Iterable[dict], vocab: int, special: set[int]
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(A's piece counts (N, V), B's (N, V), label (N,)) per pair, specials and [MASK] left out."""
    a_rows, b_rows, labels = [], [], []
    for b in batches:
        for ids, types, mask, label in zip(b["input_ids"], b["token_type_ids"],
                                           b["attention_mask"], b["next_sentence_label"],
                                           strict=True):
            real = mask > 0
            a_rows.append(np.bincount(ids[real & (types == 0)], minlength=vocab))
            b_rows.append(np.bincount(ids[real & (types == 1)], minlength=vocab))
            labels.append(int(label))
    a, b = np.stack(a_rows).astype(float), np.stack(b_rows).astype(float)
    a[:, sorted(special)] = b[:, sorted(special)] = 0.0
    return a, b, np.asarray(labels)


def tfidf_cosines(a: np.ndarray, b: np.ndarray, idf: np.ndarray) -> np.ndarray:
    """The cosine of each pair's two segments' piece counts, weighted by `idf`."""
    x, y = a * idf, b * idf
    norms = np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1)
    return np.einsum("nv,nv->n", x, y) / np.maximum(norms, 1e-12)


def best_threshold(feature: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """The threshold t (IsNext when feature >= t) with the best accuracy, and that accuracy."""
    candidates = np.unique(feature)
    accuracy = [np.mean((feature >= t) == (label == 0)) for t in candidates]
    i = int(np.argmax(accuracy))
    return float(candidates[i]), float(accuracy[i])


def same_play_share(batches: PretrainingBatches, split: str) -> float:
    """The share of the NotNext pairs (all of them, in the pair table) whose B comes from the
    play A comes from; the documents of a Shakespeare split are its plays' scenes, in order."""
    files = shakespeare_play_files()
    play_of = np.concatenate([np.full(sum(1 for _ in parse_play(read_utf8(files[name]))), i)
                              for i, name in enumerate(shakespeare_plays(split))])
    starts = batches.shards.document_token_offsets()
    pairs = np.asarray(batches.pairs)
    not_next = pairs[:, 4] == 1
    play_a = play_of[np.searchsorted(starts, pairs[not_next, 0], side="right") - 1]
    play_b = play_of[np.searchsorted(starts, pairs[not_next, 2], side="right") - 1]
    return float(np.mean(play_a == play_b))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--train-batches", type=int, default=2000)
    p.add_argument("--feature", choices=("overlap", "tfidf"), default="overlap")
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    config, tok = run.finished_config()
    s = tok.special
    special = {s.pad, s.cls, s.sep, s.mask, s.unk}
    train = training_batches(run, config, tok)
    if config.data.corpus == "shakespeare":
        held = PretrainingBatches(run.data("eval"), seed=EVAL_SEED, seq_len=config.data.seq_len,
                                  global_batch_size=config.data.batch_size,
                                  max_predictions=config.data.predictions, tokenizer=tok,
                                  not_next=config.data.not_next)
        print(f"NotNext pairs whose B is from A's play (data.not_next={config.data.not_next}): "
              f"training {same_play_share(train, 'train'):.3f}, held-out "
              f"{same_play_share(held, 'eval'):.3f}")
    train_batches = [next(train) for _ in range(args.train_batches)]
    if args.feature == "overlap":
        threshold, train_accuracy = best_threshold(*overlaps(train_batches, special))
        feature, label = overlaps(held_out_batches(run, config, tok), special)
    else:
        a, b, train_label = piece_counts(train_batches, tok.vocab_size, special)
        segments = np.concatenate([a, b]) > 0
        idf = np.log((len(segments) + 1) / (segments.sum(axis=0) + 1))
        threshold, train_accuracy = best_threshold(tfidf_cosines(a, b, idf), train_label)
        a, b, label = piece_counts(held_out_batches(run, config, tok), tok.vocab_size, special)
        feature = tfidf_cosines(a, b, idf)
    accuracy = float(np.mean((feature >= threshold) == (label == 0)))
    what = "B's pieces found in A" if args.feature == "overlap" else "TF-IDF cosine of A and B"
    print(f"{len(label)} held-out pairs ({np.mean(label == 0):.3f} IsNext): {what}, IsNext "
          f"{feature[label == 0].mean():.3f} vs NotNext {feature[label == 1].mean():.3f}")
    print(f"threshold {threshold:.3f} (training accuracy {train_accuracy:.3f}): held-out NSP "
          f"accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
