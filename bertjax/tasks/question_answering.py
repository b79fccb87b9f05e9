"""Extractive question answering (SQuAD v1.1 / v2.0) for the fine-tuning job: questions with their
contexts cut into overlapping windows (`bertjax.data.squad`), trained on windows, answered by the
best span over all of a question's windows and scored as the official SQuAD script scores.

Decoding is Hugging Face's `run_qa` post-processing, but for one point: in each window the
`n_best` highest start and end logits among the context's pieces (run_qa takes the `n_best` over
every position, padding included, then drops those outside the context: packed windows have no
padding, so bertjax ranks the context alone, packed or not; it can then find a higher-scoring
span than run_qa, never a lower one), pairs with `start <= end` and at most `max_answer_length`
pieces, scored by start + end logit; the best over the windows wins. With unanswerable questions
(v2.0), a question is answered "" when its lowest [CLS] score (start + end logit at position 0,
over its windows) beats the best span by more than `null_threshold`.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.data.packing import RowLayout
from bertjax.data.squad import (
    QAExample,
    QAWindows,
    check_window,
    default_doc_stride,
    encode_squad,
    window_specials,
)
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.heads import BertForQuestionAnswering
from bertjax.losses import IGNORE_INDEX, packed_question_answering_sums
from bertjax.tasks.squad_metric import squad_scores
from bertjax.tasks.task import TaskScores, write_report
from bertjax.train.objectives import QUESTION_ANSWERING
from bertjax.use.encode import model_max_length
from bertjax.use.packed import pack_arrays, packed_layouts, packing_options


@dataclasses.dataclass(frozen=True)
class Decoding:
    """How spans are chosen (Hugging Face run_qa's defaults)."""

    n_best: int = 20
    max_answer_length: int = 30  # pieces
    null_threshold: float = 0.0  # v2.0: answer "" when null score - best span score exceeds it


@dataclasses.dataclass(frozen=True)
class _Window:
    """One training window: a row of the windows made for the whole training set."""

    windows: QAWindows
    row: int


class QuestionAnsweringTask:
    """SQuAD: trained on windows, ranked by F1 then exact match; its labels are SQuAD's start and
    end (the head has two outputs whatever the data)."""

    kind = "question-answering"
    objective = QUESTION_ANSWERING
    model_class = BertForQuestionAnswering

    def __init__(self, *, doc_stride: int | None = None, max_query_length: int = 64,
                 version_2: bool = False,
                 decoding: Decoding = Decoding()) -> None:  # noqa: B008 - frozen
        """`doc_stride` None: `default_doc_stride` of the run's max_length. `version_2`: SQuAD
        v2.0, questions may have no answer and the model may answer "" (as run_qa's
        --version_2_with_negative); the same for every set scored."""
        self.doc_stride, self.max_query_length = doc_stride, max_query_length
        self.version_2, self.decoding = version_2, decoding

    def check(self, examples: Sequence[QAExample], labels: Sequence[str], what: str) -> None:
        # read_squad checked every answer against its context
        if not self.version_2 and any(not e.answerable for e in examples):
            raise InputError(f"{what} holds questions with no answer (SQuAD v2.0) but the task "
                             "is SQuAD v1.1, which never answers \"\": train on data with such "
                             "questions (bertjax finetune then answers \"\" too) or pass "
                             "QuestionAnsweringTask(version_2=True)")

    def check_length(self, max_length: int) -> None:
        check_window(max_length, self._stride(max_length), self.max_query_length)

    def _stride(self, max_length: int, specials: int = 3) -> int:
        """The stride asked for, or the default for windows with `specials` special tokens (the
        tokenizer's `window_specials`; BERT's 3 where no tokenizer is at hand yet)."""
        return (default_doc_stride(max_length, self.max_query_length, specials)
                if self.doc_stride is None else self.doc_stride)

    def units(self, tokenizer: Tokenizer, examples: Sequence[QAExample],
              max_length: int) -> list[_Window]:
        windows = self._windows(tokenizer, examples, max_length)
        return [_Window(windows, r) for r in range(len(windows.example))]

    def lengths(self, tokenizer: Tokenizer, units: Sequence[_Window]) -> np.ndarray:
        return np.array([int(u.windows.attention_mask[u.row].sum()) for u in units], np.int64)

    def batch(self, tokenizer: Tokenizer, units: Sequence[_Window], max_length: int,
              model_config: Any) -> dict[str, np.ndarray]:
        return units[0].windows.rows(np.array([u.row for u in units])).arrays()

    def pack_lengths(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return arrays["attention_mask"].sum(1)

    def pack(self, arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
             ) -> dict[str, np.ndarray]:
        return pack_windows(arrays, layout, pad_id)

    def evaluate(self, model: Any, tokenizer: Tokenizer,
                 examples: Sequence[QAExample], max_length: int,
                 max_tokens: int | None = None) -> TaskScores:
        predictions, loss = self.predict(model, tokenizer, examples, max_length,
                                         max_tokens=max_tokens)
        return _task_scores(examples, predictions, loss)

    def predict(self, model: Any, tokenizer: Tokenizer, examples: Sequence[QAExample],
                max_length: int, batch_size: int = 64, max_tokens: int | None = None
                ) -> tuple[dict[str, str], float]:
        """Each question's answer ("" for none) and the mean loss over the windows. Packed
        (`max_tokens`), each window's softmax spans its own pieces, not its padding: the same
        answers, a loss without padding's share."""
        windows = self._windows(tokenizer, examples, max_length)
        n = len(windows.example)
        start, end = np.zeros((n, max_length), np.float32), np.zeros((n, max_length), np.float32)
        loss_sum = 0.0
        if max_tokens is None:
            for first in range(0, n, batch_size):
                rows = np.arange(first, min(first + batch_size, n))
                s, e, lsum = _logits(model, windows.rows(rows).arrays())
                start[rows], end[rows] = np.asarray(s), np.asarray(e)
                loss_sum += float(lsum)
        elif n:
            whole = windows.arrays()
            for members, layout in packed_layouts(whole["attention_mask"].sum(1),
                                                  max_tokens=max_tokens,
                                                  limit=model_max_length(model),
                                                  config=model.config):
                arrays = pack_windows({k: v[members] for k, v in whole.items()}, layout,
                                      tokenizer.special.pad)
                s, e, lsum = _packed_logits(model, arrays)
                for target, logits in ((start, s), (end, e)):
                    for row, values in zip(members, layout.split(np.asarray(logits)),
                                           strict=True):
                        target[row, :len(values)] = values
                loss_sum += float(lsum)
        answers = decode(examples, windows, start, end, self.decoding,
                         allow_empty=self.version_2)
        return answers, loss_sum / max(n, 1)

    def baseline(self, train: Sequence[QAExample], test: Sequence[QAExample],
                 labels: Sequence[str]) -> tuple[str, TaskScores]:
        common = [t for t, _ in Counter(a[0][0] for a in (e.answers for e in train) if a)
                  .most_common()]
        guesses = {e.id: next((t for t in common if t in e.context), "") for e in test}
        return ("the commonest training answer found in the context",
                _task_scores(test, guesses, None))

    def report(self, scores: TaskScores, labels: Sequence[str], path_stem: Path,
               title: str) -> None:
        write_report(path_stem.with_name(f"answers_{path_stem.name}.json"), title,
                     {"predictions": scores.detail})

    def _windows(self, tokenizer: Tokenizer, examples: Sequence[QAExample],
                 max_length: int) -> QAWindows:
        stride = self._stride(max_length, window_specials(tokenizer))
        return encode_squad(tokenizer, examples, max_length, stride, self.max_query_length)


@nnx.jit
def _logits(model: Any, arrays: dict[str, Any]) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Start and end logits (B, S) and the windows' summed loss ((start CE + end CE) / 2)."""
    out = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"])
    start, end = out.start_logits.astype(jnp.float32), out.end_logits.astype(jnp.float32)
    picked = (jnp.take_along_axis(jax.nn.log_softmax(start), arrays["start_positions"][:, None], 1)
              + jnp.take_along_axis(jax.nn.log_softmax(end), arrays["end_positions"][:, None], 1))
    return start, end, -jnp.sum(picked) / 2


@nnx.jit
def _packed_logits(model: Any, arrays: dict[str, Any]
                   ) -> tuple[jax.Array, jax.Array, jax.Array]:
    """`_logits` of packed windows: row logits (R, S) and the windows' summed loss, each
    window's softmax over its own pieces (`losses.packed_question_answering_sums`)."""
    out = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                **packing_options(arrays))
    sums = packed_question_answering_sums(out.start_logits, out.end_logits,
                                          arrays["sequence_ids"], arrays["start_positions"],
                                          arrays["end_positions"])
    return out.start_logits, out.end_logits, (sums["start_loss_sum"] + sums["end_loss_sum"]) / 2


def pack_windows(arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
                 ) -> dict[str, np.ndarray]:
    """Windows (`QAWindows.arrays`) moved into packed rows; each window's answer (start and end
    positions) in its row's positions, (R, K), `IGNORE_INDEX` for none (past its end) or an empty
    slot."""
    out = pack_arrays(arrays, layout, pad_id=pad_id)
    for key in ("start_positions", "end_positions"):
        position = arrays[key]  # (N,) in the window
        inside = (position >= 0) & (position < layout.length)
        out[key] = layout.per_sequence(np.where(inside, position + layout.start, IGNORE_INDEX),
                                       IGNORE_INDEX).astype(np.int32)
    return out


def decode(examples: Sequence[QAExample], windows: QAWindows, start: np.ndarray, end: np.ndarray,
           decoding: Decoding = Decoding(), *, allow_empty: bool = False  # noqa: B008 - frozen
           ) -> dict[str, str]:
    """Each example's answer text from its windows' start and end logits (N, S)."""
    best: dict[int, tuple[float, str]] = {}
    null: dict[int, float] = {}
    for r, e in enumerate(windows.example):
        e = int(e)
        null[e] = min(null.get(e, np.inf), float(start[r, 0] + end[r, 0]))
        span = _best_span(start[r], end[r], windows.offsets[r], decoding)
        if span is not None and (e not in best or span[0] > best[e][0]):
            score, (a, b) = span
            best[e] = (score, examples[e].context[a:b])
    answers = {}
    for e, example in enumerate(examples):
        score, text = best.get(e, (-np.inf, ""))
        if allow_empty and null.get(e, -np.inf) - score > decoding.null_threshold:
            text = ""
        answers[example.id] = text
    return answers


def _best_span(start: np.ndarray, end: np.ndarray, offsets: np.ndarray, decoding: Decoding
               ) -> tuple[float, tuple[int, int]] | None:
    """(score, (first char, end char)) of the window's best span inside the context."""
    context = offsets[:, 0] >= 0  # (S,)
    # the n best among the context's pieces (the module docstring says how run_qa differs)
    starts = np.argsort(np.where(context, start, -np.inf))[::-1][:decoding.n_best]
    ends = np.argsort(np.where(context, end, -np.inf))[::-1][:decoding.n_best]
    found = None
    for s in starts:
        for t in ends:
            if not (context[s] and context[t]) or t < s or t - s + 1 > decoding.max_answer_length:
                continue
            score = float(start[s] + end[t])
            if found is None or score > found[0]:
                found = (score, (int(offsets[s, 0]), int(offsets[t, 1])))
    return found


def _task_scores(examples: Sequence[QAExample], predictions: dict[str, str],
                 loss: float | None) -> TaskScores:
    golds = {e.id: [t for t, _ in e.answers] for e in examples}
    s = squad_scores(predictions, golds)
    metrics = {k: v for k, v in s.items() if not k.endswith("total")}
    if loss is not None:
        metrics["loss"] = loss
    line = f"exact match {s['exact']:.4f}, F1 {s['f1']:.4f}"
    if "no_answer_total" in s:
        line += (f" (answerable F1 {s.get('has_answer_f1', 0.0):.4f}, unanswerable exact "
                 f"{s['no_answer_exact']:.4f})")
    if loss is not None:
        line += f", loss {loss:.4f}"
    detail = [{"id": e.id, "question": e.question, "predicted": predictions[e.id],
               "answers": golds[e.id]} for e in examples]
    return TaskScores(metrics=metrics, rank=(s["f1"], s["exact"]), line=line, detail=detail)
