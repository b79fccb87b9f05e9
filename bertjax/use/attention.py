"""Attention maps of one input: every layer's and head's attention over its real tokens.

`bertjax.viz.attention` draws them (PNG grids, an HTML head view).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer
from bertjax.use.encode import check_max_length, encode, jitted_forward, model_max_length
from bertjax.use.truncation import warn_cut


@dataclasses.dataclass(frozen=True)
class AttentionMaps:
    """Every layer's and head's attention over one input's real tokens (no padding)."""

    tokens: list[str]  # [CLS] A [SEP] (B [SEP])
    boundary: int | None  # index of the first token of sentence B; None for a single sentence
    attentions: np.ndarray  # (L, A, S, S) float32: [layer, head, query, key], rows sum to 1
    model: str = "BERT"  # what produced them, for titles
    # per layer, how far a query sees: None for every token (global), or the tokens on either
    # side of a sliding window (ModernBERT's local layers: `BertConfig.attention_windows`);
    # None: every layer global
    windows: tuple[int | None, ...] | None = None

    def __post_init__(self) -> None:
        n = len(self.tokens)
        if self.attentions.ndim != 4 or self.attentions.shape[2:] != (n, n):
            raise InputError(f"attentions of shape {self.attentions.shape} do not fit {n} tokens: "
                             f"expected (layers, heads, {n}, {n})")
        if self.boundary is not None and not 0 < self.boundary < n:
            raise InputError(f"boundary {self.boundary} is outside the {n} tokens")
        if self.windows is not None and len(self.windows) != self.attentions.shape[0]:
            raise InputError(f"{len(self.windows)} windows for {self.attentions.shape[0]} layers: "
                             "give one per layer (None for a global one)")

    @property
    def windowed(self) -> bool:
        """Whether some layer attends within a sliding window."""
        return self.windows is not None and any(w is not None for w in self.windows)

    @property
    def num_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def num_heads(self) -> int:
        return self.attentions.shape[1]

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)


def attention_maps(
    model: Any,
    tokenizer: Any,
    sentence_a: str,
    sentence_b: str | None = None,
    *,
    max_length: int | None = None,
    name: str | None = None,
    text_name: str | None = None,
) -> AttentionMaps:
    """One inference forward of [CLS] A [SEP] (B [SEP]) with `output_attentions=True`.

    `max_length` (default: the model's positions) cuts longer text, with a `TruncationWarning`
    naming the sentence(s) (or `text_name`, e.g. "--file speech.txt"). `name` labels the
    pictures (default: the model's class name).
    Raises ValueError for an empty sentence or one that has no tokens.
    """
    for argument, sentence in (("sentence_a", sentence_a), ("sentence_b", sentence_b)):
        if sentence is not None and not isinstance(sentence, str):
            raise TypeError(f"{argument} must be a string, got {type(sentence).__name__}")
    check_model_and_tokenizer(model, tokenizer, "attention_maps")
    if not sentence_a.strip():
        raise InputError("sentence A is empty")
    if sentence_b is not None and not sentence_b.strip():
        raise InputError("sentence B is empty (leave it out to look at one sentence)")
    limit = model_max_length(model)
    max_length = limit if max_length is None else max_length
    check_max_length(max_length, limit)
    pairs = None if sentence_b is None else [sentence_b]
    label = text_name or ("sentence A" if sentence_b is None else "sentences A and B together")
    batch = encode(tokenizer, [sentence_a], pairs, max_length=max_length, warn=False)
    warn_cut(batch, [label], max_length, limit)
    tokens = batch.tokens[0]
    n = len(tokens)
    boundary = None if sentence_b is None else _second_segment(batch.input_ids[0, :n], tokenizer)
    a_len = (n if boundary is None else boundary) - 1 - tokenizer.family.pair_separators
    if a_len <= 0:
        raise InputError(f"sentence A has no tokens in this vocabulary: {sentence_a!r}")
    if boundary is not None and n - boundary - 1 <= 0:
        raise InputError(f"sentence B has no tokens in this vocabulary: {sentence_b!r}")

    out = jitted_forward(model, output_attentions=True)(batch.arrays(model.config))
    attentions = np.stack([np.asarray(a)[0, :, :n, :n] for a in out.attentions])  # (L, A, S, S)
    return AttentionMaps(tokens=tokens, boundary=boundary,
                         attentions=attentions.astype(np.float32, copy=False),
                         model=name or type(model).__name__,
                         windows=model.config.attention_windows)


def _second_segment(ids: np.ndarray, tokenizer: Any) -> int:
    """Where sentence B starts in [CLS] A [SEP] (more separators) B [SEP]: after A's first
    separator and the family's others (RoBERTa's </s></s>), not where token types change
    (RoBERTa's and ModernBERT's pairs are all type 0)."""
    first_sep = int(np.argmax(ids == tokenizer.special.sep))
    return first_sep + tokenizer.family.pair_separators
