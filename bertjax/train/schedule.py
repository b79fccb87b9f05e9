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

from bertjax.common.options import check, option_field
from bertjax.errors import InputError
from bertjax.train.choices import OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimizer and its schedule; in a run, the schedule's length is train.steps.

    What `bertjax.train.optim.make_optimizer` (and, for AdamW, `bert_torch.train`) builds, and the
    `[optim]` section of a pre-training run (`bertjax.runs.config`): each field's help is its
    `--optim.FIELD` option's, and a run sets `total_steps` from `train.steps`.
    """

    optimizer: str = option_field("adamw", "optimizer", OPTIMIZERS)
    learning_rate: float = option_field(1e-4, "peak learning rate (linear warm-up, then linear "
                                        "decay)", check="positive")
    warmup_steps: int = option_field(0, "linear warm-up steps", check="non_negative")
    # the learning rate reaches 0 here: not an option (a run sets it from train.steps)
    total_steps: int = 1000
    weight_decay: float = option_field(0.01, "decoupled weight decay (not on biases and "
                                       "LayerNorm)", check="non_negative")
    b1: float = option_field(0.9, "Adam beta1", check="probability")
    b2: float = option_field(0.999, "Adam beta2", check="probability")
    eps: float = option_field(1e-6, "Adam epsilon", check="positive")
    clip_norm: float = option_field(1.0, "global gradient-norm clip; 0 disables",
                                    check="non_negative")
    grad_accum_steps: int = option_field(1, "micro-batches accumulated per optimizer step",
                                         check="positive")
    flatten: bool = option_field(
        False, "clip and run Adam's moments over all gradients as one vector (optax.flatten): "
        "far fewer, larger kernels, the same update up to summation order; adam/adamw/sgd; a "
        "run resumes only with the setting it started with")

    def __post_init__(self) -> None:
        """Raise InputError naming the field and its range for a setting out of range (each
        option's as its metadata says: `bertjax.common.options.check`)."""
        check(self)
        if self.total_steps <= 0:
            raise InputError(f"total_steps must be positive, got {self.total_steps}")
        if self.flatten and self.optimizer == "lamb":
            raise InputError("flatten takes adam, adamw or sgd: LAMB's trust ratio is per layer; "
                             "leave flatten off with lamb")


def applies_weight_decay(shape: tuple[int, ...]) -> bool:
    """BERT's rule, for both frameworks: weight decay on matrices (dense kernels, embeddings),
    none on vectors (every bias and LayerNorm parameter, the MLM output bias)."""
    return len(shape) >= 2


def warmup_linear_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
