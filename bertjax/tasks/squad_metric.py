"""Exact match and F1 of predicted answers, as the official SQuAD evaluation scripts compute them
(v1.1 and v2.0 normalise answers the same way: lower case, no punctuation, no articles a/an/the,
single spaces; a question is scored against its best-matching gold answer; an unanswerable
question's only gold answer is "" and only an empty prediction matches it).

Pure Python: no framework. Scores are fractions in [0, 1] (the scripts print them times 100).
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Mapping, Sequence

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """The official scripts' `normalize_answer`."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(prediction: str, gold: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(gold))


def f1(prediction: str, gold: str) -> float:
    """Token-overlap F1 of the normalised answers (v2.0's `compute_f1`: when either is empty,
    1 if both are, else 0)."""
    pred, true = normalize_answer(prediction).split(), normalize_answer(gold).split()
    if not pred or not true:
        return float(pred == true)
    common = collections.Counter(pred) & collections.Counter(true)
    same = sum(common.values())
    if not same:
        return 0.0
    precision, recall = same / len(pred), same / len(true)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: Mapping[str, str], golds: Mapping[str, Sequence[str]]) -> dict:
    """`exact`, `f1` over every question of `golds` (id -> its gold answer texts; [] or [""] for
    an unanswerable one), and the same over answerable (`has_answer_*`) and unanswerable
    (`no_answer_*`) questions where there are any, with their counts. A question without a
    prediction is a ValueError (the scripts count it wrong with a warning; here it is a bug)."""
    missing = [q for q in golds if q not in predictions]
    if missing:
        raise ValueError(f"{len(missing)} questions have no prediction (e.g. {missing[0]!r})")
    rows: dict[str, list[tuple[float, float]]] = {"has_answer": [], "no_answer": []}
    for qid, answers in golds.items():
        texts = [a for a in answers if normalize_answer(a)] or [""]
        # grouped as the v2.0 script groups (any gold answer), scored against the normalised
        kind = "has_answer" if any(answers) else "no_answer"
        rows[kind].append((max(exact_match(predictions[qid], a) for a in texts),
                           max(f1(predictions[qid], a) for a in texts)))
    every = rows["has_answer"] + rows["no_answer"]
    if not every:
        raise ValueError("no questions to score")
    out: dict[str, float] = {"exact": _mean(every, 0), "f1": _mean(every, 1),
                             "total": float(len(every))}
    for kind, scored in rows.items():
        if scored:
            out.update({f"{kind}_exact": _mean(scored, 0), f"{kind}_f1": _mean(scored, 1),
                        f"{kind}_total": float(len(scored))})
    return out


def _mean(rows: list[tuple[float, float]], column: int) -> float:
    return sum(r[column] for r in rows) / len(rows)
