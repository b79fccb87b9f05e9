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

from bertjax.train.choices import OPTIMIZERS


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """What `bertjax.train.optim.make_optimizer` (and, for AdamW, `bert_torch.train`) builds."""

    optimizer: str = "adamw"
    learning_rate: float = 1e-4  # peak, reached after warmup_steps
    warmup_steps: int = 0
    total_steps: int = 1000  # the learning rate reaches 0 here
    weight_decay: float = 0.01
    b1: float = 0.9
    b2: float = 0.999
    eps: float = 1e-6
    clip_norm: float = 1.0  # global-norm clip; 0 disables
    grad_accum_steps: int = 1  # micro-batches per update (used by the train step)

    def __post_init__(self) -> None:
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.total_steps <= 0 or self.warmup_steps < 0 or self.grad_accum_steps <= 0:
            raise ValueError("total_steps and grad_accum_steps must be positive, warmup_steps >= 0")


def applies_weight_decay(shape: tuple[int, ...]) -> bool:
    """BERT's rule, for both frameworks: weight decay on matrices (dense kernels, embeddings),
    none on vectors (every bias and LayerNorm parameter, the MLM output bias)."""
    return len(shape) >= 2


def warmup_linear_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
