"""Fine-tuning tasks: each module holds what one task needs beyond the shared train step.

    classification.py  sequence classification: prediction, accuracy, macro-F1, confusion matrices
    entities.py        token classification's metric: entity-level precision/recall/F1 as
                       seqeval computes them (tested against seqeval's own outputs), accuracy
    finetune.py        the fine-tuning job: train, validate each epoch, export the best epoch
    finetune_config.py its recipe, `FinetuneConfig` (no framework: the command line reads it)

The examples themselves are read by `bertjax.data.labelled` (no framework).
"""
