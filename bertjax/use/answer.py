"""Extractive question answering with a `BertForQuestionAnswering`: the answers transformers'
`pipeline("question-answering")` (4.x, its last release; 5.x has none) gives, with the same
defaults, windows, scores and character offsets.

The context is cut into windows of `max_seq_len` pieces overlapping by `doc_stride` (the
pipeline's: min(model length, 384) and min(max_seq_len // 2, 128)); the question is never cut.
In each window the start and end logits outside the context (but [CLS]) are masked, each is
softmaxed over the window, and every span inside `max_answer_len` pieces scores
P(start) * P(end); the best `top_k * 2 + 10` spans of each window (`top_k` without word
alignment) become answers, a span aligned to whole words (`align_to_words`) as the pipeline
aligns it, and spans whose text is the same (ignoring case) add their scores. With
`handle_impossible_answer`, "" competes with the lowest P([CLS]) * P([CLS]) over the windows.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.data.squad import NO_OFFSET, QAExample, QAWindows, encode_squad, window_specials
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer
from bertjax.use.encode import jitted_forward, model_max_length
from bertjax.use.packed import packed_batches

PIPELINE_MAX_SEQ_LEN = 384  # the pipeline's cap on the window length
_MASKED = -10000.0  # the pipeline's logit for a piece that cannot be in an answer


def answer(
    model: Any,
    tokenizer: Tokenizer,
    question: str,
    context: str,
    *,
    top_k: int = 1,
    doc_stride: int | None = None,
    max_answer_len: int = 15,
    max_seq_len: int | None = None,
    handle_impossible_answer: bool = False,
    align_to_words: bool = True,
    max_tokens: int | None = None,
) -> list[dict[str, Any]]:
    """The `top_k` best answers, best first, as the pipeline's dicts: `score`, `start`, `end`
    (character offsets in `context`), `answer` (`context[start:end]`). `max_tokens`: pack the
    context's windows into batches of that many token slots (`bertjax.use.packed`) instead of
    one padded batch (a short context's windows are shorter than `max_seq_len`); the same
    answers and scores within 1e-5."""
    for argument, text in (("question", question), ("context", context)):
        if not isinstance(text, str):
            raise TypeError(f"{argument} must be a string, got {type(text).__name__}")
    check_model_and_tokenizer(model, tokenizer, "answer", "qa_outputs", "BertForQuestionAnswering")
    if not question.strip() or not context.strip():
        raise InputError("give a question and a context, neither empty")
    if top_k < 1 or max_answer_len < 1:
        raise InputError(f"top_k and max_answer_len must be at least 1, got {top_k} and "
                         f"{max_answer_len}")
    limit = model_max_length(model)
    max_seq_len = max_seq_len or min(limit, PIPELINE_MAX_SEQ_LEN)
    if max_seq_len > limit:
        raise InputError(f"max_seq_len {max_seq_len} is longer than the model's {limit} "
                         f"positions; pass {limit} or less")
    doc_stride = min(max_seq_len // 2, 128) if doc_stride is None else doc_stride
    example = QAExample("q", question, context, (), "question")
    asked = len(tokenizer.encode_batch([question])[0])
    _check_room(asked, window_specials(tokenizer), max_seq_len, doc_stride, limit)
    windows = encode_squad(tokenizer, [example], max_seq_len, doc_stride, max_query_length=asked)
    start, end = _logits(model, windows, max_tokens, tokenizer.special.pad)  # (N, S) each
    answers: list[dict[str, Any]] = []
    null = 1000000.0  # the pipeline's "large and positive" start
    wanted = top_k * 2 + 10 if align_to_words else top_k  # alignment may merge candidates
    for r in range(len(windows.example)):
        p_start, p_end, window_null = _probabilities(start[r], end[r], windows, r)
        null = min(null, window_null)
        for s, t, score in _best_spans(p_start, p_end, wanted, max_answer_len,
                                       windows.offsets[r, :, 0] != NO_OFFSET):
            a, b = _characters(windows, r, s, t, align_to_words)
            _add(answers, context, a, b, score)
    if handle_impossible_answer:
        answers.append({"score": null, "start": 0, "end": 0, "answer": ""})
    return sorted(answers, key=lambda x: x["score"], reverse=True)[:top_k]


def _inputs(windows: QAWindows) -> dict[str, np.ndarray]:
    return {k: getattr(windows, k) for k in ("input_ids", "token_type_ids", "attention_mask")}


def _check_room(asked: int, specials: int, max_seq_len: int, doc_stride: int, limit: int
                ) -> None:
    """An InputError unless a window of `max_seq_len` pieces holds the `asked`-piece question
    and more context pieces than `doc_stride`: it names the change that helps, or, when a window
    of the model's `limit` positions could not hold the question and one context piece, says
    the question alone does not fit."""
    room = max_seq_len - asked - specials  # context pieces per window
    if room > doc_stride:
        return
    if limit - asked - specials < 1:
        raise InputError(f"the question alone does not fit: it takes {asked} pieces, and a window "
                         f"of the model's {limit} positions holds at most "
                         f"{limit - specials - 1} question pieces beside one piece of context; "
                         "shorten the question")
    fixes = [f"lower doc_stride (--doc-stride) to {room - 1} or less"] if room >= 1 else []
    needed = asked + specials + doc_stride + 1
    if max_seq_len < needed <= limit:
        fixes.append(f"raise max_seq_len (--max-seq-len) to {needed} or more (the model takes up "
                     f"to {limit})")
    elif room < 1:
        fixes.append(f"raise max_seq_len (--max-seq-len) to {limit} and lower doc_stride "
                     f"(--doc-stride) to {limit - asked - specials - 1} or less")
    raise InputError(f"the question takes {asked} pieces: with max_seq_len {max_seq_len} a window "
                     f"holds {max(room, 0)} context pieces, not more than doc_stride "
                     f"{doc_stride}; {', or '.join(fixes)}")


def _logits(model: Any, windows: QAWindows, max_tokens: int | None, pad_id: int
            ) -> tuple[np.ndarray, np.ndarray]:
    """Start and end logits (N, S) of the windows, float32: one padded batch, or packed
    batches whose per-token logits are put back at each window's positions (0 past its end,
    where `_probabilities` masks them like the padding they replace)."""
    forward = jitted_forward(model)
    if max_tokens is None:
        out = forward(_inputs(windows))
        return np.asarray(out.start_logits, np.float32), np.asarray(out.end_logits, np.float32)
    start, end = (np.zeros(windows.input_ids.shape, np.float32) for _ in range(2))
    for batch in packed_batches(_inputs(windows), max_tokens=max_tokens,
                                limit=model_max_length(model), pad_id=pad_id,
                                config=model.config):
        out = forward(batch.arrays)
        for target, logits in ((start, out.start_logits), (end, out.end_logits)):
            for n, values in zip(batch.members, batch.layout.split(np.asarray(logits)),
                                 strict=True):
                target[n, :len(values)] = values
    return start, end


def _probabilities(start: np.ndarray, end: np.ndarray, windows: QAWindows, r: int
                   ) -> tuple[np.ndarray, np.ndarray, float]:
    """Start and end probabilities (S,) over the window's context pieces and [CLS], [CLS]'s
    then set to 0, and P([CLS]) * P([CLS]) before that."""
    allowed = windows.offsets[r, :, 0] != NO_OFFSET  # (S,) context pieces
    allowed[0] = True  # [CLS]
    p = [np.array(jax.nn.softmax(jnp.where(allowed, x, _MASKED))) for x in (start, end)]
    null = float(p[0][0] * p[1][0])
    p[0][0] = p[1][0] = 0.0
    return p[0], p[1], null


def _best_spans(p_start: np.ndarray, p_end: np.ndarray, k: int, max_answer_len: int,
                context: np.ndarray) -> list[tuple[int, int, float]]:
    """The pipeline's `decode_spans`: the `k` best (start, end, score) with start <= end <
    start + max_answer_len, best first, both ends in the context or [CLS]."""
    outer = np.outer(p_start, p_end)  # (S, S)
    candidates = np.tril(np.triu(outer), max_answer_len - 1).ravel()
    if k == 1:
        order = np.array([np.argmax(candidates)])
    elif len(candidates) < k:
        order = np.argsort(-candidates)
    else:
        part = np.argpartition(-candidates, k)[:k]
        order = part[np.argsort(-candidates[part])]
    starts, ends = np.unravel_index(order, outer.shape)
    keep = context.copy()
    keep[0] = True  # [CLS] counts as desired, as in the pipeline
    return [(int(s), int(t), float(outer[s, t])) for s, t in zip(starts, ends, strict=True)
            if keep[s] and keep[t]]


def _characters(windows: QAWindows, r: int, s: int, t: int, align_to_words: bool
                ) -> tuple[int, int]:
    """The span's characters: its pieces' offsets, or with `align_to_words` the whole words its
    first and last piece belong to (as far as the window holds them), as the pipeline's
    `get_indices`; [CLS] gives (0, 0)."""
    offsets, words = windows.offsets[r], windows.words[r]
    if align_to_words and words[s] != NO_OFFSET and words[t] != NO_OFFSET:
        first = offsets[words == words[s], 0].min()
        last = offsets[words == words[t], 1].max()
        return int(first), int(last)
    return int(max(offsets[s, 0], 0)), int(max(offsets[t, 1], 0))


def _add(answers: list[dict[str, Any]], context: str, a: int, b: int, score: float) -> None:
    """Add a span, or its score to an answer of the same text (ignoring case)."""
    text = context[a:b]
    same = next((x for x in answers if x["answer"].lower() == text.lower()), None)
    if same is not None:
        same["score"] += score
    else:
        answers.append({"score": score, "start": a, "end": b, "answer": text})
