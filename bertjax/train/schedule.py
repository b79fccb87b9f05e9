"""The optimizer settings, the weight-decay rule and the learning-rate schedule as plain Python:
no framework import, so `bert_torch.train` builds its PyTorch mirror from the same `OptimConfig`,
rule and formula.

Linear warm-up from 0 to the peak over `warmup_steps`, then (`schedule`) either linear decay to 0
at `total_steps`, as the original BERT and `transformers.get_linear_schedule_with_warmup`, or
warm-up-stable-decay (WSD: the peak until the last `decay_fraction` of the updates, then a
1 - sqrt decay to 0, as ModernBERT; Hägele et al., 2024). `step` counts the optimizer updates
already done, so the first update uses `step = 0` (learning rate 0 when there is a warm-up,
exactly like both of those).
"""

from __future__ import annotations

import dataclasses
import math

from bertjax.common.options import check, option_field
from bertjax.errors import InputError
from bertjax.train.choices import OPTIMIZERS, SCHEDULES

# The share of the updates WSD's final decay takes when `decay_fraction` is left out: the
# cool-down Hägele et al. (2024) found to match a cosine schedule's loss.
WSD_DECAY_FRACTION = 0.2


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
    learning_rate: float = option_field(1e-4, "peak learning rate, reached after the warm-up "
                                        "(schedule: what follows)", check="positive")
    # the warm-up in updates or as a share of them: giving one turns the other off
    warmup_steps: int | None = option_field(
        None, "linear warm-up, in updates (not with warmup_fraction)", check="non_negative",
        excludes="warmup_fraction")
    warmup_fraction: float | None = option_field(
        None, "linear warm-up, as a share of the updates (not with warmup_steps)",
        check="probability", excludes="warmup_steps")
    schedule: str = option_field(
        "linear", "after the warm-up: linear, decay to 0 at the last update (BERT's); wsd, "
        "warm-up-stable-decay: the peak until the last decay_fraction of the updates, then a "
        "1-sqrt decay to 0 (ModernBERT's)", SCHEDULES)
    decay_fraction: float | None = option_field(
        None, "schedule=wsd: the share of the updates its final decay takes (0: the peak to the "
        "end, to be decayed by a later run)", check="fraction",
        default_help=f"{WSD_DECAY_FRACTION} with wsd")
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
        if self.decay_fraction is not None and self.schedule != "wsd":
            raise InputError(f"decay_fraction ({self.decay_fraction}) sets the wsd schedule's "
                             f"decay, and schedule is {self.schedule!r}: pass schedule wsd, or "
                             "leave decay_fraction out")
        if self.flatten and self.optimizer == "lamb":
            raise InputError("flatten takes adam, adamw or sgd: LAMB's trust ratio is per layer; "
                             "leave flatten off with lamb")

    @property
    def decay_share(self) -> float | None:
        """`decay_fraction`, its default resolved: `WSD_DECAY_FRACTION` for wsd where unset;
        None for the linear schedule."""
        if self.schedule != "wsd":
            return None
        return WSD_DECAY_FRACTION if self.decay_fraction is None else self.decay_fraction


def warmup_of(config: OptimConfig, total_steps: int) -> int:
    """The warm-up in updates of `config` over `total_steps` updates: `warmup_steps`, or
    `warmup_fraction` of them (rounded), or none."""
    if config.warmup_steps is not None:
        return config.warmup_steps
    return round((config.warmup_fraction or 0.0) * total_steps)


def decay_of(config: OptimConfig, total_steps: int) -> int:
    """The updates WSD's final decay takes over `total_steps` updates: `decay_share` of them
    (rounded); 0 for the linear schedule, which has no such phase."""
    return round((config.decay_share or 0.0) * total_steps)


def learning_rate_factor(config: OptimConfig, step: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates of
    `total_steps`, by `config.schedule` (what `bert_torch.train` gives its LambdaLR; the Optax
    schedule computes the same in float32)."""
    warmup = warmup_of(config, total_steps)
    if config.schedule == "wsd":
        return warmup_stable_decay_factor(step, warmup, decay_of(config, total_steps),
                                          total_steps)
    return warmup_linear_decay_factor(step, warmup, total_steps)


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


def warmup_stable_decay_factor(step: int, warmup_steps: int, decay_steps: int,
                               total_steps: int) -> float:
    """WSD's multiplier for the update after `step` updates: the warm-up's `step / warmup_steps`,
    else 1 until the last `decay_steps` updates, then `1 - sqrt(t)` with `t` the share of the
    decay done, reaching 0 at `total_steps` (the smaller of the two where a warm-up runs into
    the decay). `1 - sqrt(t)` is written `(1 - t) / (1 + sqrt(t))`, which float32 keeps
    within 1e-7 (relative) near 0 too."""
    warm = step / warmup_steps if step < warmup_steps else 1.0
    start = total_steps - decay_steps
    if decay_steps == 0 or step < start:
        return warm
    done = min(1.0, (step - start) / decay_steps)
    return min(warm, max(0.0, (total_steps - step) / decay_steps) / (1.0 + math.sqrt(done)))
