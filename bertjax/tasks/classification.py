"""Sequence classification with a loaded `BertForSequenceClassification`: label probabilities for
texts (or text pairs), the scores fine-tuning reports (accuracy, macro-F1, confusion matrix) and
the task the fine-tuning job runs (`ClassificationTask`)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.labelled import Example, check_labels, majority_baseline
from bertjax.data.packing import RowLayout
from bertjax.data.tokenizer import Tokenizer
from bertjax.heads import BertForSequenceClassification
from bertjax.losses import IGNORE_INDEX
from bertjax.tasks.task import TaskScores
from bertjax.train.objectives import CLASSIFICATION
from bertjax.use.encode import check_max_length, encode, model_max_length
from bertjax.use.packed import pack_arrays, packed_batches, packing_options
from bertjax.use.truncation import warn_cut
from bertjax.viz.curves import plot_confusion


def predict(
    model: Any,
    tokenizer: Tokenizer,
    examples: Sequence[Example],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    warn: bool = True,
    option: str = "max_length",
    max_tokens: int | None = None,
) -> np.ndarray:
    """(N, num_labels) float32 probabilities, in the order of `examples`. Batches are formed from
    examples of similar length (sorted), so short texts are not padded to the longest; with
    `max_tokens`, examples are packed into batches of that many token slots instead
    (`bertjax.use.packed`; the same probabilities within 1e-5). Text longer than `max_length`
    tokens is cut, with a warning naming it (its `where`) and what raises the limit (`option`)
    unless `warn=False`; a `max_length` past the model's positions is a ValueError."""
    limit = model_max_length(model)
    check_max_length(max_length, limit, option)
    if max_tokens is not None:
        return _predict_packed(model, tokenizer, examples, max_length, max_tokens,
                               warn=warn, option=option)
    lengths = [len(e.text) + len(e.text_pair or "") for e in examples]
    order = np.argsort(lengths, kind="stable")
    probs = np.zeros((len(examples), model.config.num_labels), np.float32)
    for start in range(0, len(examples), batch_size):
        rows = order[start:start + batch_size]
        chunk = [examples[i] for i in rows]
        pairs = [e.text_pair or None for e in chunk]  # a row without a pair: [CLS] A [SEP]
        batch = encode(tokenizer, [e.text for e in chunk], pairs, max_length=max_length,
                       warn=False)
        if warn:
            warn_cut(batch, [e.where for e in chunk], max_length, limit, option)
        probs[rows] = np.asarray(_probabilities(model, batch.arrays(model.config)))
    return probs


def _predict_packed(model: Any, tokenizer: Tokenizer, examples: Sequence[Example],
                    max_length: int, max_tokens: int, *, warn: bool, option: str) -> np.ndarray:
    """`predict` over packed batches: each example's probabilities from its own [CLS]."""
    probs = np.zeros((len(examples), model.config.num_labels), np.float32)
    if not len(examples):
        return probs
    pairs = [e.text_pair or None for e in examples]
    encoded = encode(tokenizer, [e.text for e in examples], pairs, max_length=max_length,
                     warn=False)
    if warn:
        warn_cut(encoded, [e.where for e in examples], max_length, model_max_length(model),
                 option)
    for batch in packed_batches(encoded.arrays(model.config), max_tokens=max_tokens,
                                limit=model_max_length(model), pad_id=tokenizer.special.pad,
                                config=model.config):
        probs[batch.members] = batch.layout.from_slots(np.asarray(
            _probabilities(model, batch.arrays)))  # (R, K, L) -> (n, L)
    return probs


@nnx.jit
def _probabilities(model: Any, arrays: dict[str, Any]) -> jax.Array:
    logits = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                   **packing_options(arrays)).logits
    return jax.nn.softmax(logits, axis=-1)  # (B, num_labels), packed (R, K, num_labels)


@dataclasses.dataclass
class Scores:
    """How well predictions match labels."""

    accuracy: float
    macro_f1: float
    loss: float  # mean cross-entropy of the probabilities
    confusion: np.ndarray  # (L, L) int: row = true label, column = predicted label

    def as_dict(self) -> dict[str, float]:
        return {"accuracy": self.accuracy, "macro_f1": self.macro_f1, "loss": self.loss}


def score(probs: np.ndarray, labels: np.ndarray) -> Scores:
    """Accuracy, macro-averaged F1 (every label weighs the same; a label never predicted nor
    present scores 0 only if it is present) and the confusion matrix."""
    num = probs.shape[1]
    predicted = probs.argmax(-1)
    confusion = np.zeros((num, num), np.int64)
    np.add.at(confusion, (labels, predicted), 1)
    tp = np.diag(confusion).astype(np.float64)
    precision = tp / np.maximum(confusion.sum(0), 1)
    recall = tp / np.maximum(confusion.sum(1), 1)
    f1 = np.where(precision + recall > 0, 2 * precision * recall / np.maximum(precision + recall,
                                                                               1e-12), 0.0)
    present = (confusion.sum(1) + confusion.sum(0)) > 0
    loss = -np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12)).mean()
    return Scores(accuracy=float((predicted == labels).mean()),
                  macro_f1=float(f1[present].mean()), loss=float(loss), confusion=confusion)


def label_ids(examples: Sequence[Example], labels: Sequence[str]) -> np.ndarray:
    index = {name: i for i, name in enumerate(labels)}
    return np.array([index[str(e.label)] for e in examples], np.int32)


class ClassificationTask:
    """Sequence classification (`Example`s: text, optional pair, label) for the fine-tuning job:
    ranked by accuracy then macro-F1, the majority label as baseline, confusion matrices."""

    kind = "classification"
    objective = CLASSIFICATION
    model_class = BertForSequenceClassification

    def check(self, examples: Sequence[Example], labels: Sequence[str], what: str) -> None:
        check_labels(examples, labels, what)

    def check_length(self, max_length: int) -> None:
        pass  # any length from 3 fits; longer text is cut (and counted)

    def units(self, tokenizer: Tokenizer, examples: Sequence[Example], max_length: int
              ) -> Sequence[Example]:
        return examples  # one sequence each

    def lengths(self, tokenizer: Tokenizer, examples: Sequence[Example]) -> np.ndarray:
        texts = tokenizer.encode_batch([e.text for e in examples])
        pairs = tokenizer.encode_batch([e.text_pair or "" for e in examples])
        return np.array([len(a) + len(b) + (3 if e.text_pair else 2)  # [CLS] A [SEP] (B [SEP])
                         for a, b, e in zip(texts, pairs, examples, strict=True)], dtype=np.int64)

    def batch(self, tokenizer: Tokenizer, examples: Sequence[Example], max_length: int,
              model_config: Any) -> dict[str, np.ndarray]:
        pairs = [e.text_pair or None for e in examples]  # a row without a pair: [CLS] A [SEP]
        arrays = encode(tokenizer, [e.text for e in examples], pairs, max_length=max_length,
                        warn=False).arrays(model_config)
        return {**arrays, "labels": label_ids(examples, model_config.id2label)}

    def pack_lengths(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return arrays["attention_mask"].sum(1)

    def pack(self, arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
             ) -> dict[str, np.ndarray]:
        return pack_arrays(arrays, layout, pad_id=pad_id, per_sequence=("labels",),
                           fills={"labels": IGNORE_INDEX})  # (R, K) labels, empty slots ignored

    def evaluate(self, model: Any, tokenizer: Tokenizer, examples: Sequence[Example],
                 max_length: int, max_tokens: int | None = None) -> TaskScores:
        scores = score(predict(model, tokenizer, examples, max_length=max_length, warn=False,
                               max_tokens=max_tokens),
                       label_ids(examples, model.config.id2label))
        return _task_scores(scores)

    def baseline(self, train: Sequence[Example], test: Sequence[Example],
                 labels: Sequence[str]) -> tuple[str, TaskScores]:
        label, _ = majority_baseline(train, test)
        probs = np.eye(len(labels), dtype=np.float32)[[list(labels).index(label)] * len(test)]
        # a constant guess has no meaningful cross-entropy: no loss
        return f"always {label!r}", _task_scores(score(probs, label_ids(test, labels)), loss=False)

    def report(self, scores: TaskScores, labels: Sequence[str], path_stem: Path,
               title: str) -> None:
        plot_confusion(scores.detail, labels, path_stem.with_name(f"confusion_{path_stem.name}.png"),
                       title=title)


def _task_scores(scores: Scores, loss: bool = True) -> TaskScores:
    metrics = scores.as_dict()
    line = f"accuracy {scores.accuracy:.4f}, macro-F1 {scores.macro_f1:.4f}"
    if loss:
        line += f", loss {scores.loss:.4f}"
    else:
        del metrics["loss"]
    return TaskScores(metrics=metrics, rank=(scores.accuracy, scores.macro_f1), line=line,
                      detail=scores.confusion)
