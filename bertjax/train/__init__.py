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

from bertjax.common.lazy import lazy_names

_NAMES = {
    **dict.fromkeys(("assemble", "Training", "needs_dropout_keys"), "bertjax.train.assembly"),
    **dict.fromkeys(("make_optimizer", "learning_rate_schedule", "current_learning_rate"),
                    "bertjax.train.optim"),
    "OptimConfig": "bertjax.train.schedule",
    **dict.fromkeys(("make_strategy", "SingleDevice", "Pmap", "MeshStrategy"),
                    "bertjax.train.parallel"),
    **dict.fromkeys(("Objective", "PRETRAINING", "MASKED_LM", "CLASSIFICATION",
                     "TOKEN_CLASSIFICATION", "QUESTION_ANSWERING", "MULTIPLE_CHOICE"),
                    "bertjax.train.objectives"),
    **dict.fromkeys(("Checkpointer", "Restored", "abstract_like", "state_digest"),
                    "bertjax.train.checkpoint"),
    **dict.fromkeys(("finished_steps", "best_step", "read_state", "CheckpointCorruptWarning",
                     "StepReadError"), "bertjax.train.saved"),
    "metrics_from_sums": "bertjax.losses",
    **dict.fromkeys(("TrainState", "create_train_state", "make_train_step", "make_eval_step"),
                    "bertjax.train.step"),
    **dict.fromkeys(("PendingMetrics", "TrainClock", "StepSchedule", "NonFiniteLossError"),
                    "bertjax.train.loop"),
    "MetricsWriter": "bertjax.train.metrics",
    "Prefetch": "bertjax.train.prefetch",
    "local_attention_init": "bertjax.train.local_init",
    "keep_freed_memory": "bertjax.train.host_memory",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
