#!/usr/bin/env python
"""How hard next-sentence prediction pulls on the model, against the masked LM: gradient sizes.

For a run's model (at step 0, as `bertjax pretrain` initialises it, or at a checkpoint) and its
training batches, the gradients of the two losses are taken apart, parameter group by group
(the embeddings, each layer's attention and feed-forward weights, the pooler and the two heads).
Per group it prints:

- `|g|`: the mean over batches of each batch's gradient norm (what one step sees), for MLM and NSP;
- `|mean g|`: the norm of the gradient averaged over the batches (the part of it that points the
  same way from batch to batch: the signal), and `coherence` = |mean g| / mean |g| (1: every batch
  agrees; about 1/sqrt(batches): noise);
- `NSP/MLM`: the ratio of the two losses' mean per-batch norms in that group.

Adam divides each parameter's update by its own gradient scale, so the pooler and the NSP head
(which MLM never reaches) move at the full rate whatever their gradient's size; in the shared
encoder the step follows the sum of the two gradients, and NSP steers it only as far as its share.

    python scripts/dev/nsp_gradients.py RUN_DIR [--step N | --init] [--batches 32]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.common.options import build
from bertjax.data.tokenizer import Tokenizer
from bertjax.heads import BertForPreTraining
from bertjax.jobs.pretrain.data import training_batches
from bertjax.jobs.pretrain.job import initialise_model
from bertjax.losses import pretraining_sums
from bertjax.pretrained import from_pretrained
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir


def group_of(path: tuple) -> str:
    """A parameter's group from its path in the model's state."""
    names = [str(p) for p in path]
    if names[0] in ("mlm_head", "nsp_head"):
        return names[0]
    if names[1] == "embeddings":
        return "embeddings"
    if names[1] == "pooler":
        return "pooler"
    if names[1] == "layers":
        part = "attention" if names[3] == "attention" else "feed-forward"
        return f"layer {int(names[2]) + 1} {part}"
    return names[1]


def batch_gradients(model: BertForPreTraining, batches: Iterator[dict], n: int
                    ) -> dict[str, dict[str, np.ndarray]]:
    """{loss: {group: (n, group size) gradients, one row per batch}}."""
    graphdef, params = nnx.split(model, nnx.Param)

    def losses(p: nnx.State, batch: dict) -> tuple[jax.Array, jax.Array]:
        m = nnx.merge(graphdef, p)
        out = m(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"])
        sums = pretraining_sums(out.mlm_logits, out.nsp_logits, batch)
        return sums["mlm_loss_sum"] / sums["mlm_weight"], sums["nsp_loss_sum"] / sums["nsp_count"]

    grads = jax.jit(lambda p, b: (jax.grad(lambda q: losses(q, b)[0])(p),
                                  jax.grad(lambda q: losses(q, b)[1])(p)))
    rows: dict[str, dict[str, list[np.ndarray]]] = {"MLM": {}, "NSP": {}}
    for _ in range(n):
        batch = {k: jnp.asarray(v) for k, v in next(batches).items()}
        for name, g in zip(("MLM", "NSP"), grads(params, batch), strict=True):
            flat: dict[str, list[np.ndarray]] = {}
            for path, leaf in jax.tree_util.tree_flatten_with_path(g)[0]:
                keys = tuple(getattr(k, "key", getattr(k, "idx", k)) for k in path)
                flat.setdefault(group_of(keys), []).append(np.asarray(leaf).ravel())
            for group, parts in flat.items():
                rows[name].setdefault(group, []).append(np.concatenate(parts))
    return {name: {g: np.stack(v) for g, v in groups.items()} for name, groups in rows.items()}


def table(grads: dict[str, dict[str, np.ndarray]]) -> str:
    lines = ["| group | MLM mean \\|g\\| | NSP mean \\|g\\| | NSP/MLM | MLM coherence | "
             "NSP coherence |", "|---|---|---|---|---|---|"]
    for group in grads["MLM"]:
        cells = []
        for name in ("MLM", "NSP"):
            g = grads[name][group]
            per_batch = float(np.mean(np.linalg.norm(g, axis=1)))
            signal = float(np.linalg.norm(g.mean(axis=0)))
            cells.append((per_batch, signal / per_batch if per_batch else float("nan")))
        (mlm, mlm_c), (nsp, nsp_c) = cells
        ratio = nsp / mlm if mlm else float("inf")
        lines.append(f"| {group} | {mlm:.3g} | {nsp:.3g} | {ratio:.3g} | {mlm_c:.2f} | "
                     f"{nsp_c:.2f} |")
    return "\n".join(lines)


def run_model(run: RunDir, *, init: bool, step: int | None = None,
              overrides: dict[str, str] | None = None
              ) -> tuple[BertForPreTraining, rc.RunConfig, Tokenizer]:
    """(model, configuration, tokenizer) of a run: its model at step 0 as `bertjax pretrain`
    initialises it (with `overrides` on its configuration), or a checkpoint (the best by
    default)."""
    config, tok = run.finished_config()
    if init:
        config = build(rc.RunConfig, overrides or {}, base=config)
        return initialise_model(config, tok.vocab_size), config, tok
    model, _ = from_pretrained(run.root, step=step, model_cls=BertForPreTraining)
    return model, config, tok


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    at = p.add_mutually_exclusive_group()
    at.add_argument("--step", type=int, default=None, help="checkpoint (default: the best)")
    at.add_argument("--init", action="store_true", help="the run's model at step 0")
    p.add_argument("--batches", type=int, default=32)
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    model, config, tok = run_model(run, init=args.init, step=args.step)
    grads = batch_gradients(model, training_batches(run, config, tok), args.batches)
    where = "step 0" if args.init else f"checkpoint {args.step or 'best'}"
    print(f"{run.root} at {where}, {args.batches} training batches of {config.data.batch_size}")
    print(table(grads))
    return 0


if __name__ == "__main__":
    sys.exit(main())
