"""The fine-tuning job: `finetune(model, tokenizer, train, validation, output_dir, config, task=)`.

    job.py      train, validate each epoch, export the best epoch, score the test split once
    config.py   the recipe (`FinetuneConfig`) and the command's settings (`FinetuneJob`), with no
                framework import
    run.py      `run_job`: the command as a Python call (reads the task's data, loads MODEL)

It imports the tasks (`bertjax.tasks`), the training library, loading (`bertjax.pretrained`),
`bertjax.use`, io, data, `bertjax.common` and the model core.
"""
