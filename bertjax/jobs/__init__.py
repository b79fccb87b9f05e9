"""The jobs: pre-training and fine-tuning, built from the training library and never imported by
it. A job owns its configuration, its output directory, its data preparation and its summary.

    pretrain/    `bertjax pretrain`: data, model, the loop, evaluation, checkpoints, exact resume
    finetune/    `bertjax finetune`: a task's examples, the loop per epoch, the best epoch exported
    stop.py      a caller's request to stop a job (Ctrl-C), honoured where nothing is lost

It may import every layer below it (tasks, use, viz, io, runs, train, data, the model core,
common); only the command line and the benchmarks import it.
"""
