"""Token classification (named entities) for the fine-tuning job: tagged sentences in, BIO tags
out, scored at the entity level as seqeval scores them (`bertjax.tasks.entities`).

A word's prediction is its first piece's (the piece that carries its label in training, as the
Hugging Face token-classification example scores); a word cut by `max_length` is predicted `O`,
so it counts against recall as a missed entity would. The baseline tags each word with the tag
it had most often in training (`O` for unseen words), the classic memorisation baseline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.packing import RowLayout
from bertjax.data.tagging import IGNORE, TaggedSentence, encode_tagged, piece_counts
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.heads import BertForTokenClassification
from bertjax.tasks.entities import entity_scores
from bertjax.tasks.task import TaskScores, write_report
from bertjax.train.objectives import TOKEN_CLASSIFICATION
from bertjax.use.encode import check_max_length, model_max_length
from bertjax.use.packed import pack_arrays, packed_batches, packing_options

OUTSIDE = "O"


class TokenClassificationTask:
    """BIO tagging: ranked by entity F1 then token accuracy; per-type rows as the report."""

    kind = "token-classification"
    objective = TOKEN_CLASSIFICATION
    model_class = BertForTokenClassification

    def __init__(self, *, label_all_pieces: bool = False):
        self.label_all_pieces = label_all_pieces

    def check(self, examples: Sequence[TaggedSentence], labels: Sequence[str], what: str) -> None:
        known = set(labels)
        for sentence in examples:
            unknown = sorted(set(sentence.tags) - known)
            if unknown:
                raise InputError(f"{sentence.where}: tags the model was not given: "
                                 f"{', '.join(unknown)} (in {what}; the labels come from the "
                                 f"training data: {', '.join(labels)})")

    def check_length(self, max_length: int) -> None:
        pass  # any length from 3 fits; longer text is cut (and counted)

    def units(self, tokenizer: Tokenizer, examples: Sequence[TaggedSentence], max_length: int
              ) -> Sequence[TaggedSentence]:
        return examples  # one sequence each

    def lengths(self, tokenizer: Tokenizer, examples: Sequence[TaggedSentence]
                ) -> np.ndarray:
        return piece_counts(tokenizer, examples)

    def batch(self, tokenizer: Tokenizer, examples: Sequence[TaggedSentence],
              max_length: int, model_config: Any) -> dict[str, np.ndarray]:
        ids = {tag: i for i, tag in enumerate(model_config.id2label)}
        return encode_tagged(tokenizer, examples, ids, max_length,
                             label_all_pieces=self.label_all_pieces).arrays()

    def pack_lengths(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return arrays["attention_mask"].sum(1)

    def pack(self, arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
             ) -> dict[str, np.ndarray]:
        return pack_arrays(arrays, layout, pad_id=pad_id, per_token=("labels",),
                           fills={"labels": IGNORE})

    def evaluate(self, model: Any, tokenizer: Tokenizer,
                 examples: Sequence[TaggedSentence], max_length: int,
                 max_tokens: int | None = None) -> TaskScores:
        predicted, loss = predict_tags(model, tokenizer, examples, max_length=max_length,
                                       max_tokens=max_tokens)
        return _task_scores([s.tags for s in examples], predicted, loss)

    def baseline(self, train: Sequence[TaggedSentence], test: Sequence[TaggedSentence],
                 labels: Sequence[str]) -> tuple[str, TaskScores]:
        memory = most_frequent_tags(train)
        guessed = [[memory.get(w, OUTSIDE) for w in s.tokens] for s in test]
        return ("each word's most frequent training tag (O if unseen)",
                _task_scores([s.tags for s in test], guessed, None))

    def report(self, scores: TaskScores, labels: Sequence[str], path_stem: Path,
               title: str) -> None:
        write_report(path_stem.with_name(f"entities_{path_stem.name}.json"), title, scores.detail)


def predict_tags(model: Any, tokenizer: Tokenizer, sentences: Sequence[TaggedSentence],
                 *, max_length: int = 128, batch_size: int = 64, max_tokens: int | None = None
                 ) -> tuple[list[list[str]], float]:
    """Each sentence's predicted tag per word (its first piece's; `O` for words cut by
    `max_length`) and the mean cross-entropy at the labelled pieces. Batches are formed from
    sentences of similar length, or packed into batches of `max_tokens` token slots."""
    check_max_length(max_length, model_max_length(model), "max_length")
    labels = model.config.id2label
    ids = {tag: i for i, tag in enumerate(labels)}
    predicted: list[list[str]] = [[] for _ in sentences]
    loss_sum, count = 0.0, 0
    for n, log_probs, piece_labels in _sentence_log_probs(model, tokenizer, sentences, ids,
                                                          max_length, batch_size, max_tokens):
        labelled = piece_labels >= 0  # (S,) first pieces
        picked = np.take_along_axis(log_probs, np.maximum(piece_labels, 0)[:, None], -1)[:, 0]
        loss_sum -= float(picked[labelled].sum())
        count += int(labelled.sum())
        words = [labels[t] for t in log_probs.argmax(-1)[labelled]]  # first pieces, in order
        predicted[n] = words + [OUTSIDE] * (len(sentences[n].tokens) - len(words))
    return predicted, loss_sum / max(count, 1)


def _sentence_log_probs(model: Any, tokenizer: Tokenizer,
                        sentences: Sequence[TaggedSentence], ids: dict[str, int], max_length: int,
                        batch_size: int, max_tokens: int | None
                        ) -> Iterator[tuple[int, np.ndarray, np.ndarray]]:
    """(sentence index, log-probabilities (S, L), piece labels (S,)) of every sentence: from
    batches of sentences of similar length, or from packed batches (its own tokens only)."""
    if max_tokens is None:
        order = np.argsort(piece_counts(tokenizer, sentences), kind="stable")
        for start in range(0, len(sentences), batch_size):
            rows = order[start:start + batch_size]
            encoded = encode_tagged(tokenizer, [sentences[i] for i in rows], ids, max_length)
            log_probs = np.asarray(_log_probs(model, encoded.arrays()))  # (B, S, L)
            yield from zip(rows, log_probs, encoded.labels, strict=True)
        return
    if not len(sentences):
        return
    arrays = encode_tagged(tokenizer, sentences, ids, max_length).arrays()  # first pieces labelled
    for batch in packed_batches(arrays, max_tokens=max_tokens, limit=model_max_length(model),
                                pad_id=tokenizer.special.pad, per_token=("labels",),
                                fills={"labels": IGNORE}, config=model.config):
        per_sequence = batch.layout.split(np.asarray(_log_probs(model, batch.arrays)))  # (R, S, L)
        yield from zip(batch.members, per_sequence, batch.layout.split(batch.arrays["labels"]),
                       strict=True)


@nnx.jit
def _log_probs(model: Any, arrays: dict[str, Any]) -> jax.Array:
    logits = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                   **packing_options(arrays)).logits
    return jax.nn.log_softmax(logits.astype(np.float32), axis=-1)  # (B, S, L)


def most_frequent_tags(sentences: Sequence[TaggedSentence]) -> dict[str, str]:
    """Each training word -> the tag it had most often (ties: the tag seen first)."""
    counts: dict[str, Counter] = {}
    for s in sentences:
        for word, tag in zip(s.tokens, s.tags, strict=True):
            counts.setdefault(word, Counter())[tag] += 1
    return {w: c.most_common(1)[0][0] for w, c in counts.items()}


def _task_scores(true: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]],
                 loss: float | None) -> TaskScores:
    s = entity_scores(true, predicted)
    metrics = {"f1": s["f1"], "precision": s["precision"], "recall": s["recall"],
               "accuracy": s["accuracy"], **({} if loss is None else {"loss": loss})}
    line = (f"entity F1 {s['f1']:.4f} (precision {s['precision']:.4f}, recall "
            f"{s['recall']:.4f}), token accuracy {s['accuracy']:.4f}"
            + ("" if loss is None else f", loss {loss:.4f}"))
    detail = {k: s[k] for k in ("per_type", "macro", "weighted", "correct", "predicted", "true")}
    return TaskScores(metrics=metrics, rank=(s["f1"], s["accuracy"]), line=line, detail=detail)
