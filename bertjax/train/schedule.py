"""The optimizer settings, the weight-decay rule and the learning-rate schedule as plain Python:
no framework import, so `bert_torch.train` builds its PyTorch mirror from the same `OptimConfig`,
rule and formula.

Linear warm-up from 0 to the peak over `warmup_steps`, then linear decay to 0 at `total_steps`,
as the original BERT and `transformers.get_linear_schedule_with_warmup`. `step` counts the
optimizer updates already done, so the first update uses `step = 0` (learning rate 0 when there is
a warm-up, exactly like both of those).
"""

from __future__ import annotations

import dataclasses
import math

from bertjax.errors import InputError
from bertjax.settings import option_field
from bertjax.train.choices import OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimizer and its schedule; in a run, the schedule's length is train.steps.

    What `bertjax.train.optim.make_optimizer` (and, for AdamW, `bert_torch.train`) builds, and the
    `[optim]` section of a pre-training run (`bertjax.train.run_config`): each field's help is its
    `--optim.FIELD` option's, and a run sets `total_steps` from `train.steps`.
    """

    optimizer: str = option_field("adamw", "optimizer", OPTIMIZERS)
    learning_rate: float = option_field(1e-4, "peak learning rate (linear warm-up, then linear decay)")
    warmup_steps: int = option_field(0, "linear warm-up steps")
    total_steps: int = option_field(1000, "the learning rate reaches 0 here (a run: train.steps)")
    weight_decay: float = option_field(0.01, "decoupled weight decay (not on biases and LayerNorm)")
    b1: float = option_field(0.9, "Adam beta1")
    b2: float = option_field(0.999, "Adam beta2")
    eps: float = option_field(1e-6, "Adam epsilon")
    clip_norm: float = option_field(1.0, "global gradient-norm clip; 0 disables")
    grad_accum_steps: int = option_field(1, "micro-batches accumulated per optimizer step")
    flatten: bool = option_field(
        False, "clip and run Adam's moments over all gradients as one vector (optax.flatten): "
        "far fewer, larger kernels, the same update up to summation order; adam/adamw/sgd; a "
        "run resumes only with the setting it started with")

    def __post_init__(self) -> None:
        """Raise InputError naming the field and its range for a setting out of range."""
        if self.optimizer not in OPTIMIZERS:
            raise InputError(f"optimizer is {self.optimizer!r}; choose one of {list(OPTIMIZERS)}")
        for name in ("total_steps", "grad_accum_steps"):
            if getattr(self, name) <= 0:
                raise InputError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0 or not math.isfinite(self.learning_rate):
            raise InputError(f"learning_rate must be positive, got {self.learning_rate}")
        for name, (expected, accept) in _RANGES.items():
            value = getattr(self, name)
            if not (math.isfinite(value) and accept(value)):
                raise InputError(f"{name} must be {expected}, got {value}")
        if self.flatten and self.optimizer == "lamb":
            raise InputError("flatten takes adam, adamw or sgd: LAMB's trust ratio is per layer; "
                             "leave flatten off with lamb")


# the ranges of OptimConfig's other numbers (each finite): field -> (in words, test)
_RANGES = {
    "warmup_steps": ("an integer >= 0", lambda v: v >= 0),
    "weight_decay": ("a number >= 0", lambda v: v >= 0),
    "b1": ("a number in [0, 1)", lambda v: 0 <= v < 1),
    "b2": ("a number in [0, 1)", lambda v: 0 <= v < 1),
    "eps": ("a number above 0", lambda v: v > 0),
    "clip_norm": ("a number >= 0 (0: no clipping)", lambda v: v >= 0),
}


def applies_weight_decay(shape: tuple[int, ...]) -> bool:
    """BERT's rule, for both frameworks: weight decay on matrices (dense kernels, embeddings),
    none on vectors (every bias and LayerNorm parameter, the MLM output bias)."""
    return len(shape) >= 2


def warmup_linear_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
