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

from typing import TYPE_CHECKING

from bertjax.common.lazy import lazy_imports

if TYPE_CHECKING:  # the flat names, each imported on first use (`lazy_imports`)
    from bertjax.tasks.classification import ClassificationTask, predict, score
    from bertjax.tasks.multiple_choice import MultipleChoiceTask, predict_choices
    from bertjax.tasks.question_answering import Decoding, QuestionAnsweringTask
    from bertjax.tasks.registry import (
        BUNDLED,
        KINDS,
        Fields,
        TaskOptions,
        bundled_examples,
        hold_out,
        kind_of,
        make_task,
        read_task_examples,
    )
    from bertjax.tasks.task import Task, TaskScores
    from bertjax.tasks.token_classification import TokenClassificationTask, predict_tags

__getattr__, __dir__, __all__ = lazy_imports(__name__, __file__)
