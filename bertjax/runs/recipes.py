"""A family's pre-training recipe: the options a run of its `model.model_type` takes where the
run leaves them out.

`bertjax.runs.config.DEFAULTS` are BERT's recipe (the `mini` on the bundled plays); a family with
a recipe of its own (`RECIPES`: ModernBERT's) changes some of them. The recipe is the base the
options given are read over (`bertjax pretrain`'s options and `--config` file,
`bertjax.runs.config.load`, `RunConfig.from_dict`), so an option given always wins, and
`--print-config` shows the result. A model's shape is its preset's (`bertjax.config`), not a
recipe's. No framework import.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

MODEL_TYPE = "model.model_type"

# ModernBERT's (Warner et al., 2024, and its released pre-training config): a masked LM alone at
# 30% masking on packed rows, warm-up-stable-decay, and its optimizer's settings as far as
# Optax's AdamW has them (not StableAdamW's per-tensor update clipping: docs/pretraining.md):
# its beta1 0.9 and epsilon 1e-6 are the defaults already. Its weight decay of 1e-5 is fully
# decoupled (each step multiplies the weights by 1 - 1e-5 x lr_t / lr_peak); AdamW's decay is
# multiplied by lr_t, so the same decay at its peak of 8e-4 is 1e-5 / 8e-4 = 0.0125.
MODERNBERT: dict[str, Any] = {
    "train.objective": "mlm",
    "data.mask_prob": 0.3,
    "data.packing": "best-fit",
    "optim.schedule": "wsd",
    "optim.learning_rate": 8e-4,
    "optim.b2": 0.98,
    "optim.weight_decay": 0.0125,
}
RECIPES: dict[str, dict[str, Any]] = {"modernbert": MODERNBERT}


def recipe_values(model_type: object) -> dict[str, Any]:
    """`{"section.field": value}` of `model_type`'s recipe; {} for a family without one (or a
    value that names none: the options engine refuses it)."""
    return dict(RECIPES.get(model_type, {})) if isinstance(model_type, str) else {}


def asked_model_type(*values: Mapping[str, Any] | None) -> object:
    """The `model.model_type` that the last of `values` (`{"section.field": value}`, as read)
    naming one gives, or None."""
    asked = None
    for given in values:
        if given and given.get(MODEL_TYPE) is not None:
            asked = given[MODEL_TYPE]
    return asked


def recipe_notes() -> dict[str, str]:
    """Per option, what each recipe sets it to ("modernbert: 0.3"): for the options' help."""
    notes: dict[str, list[str]] = {}
    for model_type, values in RECIPES.items():
        for name, value in values.items():
            notes.setdefault(name, []).append(f"{model_type}: {value}")
    return {name: "; ".join(texts) for name, texts in notes.items()}


def recipe_comment(model_type: str) -> str:
    """`--print-config`'s comment for a run of `model_type` (TOML, read back as nothing): the
    recipe its options left out took, or "" for a family without one."""
    values = recipe_values(model_type)
    if not values:
        return ""
    return (f"# model_type {model_type}: its pre-training recipe (bertjax.runs.recipes) for the "
            "options not given:\n"
            + "".join(f"#   {name} = {json.dumps(value)}\n" for name, value in values.items()))
