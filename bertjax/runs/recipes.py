"""Pre-training recipes: the options a run of a family (`model.model_type`) or of an objective
(`train.objective`) takes where the run leaves them out.

`bertjax.runs.config.DEFAULTS` are BERT's recipe (the `mini` on the bundled plays); a family with
a recipe of its own (`RECIPES`: ModernBERT's) changes some of them, and so does an objective with
one (`OBJECTIVE_RECIPES`: ELECTRA's), over the family's. The recipe is the base the
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
OBJECTIVE = "train.objective"
RECIPE_OPTIONS = (MODEL_TYPE, OBJECTIVE)  # the options whose values have recipes

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

# ELECTRA's replaced-token detection (Clark et al., 2020): the learning rate of a sweep of the mini
# generator + discriminator on the bundled plays, 1,316 steps each, judged by the held-out
# replaced-token loss: 1e-3 (BERT's recipe) 0.404, the labels' entropy (precision and recall 0:
# the discriminator never left the base rate; 7e-4 likewise at its half-way evaluation), 5e-4
# 0.367, 3e-4 0.326, 2e-4 0.336. ELECTRA-Small's published rate is 5e-4 (at batch 128).
ELECTRA: dict[str, Any] = {"optim.learning_rate": 3e-4}
OBJECTIVE_RECIPES: dict[str, dict[str, Any]] = {"electra": ELECTRA}

Asked = tuple[object, object]  # (model.model_type, train.objective) as given, None where not


def recipe_values(model_type: object, objective: object = None) -> dict[str, Any]:
    """`{"section.field": value}` of `model_type`'s recipe, then `objective`'s over it; {} for
    a family and an objective without one (or a value that names none: the options engine
    refuses it)."""
    values = dict(RECIPES.get(model_type, {})) if isinstance(model_type, str) else {}
    return {**values, **(OBJECTIVE_RECIPES.get(objective, {}) if isinstance(objective, str) else {})}


def asked_recipe(*values: Mapping[str, Any] | None) -> Asked:
    """The `model.model_type` and `train.objective` that the last of `values`
    (`{"section.field": value}`, as read) naming each gives, or None."""
    asked: dict[str, object] = dict.fromkeys(RECIPE_OPTIONS)
    for given in values:
        for name in asked:
            if given and given.get(name) is not None:
                asked[name] = given[name]
    return asked[MODEL_TYPE], asked[OBJECTIVE]


def recipe_notes() -> dict[str, str]:
    """Per option, what each recipe sets it to ("modernbert: 0.3", "objective electra: 0.0003"):
    for the options' help."""
    notes: dict[str, list[str]] = {}
    for who, recipes in (("", RECIPES), ("objective ", OBJECTIVE_RECIPES)):
        for key, values in recipes.items():
            for name, value in values.items():
                notes.setdefault(name, []).append(f"{who}{key}: {value}")
    return {name: "; ".join(texts) for name, texts in notes.items()}


def recipe_lines() -> list[str]:
    """One line per recipe, its option and what it sets: for `bertjax pretrain --help`."""
    return [f"--{option.replace('_', '-')} {key}: " + ", ".join(
        f"{name}={value}" for name, value in values.items())
        for option, recipes in ((MODEL_TYPE, RECIPES), (OBJECTIVE, OBJECTIVE_RECIPES))
        for key, values in recipes.items()]


def recipe_comment(model_type: str, objective: str | None = None) -> str:
    """`--print-config`'s comment for a run of `model_type` and `objective` (TOML, read back as
    nothing): the recipes its options left out took, or "" where none applies."""
    values = recipe_values(model_type, objective)
    if not values:
        return ""
    whose = " and ".join([f"model_type {model_type}"] * bool(recipe_values(model_type))
                         + [f"objective {objective}"] * bool(recipe_values(None, objective)))
    return (f"# {whose}: its pre-training recipe (bertjax.runs.recipes) for the "
            "options not given:\n"
            + "".join(f"#   {name} = {json.dumps(value)}\n" for name, value in values.items()))
