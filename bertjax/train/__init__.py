"""Training: the pieces every job shares and the pre-training job itself.

For your own loop, the names below are here, flat (each loads its module on first use):

    from bertjax import train
    training = train.assemble(model, optax.adamw(1e-4), seed=0)   # any Optax transformation
    state, metrics = training.train_step(state, batch)
    train.Checkpointer("ckpt/").save(step, state)

    choices.py       the names of optimizers, parallel strategies and PRNGs (no framework)
    schedule.py      OptimConfig, the weight-decay rule and the LR schedule (no framework;
                     shared with bert_torch)
    optim.py         OptimConfig -> an Optax transformation (AdamW, Adam, LAMB, SGD) with clipping
                     and decay masks; the learning rate a transformation's state holds
    objectives.py    what a step optimises: pre-training (MLM + NSP) or a task's loss
    step.py          TrainState, the pure train and eval steps (accumulation, dropout keys)
    assembly.py      model + optimizer + step + strategy, built one way for every job
    parallel.py      strategies none / pmap / mesh (data x fsdp) behind one interface
    distributed.py   multi-host start-up and helpers through jax.distributed
    prefetch.py      a background thread that keeps the next batches ready
    checkpoint.py    Checkpointer: Orbax checkpoints of any state, for any loop (atomic, checked)
    loop.py          pending metrics, the clock and progress bar, the step schedule (shared)
    metrics.py       the JSON-lines log and TensorBoard events
    run_config.py    a pre-training run's configuration (no framework)
    rundir.py        every path inside a run directory (no framework)
    pretrain_data.py corpus -> vocabulary -> shards -> batches for a run
    run_state.py     whether a run may start, restart or resume in its directory
    pretrain.py      the pre-training job: train, evaluate, checkpoint, resume
    interrupt.py     Ctrl-C during a job: stop at the end of a step with a checkpoint (no framework)

Importing this package imports nothing; `choices`, `schedule`, `run_config`, `rundir` and
`interrupt` import no framework, so the command line reads its options without loading JAX.
"""

from __future__ import annotations

from bertjax.lazy import lazy_names

_NAMES = {
    **dict.fromkeys(("assemble", "Training", "needs_dropout_keys"), "bertjax.train.assembly"),
    **dict.fromkeys(("make_optimizer", "learning_rate_schedule", "current_learning_rate"),
                    "bertjax.train.optim"),
    "OptimConfig": "bertjax.train.schedule",
    **dict.fromkeys(("make_strategy", "SingleDevice", "Pmap", "MeshStrategy"),
                    "bertjax.train.parallel"),
    **dict.fromkeys(("Objective", "PRETRAINING", "CLASSIFICATION", "TOKEN_CLASSIFICATION",
                     "QUESTION_ANSWERING", "MULTIPLE_CHOICE"), "bertjax.train.objectives"),
    **dict.fromkeys(("Checkpointer", "Restored", "abstract_like", "state_digest"),
                    "bertjax.train.checkpoint"),
    "metrics_from_sums": "bertjax.losses",
    **dict.fromkeys(("TrainState", "create_train_state", "make_train_step", "make_eval_step"),
                    "bertjax.train.step"),
    **dict.fromkeys(("PendingMetrics", "TrainClock", "StepSchedule", "NonFiniteLossError"),
                    "bertjax.train.loop"),
    "MetricsWriter": "bertjax.train.metrics",
    "Prefetch": "bertjax.train.prefetch",
    "RunConfig": "bertjax.train.run_config",
    "local_attention_init": "bertjax.train.local_init",
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
