"""Training: the pieces every job shares and the pre-training job itself.

    choices.py       the names of optimizers, parallel strategies and PRNGs (no framework)
    schedule.py      OptimConfig, the weight-decay rule and the LR schedule (no framework;
                     shared with bert_torch)
    optim.py         Optax optimizers (AdamW, Adam, LAMB, SGD) with clipping and decay masks
    objectives.py    what a step optimises: pre-training (MLM + NSP) or a task's loss
    step.py          TrainState, the pure train and eval steps (accumulation, dropout keys)
    assembly.py      model + optimizer + step + strategy, built one way for every job
    parallel.py      strategies none / pmap / mesh (data x fsdp) behind one interface
    distributed.py   multi-host start-up and helpers through jax.distributed
    prefetch.py      a background thread that keeps the next batches ready
    checkpoint.py    Orbax checkpoints of {params, optimizer, step, data state}
    metrics.py       the JSON-lines log and TensorBoard events
    run_config.py    a pre-training run's configuration (no framework)
    rundir.py        every path inside a run directory (no framework)
    pretrain_data.py corpus -> vocabulary -> shards -> batches for a run
    pretrain.py      the pre-training job: train, evaluate, checkpoint, resume
    interrupt.py     Ctrl-C during a job: stop at the end of a step with a checkpoint (no framework)

Importing this package imports nothing; `choices`, `schedule`, `run_config`, `rundir` and
`interrupt` import no framework, so the command line reads its options without loading JAX.
"""
