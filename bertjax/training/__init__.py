"""Pre-training machinery: optimizer and schedule, the train/eval steps, parallel strategies.

    schedule.py     OptimConfig and the learning-rate schedule as plain Python (shared with bert_torch)
    optim.py        Optax optimizers (AdamW, Adam, LAMB, SGD) with clipping and decay masks
    step.py         TrainState, the pure train step (gradient accumulation, dropout keys, metrics)
    parallel.py     strategies none / pmap / mesh (data x fsdp) behind one interface
    distributed.py  multi-host start-up through jax.distributed

`schedule` imports no framework; the others import JAX.
"""
