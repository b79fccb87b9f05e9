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
    """The optimizer and its learning-rate schedule.

    The schedule spans as many updates as the job makes (`total_steps`, given where it is built:
    a pre-training run's `train.steps`, a fine-tuning run's epochs of batches).

    What `bertjax.train.optim.make_optimizer` (and, for AdamW, `bert_torch.train`) builds, and the
    `[optim]` section of both `bertjax pretrain` and `bertjax finetune`: each field's help is its
    `--optim.FIELD` option's.
    """

    optimizer: str = option_field("adamw", "optimizer", OPTIMIZERS)
    learning_rate: float = option_field(1e-4, "peak learning rate (linear warm-up, then linear "
                                        "decay to 0 at the last update)", check="positive")
    # the warm-up in updates or as a share of them: giving one turns the other off
    warmup_steps: int | None = option_field(
        None, "linear warm-up, in updates (not with warmup_fraction)", check="non_negative",
        excludes="warmup_fraction")
    warmup_fraction: float | None = option_field(
        None, "linear warm-up, as a share of the updates (not with warmup_steps)",
        check="probability", excludes="warmup_steps")
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
        if self.warmup_steps is not None and self.warmup_fraction is not None:
            raise InputError(f"warmup_steps ({self.warmup_steps}) and warmup_fraction "
                             f"({self.warmup_fraction}) both set the warm-up: give one of them")
        if self.flatten and self.optimizer == "lamb":
            raise InputError("flatten takes adam, adamw or sgd: LAMB's trust ratio is per layer; "
                             "leave flatten off with lamb")


def warmup_of(config: OptimConfig, total_steps: int) -> int:
    """The warm-up in updates of `config` over `total_steps` updates: `warmup_steps`, or
    `warmup_fraction` of them (rounded), or none."""
    if config.warmup_steps is not None:
        return config.warmup_steps
    return round((config.warmup_fraction or 0.0) * total_steps)


def check_steps(total_steps: int) -> None:
    """The number of updates a schedule spans must be positive."""
    if not isinstance(total_steps, int) or isinstance(total_steps, bool) or total_steps <= 0:
        raise InputError(f"the schedule's total_steps must be a positive integer, got "
                         f"{total_steps!r}")


def applies_weight_decay(shape: tuple[int, ...]) -> bool:
    """BERT's rule, for both frameworks: weight decay on matrices (dense kernels, embeddings),
    none on vectors (every bias and LayerNorm parameter, the MLM output bias)."""
    return len(shape) >= 2


def warmup_linear_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
