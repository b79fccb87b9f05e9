"""The learning-rate schedule as plain arithmetic: no framework import, so `bert_torch` uses it too.

Linear warm-up from 0 to the peak over `warmup_steps`, then linear decay to 0 at `total_steps`,
as the original BERT and `transformers.get_linear_schedule_with_warmup`. `step` counts the
optimizer updates already done, so the first update uses `step = 0` (learning rate 0 when there is
a warm-up, exactly like both of those).
"""

from __future__ import annotations


def warmup_linear_decay_factor(step: int, warmup_steps: int, total_steps: int) -> float:
    """Multiplier of the peak learning rate for the update after `step` updates."""
    if step < warmup_steps:
        return step / warmup_steps
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))
