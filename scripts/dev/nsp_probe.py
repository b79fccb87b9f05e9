#!/usr/bin/env python
"""What a pre-training model's states hold for next-sentence prediction, by linear probes.

For a run's model (at step 0, as `bertjax pretrain` initialises it with the run's configuration
and any `section.field=value` overrides, or at its best checkpoint), it prints:

- where [CLS] looks: each layer's heads' share of [CLS]'s attention on segment B (one training
  batch), beside B's share of the tokens;
- ridge-regression probes fitted on the states of `--train-batches` training batches and scored
  on the held-out pairs every evaluation uses: [CLS] after layer 2 and after the last layer, the
  pooled output, and the two segments' mean states side by side. A probe near 0.5 says the
  state holds nothing a linear NSP head could read.

    python scripts/dev/nsp_probe.py RUN_DIR [--init] [--train-batches 1000] [section.field=value ...]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from nsp_gradients import run_model  # noqa: E402

from bertjax.heads import BertForPreTraining  # noqa: E402
from bertjax.jobs.pretrain.data import held_out_batches, training_batches  # noqa: E402
from bertjax.runs.layout import RunDir  # noqa: E402

LAMBDAS = (10.0, 1000.0)


def states(model: BertForPreTraining, batches: list[dict]) -> dict[str, np.ndarray]:
    """{name: (N, F) features}, and "label" (N,), over the pairs of `batches`."""
    graphdef, params = nnx.split(model)

    @jax.jit
    def features(params: nnx.State, ids: jax.Array, types: jax.Array, mask: jax.Array) -> dict:
        out = nnx.merge(graphdef, params).bert(ids, types, mask, output_hidden_states=True)
        last = out.hidden_states[-1]  # (B, S, H)
        real = mask[..., None].astype(last.dtype)  # (B, S, 1)
        in_b = real * (types[..., None] == 1)
        in_a = real - in_b
        means = jnp.concatenate([(last * in_a).sum(1) / in_a.sum(1),
                                 (last * in_b).sum(1) / in_b.sum(1)], axis=-1)  # (B, 2H)
        return {"[CLS] after layer 2": out.hidden_states[2][:, 0], "[CLS] last layer": last[:, 0],
                "pooled output": out.pooled_output, "segment means (A; B)": means}

    rows: dict[str, list[np.ndarray]] = {}
    for b in batches:
        out = features(params, *(jnp.asarray(b[k]) for k in
                                  ("input_ids", "token_type_ids", "attention_mask")))
        for name, value in {**out, "label": b["next_sentence_label"]}.items():
            rows.setdefault(name, []).append(np.asarray(value))
    return {name: np.concatenate(parts) for name, parts in rows.items()}


def ridge_accuracy(x: np.ndarray, y: np.ndarray, x_eval: np.ndarray, y_eval: np.ndarray,
                   lam: float) -> tuple[float, float]:
    """(training, held-out) accuracy of a ridge classifier on standardised features."""
    mu, sd = x.mean(0), x.std(0) + 1e-6
    design = np.c_[(x - mu) / sd, np.ones(len(x))]
    w = np.linalg.solve(design.T @ design + lam * np.eye(design.shape[1]),
                        design.T @ (2.0 * y - 1.0))
    held = np.c_[(x_eval - mu) / sd, np.ones(len(x_eval))]
    return float(np.mean((design @ w > 0) == (y == 1))), float(np.mean((held @ w > 0) == (y_eval == 1)))


def cls_attention(model: BertForPreTraining, batch: dict) -> str:
    out = model.bert(*(jnp.asarray(batch[k]) for k in ("input_ids", "token_type_ids",
                                                       "attention_mask")), output_attentions=True)
    types, mask = batch["token_type_ids"], batch["attention_mask"]
    lines = [f"segment B holds {(types * mask).sum() / mask.sum():.3f} of the tokens; [CLS]'s "
             "attention on B per head:"]
    for layer, probs in enumerate(out.attentions):
        share = (np.asarray(probs)[:, :, 0, :] * types[:, None, :]).sum(-1).mean(0)  # (A,)
        lines.append(f"  layer {layer + 1}: " + " ".join(f"{s:.3f}" for s in share))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run_dir")
    p.add_argument("overrides", nargs="*", help="section.field=value, for --init")
    p.add_argument("--init", action="store_true", help="the run's model at step 0")
    p.add_argument("--train-batches", type=int, default=1000)
    args = p.parse_args(argv)
    run = RunDir(args.run_dir)
    model, config, tok = run_model(run, init=args.init,
                                   overrides=dict(o.split("=", 1) for o in args.overrides))
    train = training_batches(run, config, tok)
    fitted = [next(train) for _ in range(args.train_batches)]
    print(f"{run.root} {'at step 0 ' + ' '.join(args.overrides) if args.init else 'trained'}")
    print(cls_attention(model, fitted[0]))
    x, held = states(model, fitted), states(model, held_out_batches(run, config, tok))
    print(f"| state | probe on {len(x['label'])} training pairs: training / held-out accuracy, "
          + ", ".join(f"lambda {lam:g}" for lam in LAMBDAS) + " |\n|---|---|")
    for name in x:
        if name != "label":
            cells = [ridge_accuracy(x[name], x["label"], held[name], held["label"], lam)
                     for lam in LAMBDAS]
            print(f"| {name} | " + "; ".join(f"{a:.3f} / {b:.3f}" for a, b in cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
