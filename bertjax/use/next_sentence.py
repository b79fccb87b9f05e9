"""Next-sentence prediction: P(B follows A) from the pooled [CLS] head, as transformers'
`BertForNextSentencePrediction` gives it (label 0 is IsNext)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer, check_texts
from bertjax.use.encode import encode, model_max_length
from bertjax.use.packed import packed_batches, packing_options
from bertjax.use.truncation import warn_cut


def next_sentence_probability(
    model: Any,
    tokenizer: Tokenizer,
    first: Sequence[str],
    second: Sequence[str],
    *,
    names: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> np.ndarray:
    """(N,) float32: P(IsNext) of each pair `(first[i], second[i])`; `model` is a
    `BertForPreTraining` or `BertForNextSentencePrediction`. An empty sentence is a ValueError
    naming it; a pair longer than the model allows is cut (the longer sentence first) with a
    warning naming it (`names`, default "pair 1", ...). `max_tokens`: pack the pairs into
    batches of that many token slots (`bertjax.use.packed`) instead of one padded batch; the
    same probabilities within 1e-5."""
    check_texts(first, "first")
    check_texts(second, "second")
    check_model_and_tokenizer(model, tokenizer, "next_sentence_probability", "nsp_head",
                              "BertForNextSentencePrediction")
    if len(first) != len(second):
        raise InputError(f"got {len(first)} first sentences but {len(second)} second sentences")
    names = list(names or [f"pair {i + 1}" for i in range(len(first))])
    for name, a, b in zip(names, first, second, strict=True):
        for which, text in (("A", a), ("B", b)):
            if not text.strip():
                raise InputError(f"sentence {which} of {name} is empty")
    if not first:
        return np.zeros((0,), np.float32)
    limit = model_max_length(model)
    batch = encode(tokenizer, first, second, max_length=limit, warn=False)
    warn_cut(batch, names, limit, limit)
    if max_tokens is None:
        return np.asarray(_is_next(model, batch.arrays(model.config)), np.float32)
    out = np.zeros(len(first), np.float32)
    for packed in packed_batches(batch.arrays(model.config), max_tokens=max_tokens, limit=limit,
                                 pad_id=tokenizer.special.pad, config=model.config):
        out[packed.members] = packed.layout.from_slots(np.asarray(_is_next(model, packed.arrays)))
    return out


@nnx.jit
def _is_next(model: Any, arrays: dict[str, Any]) -> jax.Array:
    out = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                masked_positions=arrays["input_ids"][:, :1] * 0,  # MLM head on one slot only
                **packing_options(arrays))
    return jax.nn.softmax(out.nsp_logits, axis=-1)[..., 0]  # (B,), packed (R, K)
