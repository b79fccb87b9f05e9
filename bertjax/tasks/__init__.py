"""Fine-tuning tasks: each module holds what one task needs beyond the shared train step.

    classification.py  sequence classification: prediction, accuracy, macro-F1, confusion matrices
    entities.py        token classification's metric: entity-level precision/recall/F1 as
                       seqeval computes them (tested against seqeval's own outputs), accuracy
    task.py            what the job needs of a task: batches, objective, scoring
    squad_metric.py    exact match and F1 as the official SQuAD script
    registry.py        the tasks by name: kinds, bundled tasks, readers, `make_task` (no framework)
    token_classification.py, question_answering.py, multiple_choice.py   the other tasks

The examples themselves are read by `bertjax.data` (no framework). The fine-tuning job that
runs a task is `bertjax.jobs.finetune`. The tasks may import the training library, `bertjax.use`
(prediction), `bertjax.viz` (confusion matrices), data and the model core; never io or the jobs.
"""

from __future__ import annotations

from bertjax.common.lazy import lazy_names

_NAMES = {
    **dict.fromkeys(("Task", "TaskScores"), "bertjax.tasks.task"),
    **dict.fromkeys(("ClassificationTask", "predict", "score"), "bertjax.tasks.classification"),
    **dict.fromkeys(("TokenClassificationTask", "predict_tags"),
                    "bertjax.tasks.token_classification"),
    **dict.fromkeys(("QuestionAnsweringTask", "Decoding"), "bertjax.tasks.question_answering"),
    **dict.fromkeys(("MultipleChoiceTask", "predict_choices"), "bertjax.tasks.multiple_choice"),
    **dict.fromkeys(("KINDS", "BUNDLED", "Fields", "TaskOptions", "make_task",
                     "read_task_examples", "bundled_examples", "hold_out", "kind_of"),
                    "bertjax.tasks.registry"),
}

__all__ = sorted(_NAMES)
__getattr__, __dir__ = lazy_names(__name__, _NAMES)
