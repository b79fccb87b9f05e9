"""The fine-tuning recipe's settings, with no framework import: `bertjax finetune` derives its
options from them without loading JAX."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The fine-tuning recipe (BERT's: AdamW, linear warm-up then decay, clip 1.0).

    `max_tokens` packs the examples into rows (several per row, attention kept inside each;
    `bertjax.use.packed`) and makes every step a batch of `max_tokens` token slots: rows as long
    as the longest example (rounded up to 16, at least 64), `max_tokens // row` rows a step.
    A step then holds as many examples as fit, not `batch_size` (which is unused): about
    `max_tokens` x fill / mean length, printed when the run starts. The loss is still the mean
    over the step's examples (or labelled tokens, or answers), so one step's gradient scale is
    that of a batch of that many examples; to keep the recipe's dynamics pick `max_tokens` so
    that a step holds about `batch_size` examples. Examples are packed once per run; each epoch
    shuffles the rows into batches (the rows of an incomplete last batch sit out, as the
    examples of one do unpacked). Validation and test are packed by the same budget.
    """

    epochs: int = 3
    batch_size: int = 32
    learning_rate: float = 5e-5
    warmup_fraction: float = 0.1  # of all steps
    weight_decay: float = 0.01
    max_length: int = 128  # tokens per example; longer ones are cut
    seed: int = 0  # shuffling and dropout
    max_tokens: int | None = None  # token slots per step, examples packed into rows; None: off

    def __post_init__(self) -> None:
        for name in ("epochs", "batch_size", "max_length"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be positive, got {getattr(self, name)}")
        if self.max_tokens is not None and self.max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {self.max_tokens}")
        if self.learning_rate <= 0 or not 0 <= self.warmup_fraction < 1 or self.weight_decay < 0:
            raise ValueError("learning_rate must be positive, warmup_fraction in [0, 1), "
                             "weight_decay >= 0")
