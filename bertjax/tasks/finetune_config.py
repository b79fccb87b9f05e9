"""The fine-tuning recipe's settings, with no framework import: `bertjax finetune` derives its
options from them without loading JAX."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The fine-tuning recipe (BERT's: AdamW, linear warm-up then decay, clip 1.0)."""

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1  # of all steps
    weight_decay: float = 0.01
    max_length: int = 128  # tokens per example; longer ones are cut
    seed: int = 0  # shuffling and dropout

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.learning_rate <= 0 or not 0 <= self.warmup_fraction < 1 or self.weight_decay < 0:
            raise ValueError("learning_rate must be positive, warmup_fraction in [0, 1), "
                             "weight_decay >= 0")
