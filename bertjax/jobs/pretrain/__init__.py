"""The pre-training job (`pretrain(config, run_dir)`).

    job.py      the job: set up, train, evaluate, checkpoint, resume
    data.py     corpus -> vocabulary -> shards -> batches for a run
    start.py    whether a run may start, restart or resume in its directory
    summary.py  summary.json and curves.png at the end

Its configuration and directory layout are `bertjax.runs`; it imports the training library, io,
runs, data, viz and the model core.
"""
