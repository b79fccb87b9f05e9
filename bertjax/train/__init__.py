"""The training library: what a user's own loop takes (the jobs in `bertjax.jobs` are built from
it and never imported by it). The names below are here, flat, each loading its module on first
use:

    from bertjax import train
    training = train.assemble(model, optax.adamw(1e-4), seed=0)   # any Optax transformation
    state, metrics = training.train_step(state, batch)
    train.Checkpointer("ckpt/").save(step, state)

    choices.py      the names of optimizers, parallel strategies, PRNGs and pre-training
                    objectives (no framework)
    schedule.py     OptimConfig, the weight-decay rule and the LR schedule (no framework;
                    shared with bert_torch)
    optim.py        OptimConfig -> an Optax transformation (AdamW, Adam, LAMB, SGD) with clipping
                    and decay masks; the learning rate a transformation's state holds
    objectives.py   what a step optimises: pre-training (MLM + NSP, or MLM alone) or a task's
                    loss
    step.py         TrainState, the pure train and eval steps (accumulation, dropout keys)
    assembly.py     model + optimizer + step + strategy, built one way for every job
    parallel.py     strategies none / pmap / mesh (data x fsdp) behind one interface
    distributed.py  multi-host start-up and helpers through jax.distributed
    prefetch.py     a background thread that keeps the next batches ready
    manifest.py     a checksum of every file of a checkpoint step (no framework)
    step_arrays.py  a step saved without a manifest read array by array before Orbax opens it
    saved.py        checkpoint questions through Orbax's public API: finished steps, the best,
                    a step's metrics, state and configuration (read-only)
    checkpoint.py   Checkpointer: Orbax checkpoints of any state, for any loop (atomic, checked)
    loop.py         pending metrics, the clock and progress bar, the step schedule
    metrics.py      the JSON-lines log and TensorBoard events
    local_init.py   attention heads that start out reading their neighbours
    host_memory.py  keep_freed_memory(): glibc keeps freed blocks (a process setting, opt-in)

It may import the model core, `bertjax.data` and `bertjax.common`; never `io`, `runs`, the jobs or
the command line. Importing this package imports nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from bertjax.common.lazy import lazy_imports

if TYPE_CHECKING:  # the flat names, each imported on first use (`lazy_imports`)
    from bertjax.losses import metrics_from_sums
    from bertjax.train.assembly import Training, assemble, needs_dropout_keys
    from bertjax.train.checkpoint import Checkpointer, Restored, abstract_like, state_digest
    from bertjax.train.host_memory import keep_freed_memory
    from bertjax.train.local_init import local_attention_init
    from bertjax.train.loop import NonFiniteLossError, PendingMetrics, StepSchedule, TrainClock
    from bertjax.train.metrics import MetricsWriter
    from bertjax.train.objectives import (
        CLASSIFICATION,
        MASKED_LM,
        MULTIPLE_CHOICE,
        PRETRAINING,
        QUESTION_ANSWERING,
        TOKEN_CLASSIFICATION,
        Objective,
    )
    from bertjax.train.optim import current_learning_rate, learning_rate_schedule, make_optimizer
    from bertjax.train.parallel import MeshStrategy, Pmap, SingleDevice, make_strategy
    from bertjax.train.prefetch import Prefetch
    from bertjax.train.saved import (
        CheckpointCorruptWarning,
        StepReadError,
        best_step,
        finished_steps,
        read_state,
    )
    from bertjax.train.schedule import OptimConfig
    from bertjax.train.step import TrainState, create_train_state, make_eval_step, make_train_step

__getattr__, __dir__, __all__ = lazy_imports(__name__, __file__)
