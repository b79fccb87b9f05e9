"""Fill-mask: the most likely tokens for every [MASK] of a text, as transformers'
`pipeline("fill-mask")` gives them (probabilities are the MLM head's softmax over the vocabulary)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.data.tokenizer import WordPieceTokenizer
from bertjax.use.encode import encode, model_max_length
from bertjax.use.truncation import warn_cut


@dataclasses.dataclass(frozen=True)
class Prediction:
    token: str
    id: int
    probability: float


def fill_mask(
    model: Any,
    tokenizer: WordPieceTokenizer,
    texts: Sequence[str],
    *,
    top_k: int = 5,
    names: Sequence[str] | None = None,
) -> list[list[list[Prediction]]]:
    """For each text, for each of its [MASK]s (left to right), the `top_k` predictions, best first.

    `model` is a `BertForPreTraining`. A text without [MASK] or an empty text is a ValueError
    naming it (`names`, default "line 1", ...); text longer than the model allows is cut with a
    warning (a [MASK] cut away is an error).
    """
    names = list(names or [f"line {i + 1}" for i in range(len(texts))])
    if not 1 <= top_k <= model.config.vocab_size:
        raise ValueError(f"top_k must be in [1, vocab_size={model.config.vocab_size}], got {top_k}")
    for name, text in zip(names, texts, strict=True):
        if not text.strip():
            raise ValueError(f"{name} is empty: give a text with at least one [MASK]")
    if not texts:
        return []
    mask_id = tokenizer.special.mask
    wanted = [ids.count(mask_id) for ids in tokenizer.encode_batch(list(texts))]
    for name, n in zip(names, wanted, strict=True):
        if not n:
            raise ValueError(f"{name} has no [MASK] token: write [MASK] where a word should be "
                             "predicted")
    max_length = model_max_length(model)
    batch = encode(tokenizer, texts, max_length=max_length, warn=False)
    warn_cut(batch, names, max_length, max_length)
    where = [np.flatnonzero(row == mask_id) for row in batch.input_ids]
    for name, n, positions in zip(names, wanted, where, strict=True):
        if len(positions) < n:
            raise ValueError(f"{name}: {n - len(positions)} of its {n} [MASK] tokens were cut off "
                             f"(the model takes {max_length} tokens); shorten the text")
    P = max(len(p) for p in where)
    positions = np.zeros((len(texts), P), np.int32)  # (B, P), padded with position 0
    for i, p in enumerate(where):
        positions[i, :len(p)] = p
    logits = _mlm_logits(model, {**batch.arrays(model.config), "masked_positions": positions})  # (B, P, V)
    probs = jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1)
    top_p, top_i = jax.lax.top_k(probs, top_k)  # (B, P, k)
    top_p, top_i = np.asarray(top_p), np.asarray(top_i)
    return [
        [[Prediction(tokenizer.id_to_token(int(i)), int(i), float(p))
          for p, i in zip(top_p[b, m], top_i[b, m], strict=True)] for m in range(len(where[b]))]
        for b in range(len(texts))
    ]


@nnx.jit
def _mlm_logits(model: Any, arrays: dict[str, Any]) -> jax.Array:
    return model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                 arrays["masked_positions"]).mlm_logits  # (B, P, V)


def fill_in(text: str, predictions: list[list[Prediction]], mask: str = "[MASK]") -> str:
    """`text` with each [MASK] replaced by its best prediction (WordPiece "##" joined on)."""
    out = text
    for top in predictions:
        token = top[0].token
        before, after = out.split(mask, 1)
        out = (before.rstrip() + token[2:] if token.startswith("##") else before + token) + after
    return out
