"""Probe on a GPU: which formulation of the embeddings, the MLM decoder or the last layer makes
XLA keep the residual stream in (S, H, B) order and transpose it around every matmul, and what
each costs.

    python scripts/dev/gpu_layout_probe.py [--layers 4] [--batch 256] [--recheck-layers 12]

Each variant patches one function of the model (in this process only), compiles the bench's
training step (BERT-base shape with `--layers` layers, bfloat16, hidden dropout 0.1, no
attention-probability dropout, rbg, the optimizer over one vector: the README's GPU recipe, with
bertjax's GPU compiler options), counts the (S, H, B) arrays XLA left in the optimised program
and times the step (back to back and with a sync after each). A finding here is a lead: the
variant that wins goes into the model with its own parity tests.

On an H100 (a778d7842546) the step's (S, H, B) order began at the embeddings' sum and reached
the last layer's row gather's gradient (a scatter-add laid out (S, H, B)) and every layer's
dropout mask, and the position rows' gradient was a reduction over B, not the ones-vector dot
`numerics.add_broadcast` writes (XLA strength-reduces such dots): the variants after "types
select" ask which of those holds it there.

`--recheck-layers N` then times the model as it is beside the fastest candidate fix (a variant
that keeps the model's arithmetic: types select or a way of summing) at N layers, back to back.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
from flax import nnx

from bertjax import model as model_module
from bertjax import numerics
from bertjax.bench.batch import MODEL_KEYS, default_predictions, pretraining_batch
from bertjax.config import BertConfig
from bertjax.heads import BertForPreTraining
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.parallel import compiler_options
from bertjax.train.step import create_train_state, make_train_step

ORIGINAL_EMBED = model_module.BertEmbeddings.__call__
ORIGINAL_DECODER = numerics.tied_decoder
ORIGINAL_LAST_ROWS = model_module.BertModel._last_rows
ORIGINAL_SUM = numerics._sum_of_copies


def _types_select(self, input_ids, token_type_ids, position_ids=None, *, deterministic=True,
                  rngs=None):
    """`BertEmbeddings.__call__` (unpacked rows) with the token types as a sum of masked table
    rows instead of a one-hot matmul: their gradients are reductions."""
    dtype = numerics.compute_dtype_of(self.word_embeddings)
    positions = self.position_embeddings.embedding[...][: input_ids.shape[1]]  # (S, H)
    table = self.token_type_embeddings.embedding[...].astype(dtype)  # (T, H)
    types = sum(jnp.where((token_type_ids == t)[..., None], table[t], 0).astype(dtype)
                for t in range(table.shape[0]))  # (B, S, H)
    x = numerics.add_broadcast(self.word_embeddings(input_ids), positions.astype(dtype)) + types
    return self.dropout(self.layer_norm(x), deterministic=deterministic, rngs=rngs)


def _sum_as(kind: str) -> Callable:
    """`numerics._sum_of_copies` (the broadcast adds' and LayerNorm's parameter gradients) another
    way: XLA may strength-reduce a dot with a vector of ones back into a reduction, whose summed
    axis it then lays out minor (the (S, H, B) order)."""
    def sum_of_copies(g: jax.Array, y: jax.Array) -> jax.Array:
        rows = g.reshape(-1, y.size)  # (N, Y)
        n, highest = rows.shape[0], jax.lax.Precision.HIGHEST
        if kind == "reduce":  # autodiff's own
            dy = jnp.sum(rows.astype(jnp.float32), axis=0)
        elif kind == "default precision":
            dy = jnp.dot(jnp.ones((n,), rows.dtype), rows, preferred_element_type=jnp.float32)
        elif kind == "barrier":  # ones XLA cannot see as ones
            ones = jax.lax.optimization_barrier(jnp.ones((n,), rows.dtype))
            dy = jnp.dot(ones, rows, precision=highest, preferred_element_type=jnp.float32)
        else:  # "matrix": eight rows of ones, a GEMM with no vector operand; row 0 is the sum
            dy = jnp.dot(jnp.ones((8, n), rows.dtype), rows, precision=highest,
                         preferred_element_type=jnp.float32)[0]
        return dy.reshape(y.shape).astype(y.dtype)

    return sum_of_copies


def _plain_decoder(h, embedding):
    return jnp.einsum("...h,vh->...v", h, embedding.astype(h.dtype),
                      preferred_element_type=jnp.float32)


NOW = "now (the model as it is)"
SUM_KINDS = ("reduce", "default precision", "barrier", "matrix")
# the variants that keep the model's arithmetic (the others are diagnoses)
FIXES = ("types select", *(f"sums: {kind}" for kind in SUM_KINDS))
VARIANTS: dict[str, dict[str, Any]] = {
    NOW: {"embed": ORIGINAL_EMBED},
    "before: fp32 decoder backward": {"embed": ORIGINAL_EMBED, "decoder": _plain_decoder},
    "types select": {"embed": _types_select},
    "last layer at every row (no row gather)": {"embed": ORIGINAL_EMBED,
                                                "last_rows": lambda *args: None},
    "no hidden dropout": {"embed": ORIGINAL_EMBED, "config": {"hidden_dropout_prob": 0.0}},
    **{f"sums: {kind}": {"embed": ORIGINAL_EMBED, "sum": _sum_as(kind)}
       for kind in SUM_KINDS},
}


def run_variant(config: BertConfig, batch: dict, variant: dict[str, Any], steps: int
                ) -> dict[str, float]:
    model_module.BertEmbeddings.__call__ = variant["embed"]
    numerics.tied_decoder = variant.get("decoder", ORIGINAL_DECODER)
    model_module.BertModel._last_rows = variant.get("last_rows", ORIGINAL_LAST_ROWS)
    numerics._sum_of_copies = variant.get("sum", ORIGINAL_SUM)
    config = config.replace(**variant.get("config", {}))
    try:
        oc = OptimConfig(flatten=True)
        tx = make_optimizer(oc, 1_000_000)
        graphdef, state = create_train_state(BertForPreTraining(config, rngs=nnx.Rngs(0)), tx, 0,
                                             "rbg")
        step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(oc, 1_000_000), prng_impl="rbg"),
                       donate_argnums=0,
                       compiler_options=compiler_options(jax.devices()[0].platform))
        start = time.perf_counter()
        compiled = step.lower(state, batch).compile()
        compile_s = time.perf_counter() - start
        hlo = compiled.as_text()
        B, S, H = batch["input_ids"].shape + (config.hidden_size,)
        transposes = len(re.findall(rf"\[{S},{H},{B}\]", hlo))
        state, metrics = compiled(state, batch)
        for _ in range(3):
            state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        synced = []
        for _ in range(steps):
            t = time.perf_counter()
            state, metrics = compiled(state, batch)
            jax.block_until_ready(metrics)
            synced.append(time.perf_counter() - t)
        t = time.perf_counter()
        for _ in range(steps):
            state, metrics = compiled(state, batch)
        jax.block_until_ready(metrics)
        return {"compile_s": compile_s, "synced_ms": 1e3 * statistics.median(synced),
                "pipelined_ms": 1e3 * (time.perf_counter() - t) / steps,
                "shs_shapes": transposes, "loss": float(metrics["loss"])}
    finally:
        model_module.BertEmbeddings.__call__ = ORIGINAL_EMBED
        numerics.tied_decoder = ORIGINAL_DECODER
        model_module.BertModel._last_rows = ORIGINAL_LAST_ROWS
        numerics._sum_of_copies = ORIGINAL_SUM


def _run(args: argparse.Namespace, layers: int, name: str) -> dict[str, float]:
    """One variant's row at `layers` layers (`--preset`'s other sizes: the bench's BERT-base)."""
    config = BertConfig.from_preset(args.preset, num_hidden_layers=layers, dtype="bfloat16",
                                    hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.0)
    host = pretraining_batch(config, args.batch, args.seq, default_predictions(args.seq), 0)
    batch = {k: jnp.asarray(host[k]) for k in MODEL_KEYS}
    return run_variant(config, batch, VARIANTS[name], args.steps)


def _row(name: str, r: dict[str, float]) -> dict[str, float]:
    """Print one variant's row of the table; returns `r`."""
    print(f"{name:42s} {r['compile_s']:9.1f} {r['synced_ms']:9.1f} {r['pipelined_ms']:12.1f} "
          f"{r['shs_shapes']:14d} {r['loss']:8.4f}", flush=True)
    return r


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="base", help="the model's other sizes (tiny: the "
                        "suite's CPU run of the script)")
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--recheck-layers", type=int, default=0,
                        help="then time the model as it is and the fastest fix at this depth")
    args = parser.parse_args(argv)
    print(f"layout probe: {args.preset} shape, {args.layers} layers, batch {args.batch}, "
          f"seq {args.seq}, bf16, recipe dropout; {jax.devices()[0].device_kind}")
    print(f"{'variant':42s} {'compile s':>9s} {'synced ms':>9s} {'pipelined ms':>12s} "
          f"{'(S,H,B) arrays':>14s} {'loss':>8s}")
    results = {name: _row(name, _run(args, args.layers, name)) for name in VARIANTS}
    if args.recheck_layers:
        best = min(FIXES, key=lambda name: results[name]["pipelined_ms"])
        print(f"recheck at {args.recheck_layers} layers: the model as it is beside the fastest "
              f"fix, {best!r}")
        for name in (NOW, best):
            _row(name, _run(args, args.recheck_layers, name))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
