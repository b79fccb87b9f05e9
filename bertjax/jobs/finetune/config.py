"""The fine-tuning settings, with no framework import: `FinetuneConfig` (the recipe, what
`finetune()` takes in Python) and `FinetuneJob` (the recipe and the task's data and options, what
`bertjax finetune` reads from its options, a `--config` file, or a Python caller of `run_job`).

`max_tokens` packs the examples into rows (several per row, attention kept inside each;
`bertjax.use.packed`) and makes every step a batch of `max_tokens` token slots: rows as long as
the longest example (rounded up to 16, at least 64), `max_tokens // row` rows a step. A step then
holds as many examples as fit (about `max_tokens` x fill / mean length, printed when the run
starts), so it takes no `batch_size`. The loss is still the mean over the step's examples (or
labelled tokens, or answers), so to keep the recipe's dynamics pick `max_tokens` so that a step
holds about the batch size's examples. Examples are packed once per run; each epoch shuffles
the rows into batches. Validation and test are packed by the same budget.
"""

from __future__ import annotations

import dataclasses

from bertjax.common.options import check
from bertjax.common.options import option_field as _f
from bertjax.data.labelled import GENRE_TASK
from bertjax.errors import InputError
from bertjax.tasks.registry import BUNDLED, KINDS, kind_of
from bertjax.train.schedule import OptimConfig

DEFAULT_BATCH_SIZE = 32  # examples per step, unpacked
DEFAULT_VALIDATION_FRACTION = 0.1
DEFAULT_PER_GENRE = 600
INITS = ("pretrained", "random")
# BERT's fine-tuning optimizer: AdamW at a peak of 5e-5, warm-up over the first 10% of the
# updates, then linear decay; weight decay 0.01 (not on biases and LayerNorm), clipping at 1.0
FINETUNE_OPTIM = OptimConfig(learning_rate=5e-5, warmup_fraction=0.1)


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """The fine-tuning recipe: epochs of batches, and the optimizer (`optim`, the section
    `bertjax pretrain` takes too; BERT's fine-tuning settings by default: `FINETUNE_OPTIM`)."""

    epochs: int = _f(3, "passes over the training data", check="positive")
    batch_size: int | None = _f(None, "examples per step; not with max_tokens", check="positive",
                                default_help=f"{DEFAULT_BATCH_SIZE} (none with max_tokens)")
    optim: OptimConfig = FINETUNE_OPTIM
    max_length: int = _f(128, "tokens per example, longer ones are cut (at most the model's "
                              "positions)", minimum=3)
    seed: int = _f(0, "shuffling, the validation split and dropout", check="non_negative")
    max_tokens: int | None = _f(None, "pack the examples into rows and make each step a batch of "
                                "this many token slots (rows as long as the longest example, at "
                                "least 64; a step holds the examples that fit); validation and "
                                "test are packed too", check="positive", default_help="off")

    def __post_init__(self) -> None:
        """Every setting checked. The batch size stays as given (None: `examples_per_step`
        resolves it), so that `dataclasses.replace(config, max_tokens=N)` packs a default one."""
        check(self)
        if self.max_tokens is not None and self.batch_size is not None:
            raise InputError(f"batch_size does nothing with max_tokens (a step is "
                             f"{self.max_tokens} token slots, holding the examples that fit): "
                             "leave out one of them")
        accum, batch = self.optim.grad_accum_steps, self.examples_per_step
        if batch is not None and batch % accum:
            raise InputError(f"optim.grad_accum_steps ({accum}) splits each step's batch into "
                             f"micro-batches: it must divide batch_size ({batch})")

    @property
    def examples_per_step(self) -> int | None:
        """The batch size: as given, else `DEFAULT_BATCH_SIZE`; None when packed by max_tokens."""
        return None if self.max_tokens is not None else self.unpacked_batch_size

    @property
    def unpacked_batch_size(self) -> int:
        """The examples of an unpacked step: `batch_size`, else `DEFAULT_BATCH_SIZE` (what a packed
        run's budget is sized to match, `bertjax.bench.finetune`)."""
        return DEFAULT_BATCH_SIZE if self.batch_size is None else self.batch_size


# settings only one task (or kind of task) reads: setting -> the task or kind
TASK_ONLY = {
    "per_genre": GENRE_TASK, "label_all_pieces": "token-classification",
    **dict.fromkeys(("doc_stride", "max_query_length", "n_best", "max_answer_length",
                     "null_threshold"), "question-answering"),
}


@dataclasses.dataclass(frozen=True)
class FinetuneJob(FinetuneConfig):
    """A whole `bertjax finetune` job: the recipe, then the task, its data and its options."""

    task: str = _f("classification", "what to fine-tune for, or a bundled task with its data",
                   (*KINDS, *BUNDLED))
    train: str | None = _f(None, "training examples (.jsonl or .csv; tagged sentences: CoNLL or "
                                 ".jsonl; SQuAD .json)", metavar="FILE")
    validation: str | None = _f(None, "validation examples", metavar="FILE")
    validation_fraction: float | None = _f(
        None, "without validation: hold out this share of train (question answering holds out "
        "whole contexts)", check="open_fraction", default_help=str(DEFAULT_VALIDATION_FRACTION))
    test: str | None = _f(None, "test examples, scored once with the best epoch", metavar="FILE")
    text_field: str = _f("text", "labelled text: the field (or CSV column) of the text")
    pair_field: str = _f("text_pair", "labelled text: the field of the optional second text")
    label_field: str = _f("label", "the field of the label (strings or integers, one type per "
                                   "file); multiple choice: the right choice's index")
    tokens_field: str = _f("tokens", "tagged .jsonl: the words")
    tags_field: str = _f("tags", "tagged .jsonl: their BIO tags")
    context_field: str = _f("context", "multiple choice: the context")
    choices_field: str = _f("choices", "multiple choice: the choices")
    label_all_pieces: bool = _f(False, "token classification: label every piece of a word, not "
                                       "only its first")
    doc_stride: int | None = _f(None, "question answering: pieces two windows of a long context "
                                      "share", check="non_negative",
                                default_help="a quarter of max_length, at most 128")
    max_query_length: int | None = _f(None, "question answering: questions are cut to this many "
                                            "pieces", check="positive", default_help="64")
    n_best: int | None = _f(None, "question answering: start and end candidates per window",
                            check="positive", default_help="20")
    max_answer_length: int | None = _f(None, "question answering: longest answer in pieces",
                                       check="positive", default_help="30")
    null_threshold: float | None = _f(None, "question answering trained on SQuAD v2.0: answer \"\" "
                                            "when the [CLS] score beats the best span by more "
                                            "than this", default_help="0")
    per_genre: int | None = _f(None, f"{GENRE_TASK}: at most this many training speeches per "
                                     "genre", check="positive",
                               default_help=str(DEFAULT_PER_GENRE))
    dropout: float = _f(0.1, "hidden, attention and classifier dropout", check="probability")
    init: str = _f("pretrained", "start from MODEL's weights, or from random weights of its shape "
                                 "(its tokenizer still)", INITS)

    def __post_init__(self) -> None:
        """Settings that do nothing for the task chosen are refused rather than ignored (a user
        who set one expects it to act), as are data given twice."""
        super().__post_init__()
        for name, task in TASK_ONLY.items():
            if getattr(self, name) in (None, False):
                continue
            applies = self.task == task if task in BUNDLED else kind_of(self.task) == task
            if not applies:
                raise InputError(f"{name} is read by task {task} only, not by task {self.task}: "
                                 "leave it out (or choose that task)")
        if self.task in BUNDLED and (self.train or self.validation or self.test):
            raise InputError(f"task {self.task} brings its own data: leave out train, validation "
                             "and test")
        if self.validation_fraction is not None and (self.validation or self.task in BUNDLED):
            given = (f"validation {self.validation}" if self.validation
                     else f"task {self.task}'s own validation split")
            raise InputError(f"validation_fraction holds out a share of train, but {given} is "
                             "the validation data: leave out one of them")

    @property
    def recipe(self) -> FinetuneConfig:
        """The recipe alone (what `finetune()` takes)."""
        names = [f.name for f in dataclasses.fields(FinetuneConfig)]
        return FinetuneConfig(**{n: getattr(self, n) for n in names})
