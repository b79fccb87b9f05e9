"""Sequence classification with a loaded `BertForSequenceClassification`: label probabilities for
texts (or text pairs) and the scores fine-tuning reports (accuracy, macro-F1, confusion matrix)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.labelled import Example
from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.use.encode import check_max_length, encode, model_max_length
from bertjax.use.truncation import warn_cut


def predict(
    model: Any,
    tokenizer: WordPieceTokenizer,
    examples: Sequence[Example],
    *,
    batch_size: int = 64,
    max_length: int = 128,
    warn: bool = True,
    option: str = "max_length",
) -> np.ndarray:
    """(N, num_labels) float32 probabilities, in the order of `examples`. Batches are formed from
    examples of similar length (sorted), so short texts are not padded to the longest. Text
    longer than `max_length` tokens is cut, with a warning naming it (its `where`) and what
    raises the limit (`option`) unless `warn=False`; a `max_length` past the model's positions
    is a ValueError."""
    limit = model_max_length(model)
    check_max_length(max_length, limit, option)
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


@nnx.jit
def _probabilities(model: Any, arrays: dict[str, Any]) -> jax.Array:
    logits = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"]).logits
    return jax.nn.softmax(logits, axis=-1)  # (B, num_labels)


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
    return np.array([index[e.label] for e in examples], np.int32)
