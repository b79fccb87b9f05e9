#!/usr/bin/env python
"""How much next-sentence signal a run's pairs carry that needs no model: piece overlap.

For each pair [CLS] A [SEP] B [SEP] (as the model sees it, masked), the feature is the share of
B's distinct pieces (specials and [MASK] left out) that also occur in A. A continuation from the
same scene shares names, words and spelling with A more often than a segment from another play;
a threshold fitted on the run's training batches is then scored on its held-out batches (the
pairs every evaluation uses). A model whose NSP accuracy stays under this has not yet learnt
even to compare its two segments' words.

    python scripts/nsp_overlap_baseline.py RUN_DIR [--train-batches 2000]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable

import numpy as np

from bertjax.jobs.pretrain.data import held_out_batches, training_batches
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


def best_threshold(feature: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """The threshold t (IsNext when feature >= t) with the best accuracy, and that accuracy."""
    candidates = np.unique(feature)
    accuracy = [np.mean((feature >= t) == (label == 0)) for t in candidates]
    i = int(np.argmax(accuracy))
    return float(candidates[i]), float(accuracy[i])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--train-batches", type=int, default=2000)
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    config, tok = run.finished_config()
    s = tok.special
    special = {s.pad, s.cls, s.sep, s.mask, s.unk}
    train = training_batches(run, config, tok)
    threshold, train_accuracy = best_threshold(
        *overlaps((next(train) for _ in range(args.train_batches)), special))
    feature, label = overlaps(held_out_batches(run, config, tok), special)
    accuracy = float(np.mean((feature >= threshold) == (label == 0)))
    print(f"{len(label)} held-out pairs ({np.mean(label == 0):.3f} IsNext): B's pieces found in "
          f"A, IsNext {feature[label == 0].mean():.3f} vs NotNext {feature[label == 1].mean():.3f}")
    print(f"threshold {threshold:.3f} (training accuracy {train_accuracy:.3f}): held-out NSP "
          f"accuracy {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
