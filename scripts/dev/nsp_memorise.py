#!/usr/bin/env python
"""Can the next-sentence head learn anything at all? The run's model at step 0, trained on a few
fixed training batches over and over, next-sentence loss alone: if the labels reach the loss and
the gradient reaches the pooler and the encoder, it memorises those pairs within tens of steps.

The optimizer is the run's recipe (clipping, warm-up, linear decay over the run's steps, AdamW's
decay) or, with `--no-warmup`, plain AdamW at the peak rate; `--head-rate` gives the pooler and
the NSP head a rate of their own. Prints the loss and accuracy on the batch of each logged step,
then the NSP logits of the first batch (all alike: the head says one thing for every pair).

    python scripts/dev/nsp_memorise.py RUN_DIR [--batches 4] [--steps 200] [--rate 1e-3]
"""

from __future__ import annotations

import argparse

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import nnx

from bertjax.jobs.pretrain.data import training_batches
from bertjax.jobs.pretrain.job import initialise_model
from bertjax.runs.layout import RunDir
from bertjax.train.assembly import assemble
from bertjax.train.objectives import pretraining

HEAD_MODULES = ("pooler", "nsp_head")


def optimizer(model: nnx.Module, rate: float, head_rate: float, warmup: int, steps: int,
              recipe: bool) -> optax.GradientTransformation:
    """AdamW per group (the pooler and NSP head, the rest), as the run's recipe or plain."""
    def schedule(peak: float) -> optax.Schedule | float:
        if not recipe:
            return peak
        return optax.join_schedules([optax.linear_schedule(0.0, peak, warmup),
                                     optax.linear_schedule(peak, 0.0, steps - warmup)], [warmup])

    _, params = nnx.split(model, nnx.Param)
    groups = jax.tree_util.tree_map_with_path(
        lambda path, _: "head" if any(getattr(k, "key", None) in HEAD_MODULES for k in path)
        else "body", params)
    adamw = {name: optax.adamw(schedule(peak), eps=1e-6, weight_decay=0.01)
             for name, peak in (("head", head_rate), ("body", rate))}
    split = optax.multi_transform(adamw, groups)
    return optax.chain(optax.clip_by_global_norm(1.0), split) if recipe else split


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run")
    p.add_argument("--batches", type=int, default=4, help="fixed training batches, cycled")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--rate", type=float, default=1e-3, help="peak learning rate")
    p.add_argument("--head-rate", type=float, default=None, help="the pooler's and NSP head's")
    p.add_argument("--mlm-weight", type=float, default=0.0, help="the masked LM's loss weight")
    p.add_argument("--no-warmup", action="store_true", help="plain AdamW at the peak rate")
    p.add_argument("--log-every", type=int, default=25)
    args = p.parse_args()

    config, tok = RunDir(args.run).finished_config()
    stream = training_batches(RunDir(args.run), config, tok)
    batches = [{k: jnp.asarray(v) for k, v in next(stream).items()} for _ in range(args.batches)]
    labels = np.concatenate([np.asarray(b["next_sentence_label"]) for b in batches])
    print(f"{len(labels)} fixed pairs, {int((labels == 0).sum())} IsNext")
    model = initialise_model(config, tok.vocab_size, tok.special.pad)
    tx = optimizer(model, args.rate, args.head_rate or args.rate, config.optim.warmup_steps,
                   config.train.steps, recipe=not args.no_warmup)
    training = assemble(model, tx, objective=pretraining(args.mlm_weight, 1.0))
    state = training.strategy.place_state(training.state)
    for step in range(args.steps):
        state, metrics = training.train_step(state, batches[step % len(batches)])
        if step % args.log_every == 0 or step == args.steps - 1:
            print(f"step {step:4d}  NSP loss {float(metrics['nsp_loss']):.4f}  "
                  f"accuracy {float(metrics['nsp_accuracy']):.3f}", flush=True)
    trained = nnx.merge(training.graphdef, state.params)
    b = batches[0]
    out = trained(b["input_ids"], b["token_type_ids"], b["attention_mask"], b["masked_positions"])
    print("NSP logits of the first batch:\n", np.round(np.asarray(out.nsp_logits), 3))


if __name__ == "__main__":
    main()
