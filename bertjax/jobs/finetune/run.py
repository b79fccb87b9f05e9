"""`bertjax finetune` as a Python call: `run_job(model, FinetuneJob(...), output_dir)` reads the
task's examples (its files, or a bundled task's), makes the task and its labels, loads the model
with the task's head and fine-tunes it (`bertjax.jobs.finetune.job.finetune`).

    from bertjax.jobs.finetune.config import FinetuneJob
    from bertjax.jobs.finetune.run import run_job
    result = run_job("runs/pretrain", FinetuneJob(task="shakespeare-genres",
                                                  optim=OptimConfig(learning_rate=5e-4,
                                                                    warmup_fraction=0.1)),
                     "runs/genres")
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

from flax import nnx

from bertjax.errors import InputError
from bertjax.io.report import FreshHeadsWarning
from bertjax.io.source import local_place
from bertjax.jobs.finetune.config import DEFAULT_PER_GENRE, DEFAULT_VALIDATION_FRACTION, FinetuneJob
from bertjax.jobs.finetune.job import FinetuneResult, check_output_dir, finetune
from bertjax.pretrained import from_pretrained
from bertjax.tasks.registry import (
    BUNDLED,
    Fields,
    TaskOptions,
    bundled_examples,
    hold_out,
    make_task,
    read_task_examples,
)

__all__ = ["read_job_examples", "run_job"]


def run_job(model: str | Path, job: FinetuneJob, output_dir: str | Path, *,
            progress: bool = True, revision: str | None = None,
            step: int | None = None) -> FinetuneResult:
    """Fine-tune `model` (a Hugging Face directory, a Hub id at `revision`, or a `bertjax
    pretrain` run at `step`) as `job` says, into the new or empty `output_dir`."""
    check_output_dir(Path(output_dir), "--output-dir", inputs={  # never over what it reads
        "MODEL": local_place(model), "--train": job.train, "--validation": job.validation,
        "--test": job.test})
    train, validation, test = read_job_examples(job)
    task, labels = task_and_labels(job, train)
    with warnings.catch_warnings():  # a fresh head is what fine-tuning starts from
        warnings.simplefilter("ignore", FreshHeadsWarning)
        named: dict[str, Any] = {} if labels is None else {"id2label": labels}
        loaded, tokenizer = from_pretrained(
            model, revision=revision, step=step, model_cls=task.model_class,
            hidden_dropout_prob=job.dropout, attention_probs_dropout_prob=job.dropout,
            classifier_dropout=None, **named)
    if job.init == "random":
        loaded = task.model_class(loaded.config, rngs=nnx.Rngs(job.seed))
    # finetune() checks the rest (labels, max_length against the model) before writing
    return finetune(loaded, tokenizer, train, validation, output_dir, job.recipe, task=task,
                    test=test, progress=progress)


def _fields(job: FinetuneJob) -> Fields:
    return Fields(text=job.text_field, pair=job.pair_field, label=job.label_field,
                  tokens=job.tokens_field, tags=job.tags_field, context=job.context_field,
                  choices=job.choices_field)


def read_job_examples(job: FinetuneJob) -> tuple[list, list, list | None]:
    """(train, validation, test or None) of the job's task: bundled, or read from its files."""
    if job.task in BUNDLED:
        return bundled_examples(job.task, per_genre=job.per_genre or DEFAULT_PER_GENRE,
                                seed=job.seed)
    if not job.train:
        raise InputError(f"give train examples (--train FILE), or a bundled task: "
                         f"{', '.join(BUNDLED)}")

    def read(path: str, what: str) -> list:
        return read_task_examples(job.task, path, what=what, fields=_fields(job))

    train = read(job.train, "--train")
    if job.validation:
        validation = read(job.validation, "--validation")
    else:
        try:
            train, validation = hold_out(job.task, train, job.validation_fraction
                                         or DEFAULT_VALIDATION_FRACTION, job.seed)
        except ValueError as err:
            raise InputError(f"--train {job.train}: {err}; give more examples, a smaller "
                             "--validation-fraction or a --validation FILE") from err
    test = read(job.test, "--test") if job.test else None
    return train, validation, test


def task_and_labels(job: FinetuneJob, train: list) -> tuple[Any, tuple[str, ...] | None]:
    """The task and its labels, from the training examples (None: the head has none to name)."""
    given = {name: getattr(job, name) for name in TaskOptions.__dataclass_fields__
             if getattr(job, name) is not None}
    return make_task(job.task, train, TaskOptions(**given), fields=_fields(job))
