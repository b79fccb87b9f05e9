"""The fine-tuning job: `finetune(model, tokenizer, train, validation, output_dir, config, task=)`.

    job.py      train, validate each epoch, export the best epoch, score the test split once
    config.py   the recipe (`FinetuneConfig`), with no framework import

It imports the tasks (`bertjax.tasks`), the training library, io and the model core.
"""
