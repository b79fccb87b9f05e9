"""What the fine-tuning job needs from a task: how its examples become batches, the objective its
train step minimises, how a model is scored on examples, a non-neural baseline and a report.

`bertjax.jobs.finetune.job.finetune` runs any `Task`; each task module (classification.py,
token_classification.py, question_answering.py, multiple_choice.py) holds one.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from bertjax.config import BertConfig
from bertjax.data.packing import RowLayout
from bertjax.data.tokenizer import Tokenizer
from bertjax.train.objectives import Objective


@dataclasses.dataclass
class TaskScores:
    """A model's (or a baseline's) scores on one set of examples."""

    metrics: dict[str, float]  # logged each epoch and kept in summary.json (a `loss` among them)
    rank: tuple[float, ...]  # the best epoch has the largest (validation) rank
    line: str  # one readable line: "accuracy 0.8125, macro-F1 0.8000, loss 0.4121"
    detail: Any = None  # what `Task.report` draws or writes (a confusion matrix, per-type rows)


class Task(Protocol):
    """One kind of fine-tuning, over examples of its own type."""

    kind: str  # "classification", "token-classification", ...
    objective: Objective  # what the shared train step minimises
    model_class: type[Any]  # the bertjax head it trains

    def check(self, examples: Sequence[Any], labels: Sequence[str], what: str) -> None:
        """A ValueError naming the file and line of any example the model cannot take."""

    def check_length(self, max_length: int) -> None:
        """A ValueError naming the option if `max_length` cannot hold the task's inputs."""

    def units(self, tokenizer: Tokenizer, examples: Sequence[Any], max_length: int
              ) -> Sequence[Any]:
        """What the train step batches: the examples themselves, or the windows of long ones."""

    def lengths(self, tokenizer: Tokenizer, units: Sequence[Any]) -> np.ndarray:
        """(N,) tokens of each unit with its special tokens, before any cut."""

    def batch(self, tokenizer: Tokenizer, units: Sequence[Any], max_length: int,
              model_config: BertConfig) -> dict[str, np.ndarray]:
        """The model's inputs and the objective's labels for these units."""

    def pack_lengths(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        """(N,) tokens each unit of a `batch` takes in a packed row."""

    def pack(self, arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
             ) -> dict[str, np.ndarray]:
        """A `batch` of the layout's units moved into its packed rows (`bertjax.use.packed`):
        the model's inputs with the packing arrays, the labels where the objective reads them."""

    def evaluate(self, model: Any, tokenizer: Tokenizer, examples: Sequence[Any],
                 max_length: int, max_tokens: int | None = None) -> TaskScores:
        """The model's scores on `examples` (inference mode; packed by `max_tokens` if given)."""

    def baseline(self, train: Sequence[Any], test: Sequence[Any],
                 labels: Sequence[str]) -> tuple[str, TaskScores]:
        """A non-neural predictor fitted on `train`: its description and its scores on `test`."""

    def report(self, scores: TaskScores, labels: Sequence[str], path_stem: Path,
               title: str) -> None:
        """Write the scores' detail beside the summary (`path_stem` + a suffix)."""


def write_report(path: Path, title: str, detail: dict[str, Any]) -> None:
    """A task's per-example report: `{"title": ..., **detail}` as UTF-8 JSON (inside the run's
    temporary directory, so a crash leaves no half-written file behind)."""
    path.write_text(json.dumps({"title": title, **detail}, indent=1, ensure_ascii=False) + "\n",
                    encoding="utf-8")
