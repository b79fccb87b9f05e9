"""Next-sentence prediction: P(B follows A) from the pooled [CLS] head, as transformers'
`BertForNextSentencePrediction` gives it (label 0 is IsNext)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.use.encode import encode, model_max_length


def next_sentence_probability(
    model: Any, tokenizer: WordPieceTokenizer, first: Sequence[str], second: Sequence[str]
) -> np.ndarray:
    """(N,) float32: P(IsNext) of each pair `(first[i], second[i])`; `model` is a
    `BertForPreTraining`. An empty sentence is a ValueError naming it."""
    if len(first) != len(second):
        raise ValueError(f"got {len(first)} first sentences but {len(second)} second sentences")
    for i, (a, b) in enumerate(zip(first, second, strict=True)):
        for which, text in (("A", a), ("B", b)):
            if not text.strip():
                raise ValueError(f"sentence {which} of pair {i + 1} is empty")
    if not first:
        return np.zeros((0,), np.float32)
    batch = encode(tokenizer, first, second, max_length=model_max_length(model),
                   names=[f"pair {i + 1}" for i in range(len(first))])
    return np.asarray(_is_next(model, batch.arrays(model.config)), np.float32)


@nnx.jit
def _is_next(model: Any, arrays: dict[str, Any]) -> jax.Array:
    out = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                masked_positions=arrays["input_ids"][:, :1] * 0)  # MLM head on one slot only
    return jax.nn.softmax(out.nsp_logits, axis=-1)[:, 0]  # (B,)
