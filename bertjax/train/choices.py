"""The names a run's options accept, in one framework-free place: the configuration
(`bertjax.runs.config`) validates against them without importing JAX, Flax or Optax, and
the modules that implement each choice check their tables against the same tuples."""

from __future__ import annotations

OPTIMIZERS = ("adamw", "adam", "lamb", "sgd")  # bertjax.train.optim
# The learning rate after the warm-up (bertjax.train.schedule): linear decay, or
# warm-up-stable-decay
SCHEDULES = ("linear", "wsd")
PARALLEL_CHOICES = ("none", "pmap", "mesh")  # bertjax.train.parallel.STRATEGIES
# JAX's PRNG implementations for dropout: threefry (JAX's default, counter-based, many integer
# ops per bit), rbg and unsafe_rbg (XLA's RngBitGenerator: far cheaper on GPUs and TPUs).
PRNG_IMPLS = ("threefry2x32", "rbg", "unsafe_rbg")
# What `bertjax pretrain` trains (train.objective): BERT's masked LM + next-sentence prediction
# on pairs, RoBERTa's masked LM alone on full-sentence segments, or ELECTRA's generator and
# replaced-token discriminator on those segments (bertjax.train.objectives, bertjax.train.electra).
OBJECTIVES = ("mlm+nsp", "mlm", "electra")
