"""Entity-level precision, recall and F1 for BIO-tagged sequences, as `seqeval` computes them in
its default mode (`seqeval.metrics.f1_score`, `classification_report` without `mode="strict"`,
the conlleval.pl chunking), plus token accuracy.

Pure Python: the scores of a fine-tuning run need no framework. Chunking follows seqeval 1.2.2's
`get_entities` rule for rule, ill-formed input included: an `I-X` after `O` or after another type
starts an entity (strict mode would drop it), a type switch inside a run ends one entity and
starts the next, and a sentence end closes whatever is open. Sentences are scored as seqeval
scores a list of lists: joined, each followed by an `O`, so no entity spans two sentences and the
same span in two sentences counts twice.

    scores = entity_scores([["B-PER", "I-PER", "O"]], [["B-PER", "O", "O"]])
    scores["f1"], scores["per_type"]["PER"]["support"]   # 0.0, 1
"""

from __future__ import annotations

from collections.abc import Sequence

from bertjax.errors import InputError

_CLOSE_AFTER = frozenset("ES")  # an E- or S- tag always closes its entity
_OUTSIDE = frozenset("O.")  # seqeval's "not in an entity" first letters


def get_entities(tags: Sequence[str]) -> list[tuple[str, int, int]]:
    """The entities of one tag sequence as (type, start, end), `end` inclusive, in order: the
    chunks of seqeval's default mode (`seqeval.metrics.sequence_labeling.get_entities`)."""
    _check_tags(tags, "tags")
    return _chunks(list(tags))


def _chunks(seq: list[str]) -> list[tuple[str, int, int]]:
    """seqeval's chunker: a tag's first letter says where it stands (B, I, E, S, O), the text
    after the first `-` its type ("_" when there is none)."""
    prev_tag, prev_type, begin = "O", "", 0
    chunks = []
    for i, chunk in enumerate([*seq, "O"]):  # the final O closes an entity open at the end
        tag, type_ = chunk[0], chunk[1:].split("-", maxsplit=1)[-1] or "_"
        if _ends(prev_tag, tag, prev_type, type_):
            chunks.append((prev_type, begin, i - 1))
        if _starts(prev_tag, tag, prev_type, type_):
            begin = i
        prev_tag, prev_type = tag, type_
    return chunks


def _ends(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Whether an entity ended with the previous tag (seqeval's `end_of_chunk`)."""
    return (prev_tag in _CLOSE_AFTER
            or (prev_tag in "BI" and tag in "BSO")
            or (prev_tag not in _OUTSIDE and prev_type != type_))


def _starts(prev_tag: str, tag: str, prev_type: str, type_: str) -> bool:
    """Whether an entity starts at this tag (seqeval's `start_of_chunk`)."""
    return (tag in "BS"
            or (prev_tag in "ESO" and tag in "EI")
            or (tag not in _OUTSIDE and prev_type != type_))


def _check_tags(tags: Sequence[str], what: str) -> None:
    if isinstance(tags, str):
        raise InputError(f"{what} must be a sequence of tags, not the string {tags!r}")
    for i, tag in enumerate(tags):
        if not isinstance(tag, str) or not tag:
            raise InputError(f"{what}[{i}] is {tag!r}; every tag is a non-empty string "
                             "(e.g. 'O', 'B-PER', 'I-PER')")


def _flat_entities(seqs: Sequence[Sequence[str]]) -> dict[str, set[tuple[int, int]]]:
    """{type: {(start, end)}} over the sentences joined as seqeval joins them (each followed
    by an O)."""
    flat = [tag for seq in seqs for tag in (*seq, "O")]
    out: dict[str, set[tuple[int, int]]] = {}
    for type_, start, end in _chunks(flat):
        out.setdefault(type_, set()).add((start, end))
    return out


def _prf(correct: int, predicted: int, true: int) -> tuple[float, float, float]:
    """Precision, recall, F1; 0.0 where a denominator is 0 (seqeval's `zero_division="warn"`)."""
    precision = correct / predicted if predicted else 0.0
    recall = correct / true if true else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1


def entity_scores(true_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]]
                  ) -> dict:
    """Entity scores of predicted tag sequences against the true ones, as seqeval's default mode:

    - `precision`, `recall`, `f1`: micro averages (seqeval's `f1_score` default), from the
      counts `correct`, `predicted` and `true` (entities matched on type, start and end);
    - `macro`, `weighted`: {precision, recall, f1} averaged over types, unweighted and weighted
      by support (`classification_report`'s rows; macro is 0.0, not NaN, with no types at all);
    - `per_type`: {type: {precision, recall, f1, support, predicted, correct}}, sorted by type;
    - `accuracy`: the fraction of tokens whose tag is right (`accuracy_score`).

    Sentences must pair up with equal lengths; anything else is a ValueError naming the first
    sentence that does not."""
    _check_pairs(true_seqs, pred_seqs)
    true_entities, pred_entities = _flat_entities(true_seqs), _flat_entities(pred_seqs)
    per_type = {}
    for type_ in sorted(true_entities.keys() | pred_entities.keys()):
        true, pred = true_entities.get(type_, set()), pred_entities.get(type_, set())
        p, r, f = _prf(len(true & pred), len(pred), len(true))
        per_type[type_] = {"precision": p, "recall": r, "f1": f, "support": len(true),
                           "predicted": len(pred), "correct": len(true & pred)}
    counts = {k: int(sum(row[k] for row in per_type.values()))
              for k in ("correct", "predicted", "support")}
    precision, recall, f1 = _prf(counts["correct"], counts["predicted"], counts["support"])
    tokens = sum(len(seq) for seq in true_seqs)
    right = sum(t == p for ts, ps in zip(true_seqs, pred_seqs, strict=True)
                for t, p in zip(ts, ps, strict=True))
    return {"precision": precision, "recall": recall, "f1": f1, "correct": counts["correct"],
            "predicted": counts["predicted"], "true": counts["support"],
            "macro": _average(per_type, weighted=False), "weighted": _average(per_type, True),
            "per_type": per_type, "accuracy": right / tokens}


def _average(per_type: dict[str, dict], weighted: bool) -> dict[str, float]:
    """The types' precision, recall and F1 averaged as seqeval's `macro`/`weighted` rows."""
    rows = list(per_type.values())
    weights = [row["support"] if weighted else 1 for row in rows]
    total = sum(weights)
    if not total:  # seqeval: weighted is 0 without true entities; macro is NaN without types
        return {"precision": 0.0, "recall": 0.0, "f1": 0.0}
    return {k: sum(w * row[k] for w, row in zip(weights, rows, strict=True)) / total
            for k in ("precision", "recall", "f1")}


def _check_pairs(true_seqs: Sequence[Sequence[str]], pred_seqs: Sequence[Sequence[str]]) -> None:
    if len(true_seqs) != len(pred_seqs):
        raise InputError(f"{len(true_seqs)} true sentences but {len(pred_seqs)} predicted; give "
                         "one prediction per sentence")
    if not any(len(seq) for seq in true_seqs):
        raise InputError("no tokens to score; give at least one tagged sentence")
    for i, (true, pred) in enumerate(zip(true_seqs, pred_seqs, strict=True)):
        if len(true) != len(pred):
            raise InputError(f"sentence {i} has {len(true)} true tags but {len(pred)} predicted; "
                             "give one predicted tag per token")
        _check_tags(true, f"true sentence {i}")
        _check_tags(pred, f"predicted sentence {i}")
