"""Extractive question answering data: SQuAD v1.1 / v2.0 files, and questions with long contexts
as windows of WordPiece pieces that keep each piece's character offsets.

A window is `[CLS] question [SEP] context piece ... [SEP]`, padded to `max_length`; a context
longer than one window is cut into several that overlap by `doc_stride` pieces, as Hugging Face's
fast tokenizers cut it (`truncation="only_second", stride=doc_stride,
return_overflowing_tokens=True`, the question first). In training, a window that does not hold
the whole answer (and every window of an unanswerable question) points at [CLS] (position 0).
Every problem in a file is a ValueError naming the file and the question's id.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from bertjax.common.files import read_text
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError

NO_OFFSET = -1  # the offsets of a piece that is not context ([CLS], question, [SEP], padding)


@dataclasses.dataclass(frozen=True)
class QAExample:
    id: str
    question: str
    context: str
    answers: tuple[tuple[str, int], ...]  # (text, character start in context); () if impossible
    where: str  # "file: question ID", for messages

    @property
    def answerable(self) -> bool:
        return bool(self.answers)


def read_squad(path: str | Path, *, what: str = "file") -> list[QAExample]:
    """The questions of a SQuAD v1.1 or v2.0 JSON file (`{"data": [{"paragraphs": [{"context",
    "qas": [{"id", "question", "answers": [{"text", "answer_start"}], "is_impossible"}]}]}]}`).

    A ValueError names the file (as `what`) and question of each problem: not SQuAD's layout, an
    answer whose text is not at its `answer_start` in the context, an answerable question with
    no answer, a repeated id, no questions."""
    path = Path(path)
    try:
        document = json.loads(read_text(path, what))
    except json.JSONDecodeError as err:
        raise InputError(f"{what} {path} is not JSON ({err}); give a SQuAD v1.1 or v2.0 file") \
            from err
    if not isinstance(document, dict) or not isinstance(document.get("data"), list):
        raise InputError(f"{what} {path} has no 'data' list: not SQuAD's layout ({{\"data\": "
                         "[{\"paragraphs\": [{\"context\", \"qas\"}]}]})")
    examples, seen = [], set()
    for a, article in enumerate(document["data"]):
        for p, paragraph in enumerate(_list(article, "paragraphs", f"{path}: data[{a}]")):
            where = f"{path}: data[{a}].paragraphs[{p}]"
            context = _string(paragraph, "context", where)
            for q, qa in enumerate(_list(paragraph, "qas", where)):
                example = _example(qa, context, f"{where}.qas[{q}]", path)
                if example.id in seen:
                    raise InputError(f"{example.where}: the id {example.id!r} is used twice; "
                                     "give every question its own id")
                seen.add(example.id)
                examples.append(example)
    if not examples:
        raise InputError(f"{what} {path} holds no questions")
    return examples


def _example(qa: object, context: str, where: str, path: Path) -> QAExample:
    if not isinstance(qa, dict):
        raise InputError(f"{where}: a question is an object with 'id', 'question', 'answers'")
    qid = str(qa.get("id", where))
    named = f"{path}: question {qid!r}"
    question = _string(qa, "question", named)
    impossible = bool(qa.get("is_impossible", False))
    answers = []
    for answer in [] if impossible else _list(qa, "answers", named):
        text = _string(answer, "text", named) if isinstance(answer, dict) else None
        start = answer.get("answer_start") if isinstance(answer, dict) else None
        if text is None or not isinstance(start, int) or isinstance(start, bool):
            raise InputError(f"{named}: an answer is {{\"text\": str, \"answer_start\": int}}")
        if context[start:start + len(text)] != text:
            found = context.find(text)
            hint = (f"the text is at {found}" if found >= 0 else "the text is not in the context")
            raise InputError(f"{named}: the answer {text!r} is not at answer_start {start} of its "
                             f"context ({hint}); fix answer_start")
        answers.append((text, start))
    if not impossible and not answers:
        raise InputError(f"{named}: no answers and not marked is_impossible; give an answer or "
                         "\"is_impossible\": true (SQuAD v2.0)")
    return QAExample(qid, question, context, tuple(answers), named)


def _list(record: object, field: str, where: str) -> list:
    value = record.get(field) if isinstance(record, dict) else None
    if not isinstance(value, list):
        raise InputError(f"{where}: no '{field}' list")
    return value


def _string(record: object, field: str, where: str) -> str:
    value = record.get(field) if isinstance(record, dict) else None
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{where}: no text in '{field}'")
    return value


def write_squad(examples: Sequence[QAExample], path: str | Path, title: str = "bertjax") -> None:
    """`examples` as a SQuAD v2.0 file (v1.1 readers read it when every question is answerable),
    one paragraph per example."""
    paragraphs = [{"context": e.context, "qas": [{
        "id": e.id, "question": e.question, "is_impossible": not e.answerable,
        "answers": [{"text": t, "answer_start": s} for t, s in e.answers]}]} for e in examples]
    Path(path).write_text(json.dumps({"version": "v2.0", "data": [
        {"title": title, "paragraphs": paragraphs}]}, ensure_ascii=False) + "\n", encoding="utf-8")


# --- windows -------------------------------------------------------------------------------------


@dataclasses.dataclass
class QAWindows:
    """Windows of questions and contexts, right padded to `max_length`."""

    input_ids: np.ndarray  # (N, S) int32
    token_type_ids: np.ndarray  # (N, S) int32: 0 for [CLS] question [SEP], 1 for context [SEP]
    attention_mask: np.ndarray  # (N, S) int32
    offsets: np.ndarray  # (N, S, 2) int32: a context piece's [start, end) in its context, else -1
    words: np.ndarray  # (N, S) int32: a context piece's word (index in its context), else -1
    example: np.ndarray  # (N,) int32: the example each window comes from
    start_positions: np.ndarray  # (N,) int32: the answer's first piece, 0 ([CLS]) if not inside
    end_positions: np.ndarray  # (N,) int32: its last piece, 0 if not inside

    def arrays(self) -> dict[str, np.ndarray]:
        """The model inputs and the training targets."""
        return {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids,
                "attention_mask": self.attention_mask, "start_positions": self.start_positions,
                "end_positions": self.end_positions}

    def rows(self, rows: np.ndarray) -> QAWindows:
        return QAWindows(*(getattr(self, f.name)[rows] for f in dataclasses.fields(self)))


def window_count(tokenizer: Tokenizer, examples: Sequence[QAExample], max_length: int,
                 doc_stride: int, max_query_length: int = 64) -> np.ndarray:
    """(N,) windows each example takes."""
    questions, contexts = _pieces(tokenizer, examples, max_query_length)
    specials = window_specials(tokenizer)
    return np.array([len(_starts(len(c.ids), _room(len(q.ids), max_length, specials), doc_stride))
                     for q, c in zip(questions, contexts, strict=True)], np.int64)


def encode_squad(tokenizer: Tokenizer, examples: Sequence[QAExample], max_length: int,
                 doc_stride: int, max_query_length: int = 64) -> QAWindows:
    """Every window of every example, in order (an example's windows together). Questions
    longer than `max_query_length` pieces are cut to it (Hugging Face's run_qa keeps them whole;
    BERT's SQuAD script cuts them at 64)."""
    specials = window_specials(tokenizer)
    check_window(max_length, doc_stride, max_query_length, specials)
    questions, contexts = _pieces(tokenizer, examples, max_query_length)
    special, family = tokenizer.special, tokenizer.family
    between = [special.sep] * (family.pair_separators - 1)  # RoBERTa's </s></s>
    rows: list[tuple[list[int], int, list[tuple[int, int]], list[int], int, int, int]] = []
    for e, (example, question, context) in enumerate(zip(examples, questions, contexts,
                                                         strict=True)):
        room = _room(len(question.ids), max_length, specials)
        for start in _starts(len(context.ids), room, doc_stride):
            piece_ids = context.ids[start:start + room]
            offsets = context.offsets[start:start + room]
            ids = [special.cls, *question.ids, special.sep, *between, *piece_ids, special.sep]
            first = len(question.ids) + 2 + len(between)  # the window's first context position
            s, t = _answer_positions(example, offsets, first)
            rows.append((ids, first, offsets, context.words[start:start + room], e, s, t))
    n = len(rows)
    out = QAWindows(np.full((n, max_length), special.pad, np.int32),
                    np.zeros((n, max_length), np.int32), np.zeros((n, max_length), np.int32),
                    np.full((n, max_length, 2), NO_OFFSET, np.int32),
                    np.full((n, max_length), NO_OFFSET, np.int32), np.zeros(n, np.int32),
                    np.zeros(n, np.int32), np.zeros(n, np.int32))
    for r, (ids, first, offsets, words, e, s, t) in enumerate(rows):
        out.input_ids[r, :len(ids)] = ids
        out.attention_mask[r, :len(ids)] = 1
        out.token_type_ids[r, first:len(ids)] = family.second_segment_type  # RoBERTa's: 0
        if offsets:
            out.offsets[r, first:first + len(offsets)] = offsets
            out.words[r, first:first + len(words)] = words
        out.example[r], out.start_positions[r], out.end_positions[r] = e, s, t
    return out


def default_doc_stride(max_length: int, max_query_length: int, specials: int = 3) -> int:
    """A quarter of the window, at most run_qa's 128, always below the context pieces a window
    holds (so every window moves forward; `specials`: `window_specials`, BERT's 3)."""
    return max(0, min(max_length // 4, 128, _room(max_query_length, max_length, specials) - 1))


def check_window(max_length: int, doc_stride: int, max_query_length: int,
                 specials: int = 3) -> None:
    """A ValueError naming the option unless windows can hold a question and move forward
    (`specials`: the special tokens of a window, [CLS] [SEP] [SEP], or RoBERTa's four)."""
    if max_query_length < 1:
        raise InputError(f"max_query_length must be at least 1, got {max_query_length}")
    room = _room(max_query_length, max_length, specials)
    if room < 1:
        raise InputError(f"max_length {max_length} leaves no room for context after a question "
                         f"of {max_query_length} pieces and {specials} special tokens; raise "
                         "max_length or lower max_query_length")
    if not 0 <= doc_stride < room:
        raise InputError(f"doc_stride {doc_stride} must be below the {room} context pieces a "
                         f"window holds (max_length {max_length} - question {max_query_length} "
                         f"- {specials}), or windows would not move forward; lower doc_stride")


def window_specials(tokenizer: Tokenizer) -> int:
    """The special tokens of a window: [CLS] question [SEP] (more separators) context [SEP]."""
    return 2 + tokenizer.family.pair_separators


def _room(question_pieces: int, max_length: int, specials: int = 3) -> int:
    return max_length - question_pieces - specials  # context pieces per window


def _starts(n: int, room: int, stride: int) -> list[int]:
    """The first context piece of each window: every `room - stride` pieces until one reaches
    the end (a single window for an empty or short context)."""
    starts = [0]
    while starts[-1] + room < n:
        starts.append(starts[-1] + room - stride)
    return starts


@dataclasses.dataclass
class _Pieces:
    ids: list[int]
    offsets: list[tuple[int, int]]
    words: list[int]


def _pieces(tokenizer: Tokenizer, examples: Sequence[QAExample], max_query_length: int
            ) -> tuple[list[_Pieces], list[_Pieces]]:
    """(question pieces, context pieces with character offsets) of each example."""
    encode = tokenizer.tokenizer.encode_batch
    questions = encode([e.question for e in examples], add_special_tokens=False)
    contexts = encode([e.context for e in examples], add_special_tokens=False)
    return ([_Pieces(q.ids[:max_query_length], [], []) for q in questions],
            [_Pieces(c.ids, [(o[0], o[1]) for o in c.offsets],
                     [-1 if w is None else w for w in c.word_ids]) for c in contexts])


def _answer_positions(example: QAExample, offsets: list[tuple[int, int]], first: int
                      ) -> tuple[int, int]:
    """The first answer's first and last piece in the window, or (0, 0) if not all inside."""
    if not example.answers or not offsets:
        return 0, 0
    text, start = example.answers[0]
    end = start + len(text)
    if not (offsets[0][0] <= start and offsets[-1][1] >= end):
        return 0, 0
    s = next(i for i, (a, b) in enumerate(offsets) if b > start)
    t = max(i for i, (a, b) in enumerate(offsets) if a < end)
    return first + s, first + t
