"""Text -> model inputs for inference: [CLS] A [SEP] (B [SEP]), padded batches, a jitted forward.

Sequences are built from the tokenizer's ids exactly as pre-training builds them (and as
Hugging Face's BERT tokenizers do): [CLS] A [SEP] with token type 0, then B [SEP] with type 1;
RoBERTa's family as its tokenizers do: <s> A </s></s> B </s>, every token type 0.
Text longer than the model allows is cut (longest segment first, as Hugging Face's
`truncation=True`) with a warning naming the line. Batches are padded to a multiple of
`PAD_MULTIPLE` so that a handful of shapes is compiled, not one per length.
"""

from __future__ import annotations

import dataclasses
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.inputs import packing_options

PAD_MULTIPLE = 16  # padded lengths are multiples of this (fewer compiled shapes)


class TruncationWarning(UserWarning):
    """An input was longer than the model allows and was cut."""


@dataclasses.dataclass
class Encoded:
    """A padded batch and where each row's tokens are."""

    input_ids: np.ndarray  # (B, S) int32
    token_type_ids: np.ndarray  # (B, S) int32
    attention_mask: np.ndarray  # (B, S) int32, 1 on real tokens
    tokens: list[list[str]]  # each row's tokens, [CLS] and [SEP] included, no padding
    cut: list[int]  # tokens cut from each row to fit max_length (0: none)

    def arrays(self, config: Any = None) -> dict[str, np.ndarray]:
        """The model's inputs; with the model's `config`, first checked on the host against it
        (under `jit` an id outside its vocabulary would be clamped silently, e.g. from a
        tokenizer with more tokens than the model)."""
        arrays = {"input_ids": self.input_ids, "token_type_ids": self.token_type_ids,
                  "attention_mask": self.attention_mask}
        if config is not None:
            from bertjax.inputs import check_batch

            check_batch(config, arrays)
        return arrays


def encode(
    tokenizer: Tokenizer,
    texts: Sequence[str],
    pairs: Sequence[str | None] | None = None,
    *,
    max_length: int,
    names: Sequence[str] | None = None,
    pad_to: int | None = None,
    warn: bool = True,
) -> Encoded:
    """Tokenise `texts` (and `pairs`, the second segments; a None pair: that row has none) into
    one padded batch.

    `names` label the inputs in truncation warnings (default "line 1", "line 2", ...; `warn=False`
    leaves the reporting to the caller, through `Encoded.cut`). Rows are padded to `pad_to` if
    given, else to the longest row rounded up to `PAD_MULTIPLE` (never past `max_length`).
    """
    if pairs is not None and len(pairs) != len(texts):
        raise InputError(f"got {len(texts)} first segments but {len(pairs)} second segments")
    pairs = list(pairs) if pairs is not None else [None] * len(texts)
    if max_length < (5 + tokenizer.family.pair_separators - 1 if any(
            p is not None for p in pairs) else 3):
        raise InputError(f"max_length {max_length} leaves no room for text")
    names = names or [f"line {i + 1}" for i in range(len(texts))]
    special = tokenizer.special
    a_ids = tokenizer.encode_batch(list(texts))
    encoded_pairs = iter(tokenizer.encode_batch([p for p in pairs if p is not None]))
    b_ids = [None if p is None else next(encoded_pairs) for p in pairs]
    family = tokenizer.family  # [SEP] or </s></s> between segments, B's token type
    between = [special.sep] * (family.pair_separators - 1)
    rows, types, cuts = [], [], []
    for name, a, b in zip(names, a_ids, b_ids, strict=True):
        a, b, cut = _truncate(a, b, max_length, len(between))
        cuts.append(cut)
        if cut and warn:
            warnings.warn(f"{name} has {cut} more tokens than the model's {max_length} positions "
                          "allow: cut to fit", TruncationWarning, stacklevel=2)
        row = [special.cls, *a, special.sep] + ([*between, *b, special.sep] if b is not None
                                                  else [])
        rows.append(row)
        types.append([0] * (len(a) + 2) + [family.second_segment_type] * (len(row) - len(a) - 2))
    longest = max((len(r) for r in rows), default=1)
    width = pad_to or min(max_length, -(-longest // PAD_MULTIPLE) * PAD_MULTIPLE)
    if width < longest:
        raise InputError(f"pad_to={pad_to} is shorter than the longest row ({longest} tokens)")
    ids = np.full((len(rows), width), special.pad, np.int32)  # (B, S)
    type_ids = np.zeros((len(rows), width), np.int32)
    mask = np.zeros((len(rows), width), np.int32)
    for i, (row, t) in enumerate(zip(rows, types, strict=True)):
        ids[i, :len(row)], type_ids[i, :len(row)], mask[i, :len(row)] = row, t, 1
    tokens = [[tokenizer.id_to_token(i) for i in row] for row in rows]
    return Encoded(ids, type_ids, mask, tokens, cuts)


def _truncate(a: list[int], b: list[int] | None, max_length: int, between: int = 0
              ) -> tuple[list[int], list[int] | None, int]:
    """Cut the longer segment first until [CLS] A [SEP] (`between` more [SEP]s, B [SEP]) fits;
    returns how many went."""
    room = max_length - (3 + between if b is not None else 2)
    a, b = list(a), None if b is None else list(b)
    cut = 0
    while len(a) + (len(b) if b is not None else 0) > room:
        if b is not None and len(b) > len(a):
            b.pop()
        else:
            a.pop()
        cut += 1
    return a, b, cut


def jitted_forward(model: Any, **outputs: bool) -> Callable[[dict[str, np.ndarray]], Any]:
    """`forward(arrays) -> BertOutput` of `model` in inference mode, jitted once per input shape
    (`outputs`: e.g. `output_attentions=True`); packed rows' arrays (`bertjax.use.packed`) are
    passed on. The model is split once, not on every call."""
    graphdef, state = nnx.split(model)

    @jax.jit
    def forward(state: Any, arrays: dict[str, Any]) -> Any:
        return nnx.merge(graphdef, state)(
            arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"], **outputs,
            **packing_options(arrays))

    return lambda arrays: forward(state, arrays)


def model_max_length(model: Any) -> int:
    """The longest sequence the model takes."""
    return int(model.config.max_sequence_length)


def check_max_length(max_length: int, limit: int, option: str = "max_length") -> None:
    """A ValueError naming `option` unless `max_length` fits the model's `limit` positions."""
    if max_length > limit:
        raise InputError(f"{option} {max_length} is longer than the model's {limit} positions; "
                         f"pass {option} {limit} or less")
