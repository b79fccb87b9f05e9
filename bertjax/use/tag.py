"""Token classification (named entities): the entities transformers'
`pipeline("token-classification", aggregation_strategy=...)` finds, with the same labels, words,
character offsets and scores (each token's softmax over the labels, in float32).

Strategies, as the pipeline's: "none" gives every token (but the ignored labels, "O") with its
best label; "simple" joins adjacent tokens of one entity type (a "B-" tag starts a new entity,
an "I-" tag or a bare label continues one) and scores the group by its mean; "first", "average"
and "max" first give each word one label (its first token's, the best of its tokens' mean
scores, or its most confident token's) and then group as "simple". A token continues a word when
its text is not as long as its characters in the text ("##ing" against "ing"); an [UNK] token
is a word of its own, named by its characters. `word` is the tokenizer's decoding of the tokens
("##" pieces joined on); `start` and `end` are character offsets in the text.

A text longer than the model's positions is cut, as the pipeline cuts it by default (its
tokenizer's `truncation=True` up to `model_max_length`, which bertjax exports set to the model's
positions): entities are found in the first `max_length - 2` tokens only, and a
`TruncationWarning` says so. The pipeline's `stride` (tagging all of a long text in overlapping
windows) is not offered.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from tokenizers import Encoding

from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer, check_texts
from bertjax.use.encode import check_max_length, encode, jitted_forward, model_max_length
from bertjax.use.packed import packed_batches
from bertjax.use.truncation import warn_cut

AGGREGATIONS = ("none", "simple", "first", "average", "max")  # the pipeline's strategies
IGNORED_LABELS = ("O",)  # the pipeline's default `ignore_labels`
BATCH_SIZE = 32  # texts per forward pass

Decode = Callable[[list[str]], str]  # tokens -> text, as the tokenizer's decoder joins them


@dataclasses.dataclass
class _Token:
    """One token of a text with its label probabilities (the pipeline's "pre-entity")."""

    word: str  # the token ("##ing"), or an [UNK]'s characters
    scores: np.ndarray  # (L,) float32 softmax over the labels
    start: int
    end: int
    index: int  # position in the model's input, [CLS] = 0
    is_subword: bool  # continues the word of the token before it


def tag(
    model: Any,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    aggregation: str = "simple",
    max_length: int | None = None,
    ignore_labels: Sequence[str] = IGNORED_LABELS,
    names: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> list[list[dict[str, Any]]]:
    """For each text, its entities as the pipeline's dicts: `entity_group`, `score`, `word`,
    `start`, `end` (`aggregation="none"`: `entity`, `score`, `index`, `word`, `start`, `end`).

    `model` is a `BertForTokenClassification` (its labels: `model.config.id2label`). Text longer
    than `max_length` tokens (default: the model's positions) is cut with a warning naming it
    (`names`, default "line 1", ...). An empty text has no entities. `max_tokens`: pack the
    texts into batches of that many token slots (`bertjax.use.packed`) instead of batches of
    `BATCH_SIZE` texts; the same entities and scores (within 1e-5).
    """
    if aggregation not in AGGREGATIONS:
        raise InputError(f"aggregation must be one of {', '.join(AGGREGATIONS)}, got "
                         f"{aggregation!r}")
    if "token_classifier" not in getattr(model, "head_modules", ()):
        raise InputError(f"tagging needs a token-classification model (BertForTokenClassification),"
                         f" got {type(model).__name__}; load a checkpoint fine-tuned for token "
                         "classification with from_pretrained(path, "
                         "model_cls=BertForTokenClassification)")
    check_texts(texts)
    check_model_and_tokenizer(model, tokenizer, "tag")
    limit = model_max_length(model)
    max_length = limit if max_length is None else max_length
    check_max_length(max_length, limit)
    names = list(names or [f"line {i + 1}" for i in range(len(texts))])
    if len(names) != len(texts):
        raise InputError(f"got {len(texts)} texts but {len(names)} names")
    labels = model.config.id2label
    decoder = tokenizer.tokenizer.decoder
    decode: Decode = decoder.decode if decoder is not None else " ".join
    rows, cut = _logits(model, tokenizer, list(texts), max_length, max_tokens)
    warn_cut(_Cut(cut), names, max_length, limit)
    encodings = tokenizer.tokenizer.encode_batch(list(texts), add_special_tokens=False)
    results: list[list[dict[str, Any]]] = []
    for text, encoding, logits, n_cut in zip(texts, encodings, rows, cut, strict=True):
        kept = len(encoding.ids) - n_cut
        tokens = _tokens(tokenizer, text, encoding, kept, _softmax(logits[1:kept + 1]))
        entities = _aggregate(tokens, aggregation, labels, decode)
        results.append([e for e in entities
                        if e.get("entity", e.get("entity_group")) not in ignore_labels])
    return results


@dataclasses.dataclass
class _Cut:
    """What `warn_cut` reads of an `Encoded`: the tokens cut from each text."""

    cut: list[int]


def _logits(model: Any, tokenizer: Tokenizer, texts: list[str], max_length: int,
            max_tokens: int | None) -> tuple[list[np.ndarray], list[int]]:
    """Each text's float32 logits ([CLS] to [SEP], (length, L)) and the tokens cut from it: in
    batches of `BATCH_SIZE` texts, or packed into batches of `max_tokens` token slots."""
    forward = jitted_forward(model)
    if max_tokens is None:
        rows, cut = [], []
        for first in range(0, len(texts), BATCH_SIZE):
            batch = encode(tokenizer, texts[first:first + BATCH_SIZE], max_length=max_length,
                           warn=False)
            logits = np.asarray(forward(batch.arrays(model.config)).logits, np.float32)
            rows += [x[:n] for x, n in zip(logits, batch.attention_mask.sum(1), strict=True)]
            cut += batch.cut
        return rows, cut
    encoded = encode(tokenizer, texts, max_length=max_length, warn=False)
    rows = [np.zeros(0)] * len(texts)
    for packed in packed_batches(encoded.arrays(model.config), max_tokens=max_tokens,
                                 limit=model_max_length(model), pad_id=tokenizer.special.pad,
                                 config=model.config):
        logits = np.asarray(forward(packed.arrays).logits, np.float32)  # (R, S, L)
        for n, values in zip(packed.members, packed.layout.split(logits), strict=True):
            rows[n] = values
    return rows, encoded.cut


def _softmax(logits: np.ndarray) -> np.ndarray:
    """Softmax over the last axis in float32, as the pipeline computes it (numpy)."""
    shifted = np.exp(logits - logits.max(axis=-1, keepdims=True))
    return shifted / shifted.sum(axis=-1, keepdims=True)


def _tokens(tokenizer: Tokenizer, text: str, encoding: Encoding, kept: int,
            scores: np.ndarray) -> list[_Token]:
    """The first `kept` tokens of `text` (special tokens left out) with their `scores` (kept, L),
    and whether each continues a word (the pipeline's `gather_pre_entities`)."""
    word_aware = getattr(tokenizer.tokenizer.model, "continuing_subword_prefix", None)
    out = []
    for i in range(kept):
        if encoding.special_tokens_mask[i]:
            continue
        start, end = encoding.offsets[i]
        word, characters = tokenizer.id_to_token(encoding.ids[i]), text[start:end]
        if word_aware:
            is_subword = len(word) != len(characters)
        else:  # the pipeline's guess for tokenizers without a "##" prefix
            is_subword = start > 0 and " " not in text[start - 1:start + 1]
        if encoding.ids[i] == tokenizer.special.unk:
            word, is_subword = characters, False
        out.append(_Token(word, scores[i], start, end, i + 1, is_subword))
    return out


def _aggregate(tokens: list[_Token], aggregation: str, labels: Sequence[str], decode: Decode
               ) -> list[dict[str, Any]]:
    """The pipeline's `aggregate`: one entity per token ("none"), or per group of them."""
    if aggregation in ("none", "simple"):
        entities = []
        for t in tokens:
            best = int(t.scores.argmax())
            entities.append({"entity": labels[best], "score": t.scores[best], "index": t.index,
                             "word": t.word, "start": t.start, "end": t.end})
    else:
        entities = [_word_entity(word, aggregation, labels, decode) for word in _words(tokens)]
    if aggregation == "none":
        return [{**e, "score": float(e["score"])} for e in entities]
    return _group_entities(entities, decode)


def _words(tokens: list[_Token]) -> list[list[_Token]]:
    """Tokens gathered into words: a token that is not a subword starts one."""
    words: list[list[_Token]] = []
    for t in tokens:
        if words and t.is_subword:
            words[-1].append(t)
        else:
            words.append([t])
    return words


def _word_entity(tokens: list[_Token], aggregation: str, labels: Sequence[str], decode: Decode
                 ) -> dict[str, Any]:
    """One word's label and score (the pipeline's `aggregate_word`)."""
    if aggregation == "first":
        scores = tokens[0].scores
    elif aggregation == "max":
        scores = max(tokens, key=lambda t: t.scores.max()).scores
    else:  # average
        scores = np.nanmean(np.stack([t.scores for t in tokens]), axis=0)  # (L,)
    best = int(scores.argmax())
    return {"entity": labels[best], "score": scores[best], "word": decode([t.word for t in tokens]),
            "start": tokens[0].start, "end": tokens[-1].end}


def _split_tag(label: str) -> tuple[str, str]:
    """("B" or "I", type): a label without a B-/I- prefix continues an entity of its type."""
    if label.startswith(("B-", "I-")):
        return label[0], label[2:]
    return "I", label


def _group_entities(entities: list[dict[str, Any]], decode: Decode) -> list[dict[str, Any]]:
    """Adjacent entities of one type joined, a "B-" starting a new one (`group_entities`)."""
    groups: list[list[dict[str, Any]]] = []
    for e in entities:
        bi, kind = _split_tag(e["entity"])
        if groups and bi != "B" and kind == _split_tag(groups[-1][-1]["entity"])[1]:
            groups[-1].append(e)
        else:
            groups.append([e])
    return [{"entity_group": g[0]["entity"].split("-", 1)[-1],
             "score": float(np.mean(np.nanmean([e["score"] for e in g]))),
             "word": decode([e["word"] for e in g]), "start": g[0]["start"], "end": g[-1]["end"]}
            for g in groups]
