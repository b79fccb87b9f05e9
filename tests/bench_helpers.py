"""What the tests of `bertjax bench train|infer` share (no tests here): the options of a bench
run small enough for a test, the fields every row of a report has, and the matmul FLOPs of a
jaxpr, counted independently of `bertjax.bench.flops`."""

from __future__ import annotations

import numpy as np
from jax.extend import core as jax_core

# a `bench train|infer` run in seconds: the tiny preset, a few short steps, a small GEMM
TINY = ["--preset", "tiny", "--seq", "16", "--batch", "4", "--steps", "2", "--warmup", "1",
        "--gemm-size", "128"]
ROW_FIELDS = {
    "row", "impl", "dtype", "tokens_per_s", "vs_hf_eager", "vs_hf_eager_row", "vs_hf_compiled",
    "vs_hf_compiled_row", "model_flops_per_token", "achieved_flops_per_s", "mfu_vs_gemm",
    "mfu_vs_datasheet", "median_step_s", "median_dispatch_s", "p10_step_s", "p90_step_s",
    "pipelined_step_s", "pipelined_tokens_per_s", "first_step_s", "peak_memory_bytes",
    "memory_source", "loss", "parameters", "model_class", "matmul_precision", "xla_options",
    "host_memory", "device", "versions", "step_times_s",
}


def dot_flops(jaxpr: jax_core.Jaxpr) -> int:
    """2 x multiply-adds of every dot_general in a jaxpr, nested jaxprs included."""
    total = 0
    for eqn in jaxpr.eqns:
        if eqn.primitive.name == "dot_general":
            (contract, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            out = eqn.outvars[0].aval.shape
            total += 2 * int(np.prod(out)) * int(np.prod([lhs[d] for d in contract]))
        for value in eqn.params.values():
            for sub in value if isinstance(value, list | tuple) else [value]:
                if isinstance(sub, jax_core.ClosedJaxpr):
                    total += dot_flops(sub.jaxpr)
                elif isinstance(sub, jax_core.Jaxpr):
                    total += dot_flops(sub)
    return total
