"""Fine-tuning tasks: each module holds what one task needs beyond the shared train step.

    classification.py  sequence classification: prediction, accuracy, macro-F1, confusion matrices
    finetune.py        the fine-tuning job: train, validate each epoch, export the best epoch

The examples themselves are read by `bertjax.data.labelled` (no framework).
"""
