"""Token classification (named entities) for the fine-tuning job: tagged sentences in, BIO tags
out, scored at the entity level as seqeval scores them (`bertjax.tasks.entities`).

A word's prediction is its first piece's (the piece that carries its label in training, as the
Hugging Face token-classification example scores); a word cut by `max_length` is predicted `O`,
so it counts against recall as a missed entity would. The baseline tags each word with the tag
it had most often in training (`O` for unseen words), the classic memorisation baseline.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.tagging import TaggedSentence, encode_tagged, piece_counts
from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.heads import BertForTokenClassification
from bertjax.tasks.entities import entity_scores
from bertjax.tasks.task import TaskScores, write_report
from bertjax.train.objectives import TOKEN_CLASSIFICATION
from bertjax.use.encode import check_max_length, model_max_length

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
                raise ValueError(f"{sentence.where}: tags the model was not given: "
                                 f"{', '.join(unknown)} (in {what}; the labels come from the "
                                 f"training data: {', '.join(labels)})")

    def check_length(self, max_length: int) -> None:
        pass  # any length from 3 fits; longer text is cut (and counted)

    def units(self, tokenizer: WordPieceTokenizer, examples: Sequence[TaggedSentence], max_length: int
              ) -> Sequence[TaggedSentence]:
        return examples  # one sequence each

    def lengths(self, tokenizer: WordPieceTokenizer, examples: Sequence[TaggedSentence]
                ) -> np.ndarray:
        return piece_counts(tokenizer, examples)

    def batch(self, tokenizer: WordPieceTokenizer, examples: Sequence[TaggedSentence],
              max_length: int, model_config: Any) -> dict[str, np.ndarray]:
        ids = {tag: i for i, tag in enumerate(model_config.id2label)}
        return encode_tagged(tokenizer, examples, ids, max_length,
                             label_all_pieces=self.label_all_pieces).arrays()

    def evaluate(self, model: Any, tokenizer: WordPieceTokenizer,
                 examples: Sequence[TaggedSentence], max_length: int) -> TaskScores:
        predicted, loss = predict_tags(model, tokenizer, examples, max_length=max_length)
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


def predict_tags(model: Any, tokenizer: WordPieceTokenizer, sentences: Sequence[TaggedSentence],
                 *, max_length: int = 128, batch_size: int = 64
                 ) -> tuple[list[list[str]], float]:
    """Each sentence's predicted tag per word (its first piece's; `O` for words cut by
    `max_length`) and the mean cross-entropy at the labelled pieces. Batches are formed from
    sentences of similar length."""
    check_max_length(max_length, model_max_length(model), "max_length")
    labels = model.config.id2label
    ids = {tag: i for i, tag in enumerate(labels)}
    order = np.argsort(piece_counts(tokenizer, sentences), kind="stable")
    predicted: list[list[str]] = [[] for _ in sentences]
    loss_sum, count = 0.0, 0
    for start in range(0, len(sentences), batch_size):
        rows = order[start:start + batch_size]
        chunk = [sentences[i] for i in rows]
        encoded = encode_tagged(tokenizer, chunk, ids, max_length)  # first pieces labelled
        log_probs = np.asarray(_log_probs(model, encoded.arrays()))  # (B, S, L)
        labelled = encoded.labels >= 0  # (B, S)
        picked = np.take_along_axis(log_probs, np.maximum(encoded.labels, 0)[..., None], -1)
        loss_sum -= float(picked[..., 0][labelled].sum())
        count += int(labelled.sum())
        best = log_probs.argmax(-1)  # (B, S)
        for b, row in enumerate(rows):
            words = [labels[t] for t in best[b][labelled[b]]]  # first pieces, in word order
            predicted[row] = words + [OUTSIDE] * (len(chunk[b].tokens) - len(words))
    return predicted, loss_sum / max(count, 1)


@nnx.jit
def _log_probs(model: Any, arrays: dict[str, Any]) -> jax.Array:
    logits = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"]).logits
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
