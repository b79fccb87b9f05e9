#!/usr/bin/env python
"""What a masked LM that ignores context scores on a run's held-out batches.

The predictor sees only the token at the masked position itself ([MASK] 80% of the time, a random
token 10%, the true token 10%) and answers with the target distribution measured for that input
token on the run's training batches. A model whose held-out accuracy equals this one's has learnt
to copy the unchanged 10% and to guess the commonest token under [MASK]: no context.

    python scripts/context_free_baseline.py RUN_DIR [--train-batches 3000]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable, Iterator

import numpy as np

from bertjax.jobs.pretrain.data import held_out_batches, training_batches
from bertjax.runs.layout import RunDir


def inputs_and_targets(batches: Iterable[dict]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Per batch: the input token at each real masked position and its target."""
    for b in batches:
        real = b["masked_weights"] > 0
        seen = np.take_along_axis(b["input_ids"], b["masked_positions"], axis=1)  # (B, P)
        yield seen[real], b["masked_ids"][real]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("--train-batches", type=int, default=3000)
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    config, tok = run.finished_config()
    train = training_batches(run, config, tok)
    counts = np.full((tok.vocab_size, tok.vocab_size), 1e-3)  # (input, target), smoothed
    for seen, target in inputs_and_targets(next(train) for _ in range(args.train_batches)):
        np.add.at(counts, (seen, target), 1.0)
    probs = counts / counts.sum(axis=1, keepdims=True)
    pairs = list(inputs_and_targets(held_out_batches(run, config, tok)))
    seen = np.concatenate([s for s, _ in pairs])
    target = np.concatenate([t for _, t in pairs])
    commonest = np.bincount(target).max() / len(target)
    print(f"{len(target)} held-out predictions: [MASK] {np.mean(seen == tok.special.mask):.3f}, "
          f"unchanged {np.mean(seen == target):.3f}")
    print(f"most frequent target: accuracy {commonest:.4f}")
    print(f"context-free predictor: accuracy {np.mean(probs[seen].argmax(1) == target):.4f} "
          f"(x{np.mean(probs[seen].argmax(1) == target) / commonest:.2f}), loss "
          f"{-np.log(probs[seen, target]).mean():.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
