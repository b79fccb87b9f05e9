#!/usr/bin/env python
"""The parity table of docs/families.md: for each family, bertjax against transformers 5 on the
fixtures of tests/fixtures/families (every class; transformers' own outputs and gradients, in
float32 and float64), measured on this machine.

    .venv/bin/python scripts/dev/family_parity.py      # prints the Markdown table

Per family: the largest |difference| of any output of any class from transformers' float32
outputs, transformers' own float32 distance from its float64 run on the same weights (the noise the
parity rule allows three times of), and the largest difference of any parameter's gradient,
relative to that gradient's largest magnitude (at least 1). tests/model/test_families.py asserts the same
numbers against the bar; this script only reports them.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from flax import nnx  # noqa: E402

import bertjax  # noqa: E402
from bertjax.config.families import FAMILIES  # noqa: E402
from bertjax.config.heads import MODELS  # noqa: E402
from bertjax.io.hf import hf_name  # noqa: E402
from bertjax.io.weights import state_to_numpy  # noqa: E402

ROOT = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "families"
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _measure(directory: Path) -> tuple[str, float, float, float]:
    """(class, max |output diff|, transformers' float32 noise, max relative gradient diff)."""
    model = bertjax.load_hf(directory)
    saved = dict(np.load(directory / "outputs.npz"))
    inputs = [jnp.asarray(saved[k]) if k in saved else None for k in INPUTS]
    fields = {o: t for o, t in MODELS[type(model).__name__].hf_outputs.items() if t in saved}
    with jax.default_matmul_precision("highest"):
        out = model(*inputs)

        def loss(m):
            o = m(*inputs)
            return sum(jnp.sum(getattr(o, ours) * saved[f"loss_weight/{theirs}"])
                       for ours, theirs in fields.items())

        grads = state_to_numpy(nnx.grad(loss)(model))
    diff = max(float(np.abs(np.asarray(getattr(out, o)) - saved[t]).max())
               for o, t in fields.items())
    noise = max(float(np.abs(saved[t] - saved[f"{t}@float64"]).max()) for t in fields.values())
    prefix, family = type(model).base_model_prefix, model.config.model_type
    grad = max(float(np.abs(v - saved[f"grad/{hf_name(k, prefix, family)}"]).max()
                     / max(1.0, np.abs(saved[f"grad/{hf_name(k, prefix, family)}"]).max()))
               for k, v in grads.items())
    return type(model).__name__, diff, noise, grad


def main() -> None:
    print("| family | classes | outputs: max abs diff | transformers' own float32 noise "
          "| gradients: max rel diff |")
    print("|---|---|---|---|---|")
    for model_type in (f for f in FAMILIES if f != "bert"):
        rows = [_measure(d) for d in sorted((ROOT / model_type).iterdir()) if d.is_dir()]
        print(f"| {model_type} | {len(rows)} | {max(r[1] for r in rows):.1e} "
              f"| {max(r[2] for r in rows):.1e} | {max(r[3] for r in rows):.1e} |")


if __name__ == "__main__":
    main()
