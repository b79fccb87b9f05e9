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

from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.use.arguments import check_model_and_tokenizer, check_texts
from bertjax.use.encode import encode, model_max_length
from bertjax.use.packed import packed_batches, packing_options
from bertjax.use.truncation import warn_cut


@dataclasses.dataclass(frozen=True)
class Prediction:
    token: str
    id: int
    probability: float


def fill_mask(
    model: Any,
    tokenizer: Tokenizer,
    texts: Sequence[str],
    *,
    top_k: int = 5,
    names: Sequence[str] | None = None,
    max_tokens: int | None = None,
) -> list[list[list[Prediction]]]:
    """For each text, for each of its [MASK]s (left to right), the `top_k` predictions, best first.

    `model` has the masked-LM head (`BertForMaskedLM`, `BertForPreTraining`; another class is a
    TypeError, as is one string for `texts`). A text without [MASK] or an empty text is a ValueError
    naming it (`names`, default "line 1", ...); text longer than the model allows is cut with a
    warning (a [MASK] cut away is an error). `max_tokens`: pack the texts into batches of that
    many token slots (`bertjax.use.packed`) instead of one padded batch; the same predictions.
    """
    check_texts(texts)
    check_model_and_tokenizer(model, tokenizer, "fill_mask", "mlm_head", "BertForMaskedLM")
    names = list(names or [f"line {i + 1}" for i in range(len(texts))])
    if not 1 <= top_k <= model.config.vocab_size:
        raise InputError(f"top_k must be in [1, vocab_size={model.config.vocab_size}], got {top_k}")
    for name, text in zip(names, texts, strict=True):
        if not text.strip():
            raise InputError(f"{name} is empty: give a text with at least one [MASK]")
    if not texts:
        return []
    texts = [tokenizer.with_mask_token(t) for t in texts]  # [MASK] is <mask> for a RoBERTa
    mask_id = tokenizer.special.mask
    wanted = [ids.count(mask_id) for ids in tokenizer.encode_batch(list(texts))]
    for name, n in zip(names, wanted, strict=True):
        if not n:
            raise InputError(f"{name} has no [MASK] token: write [MASK] where a word should be "
                             "predicted")
    max_length = model_max_length(model)
    batch = encode(tokenizer, texts, max_length=max_length, warn=False)
    warn_cut(batch, names, max_length, max_length)
    where = [np.flatnonzero(row == mask_id) for row in batch.input_ids]
    for name, n, positions in zip(names, wanted, where, strict=True):
        if len(positions) < n:
            raise InputError(f"{name}: {n - len(positions)} of its {n} [MASK] tokens were cut off "
                             f"(the model takes {max_length} tokens); shorten the text")
    arrays = batch.arrays(model.config)
    if max_tokens is None:
        top = _top_k(model, arrays, _mask_positions(arrays["input_ids"], mask_id), top_k)
        per_text = [(p[:len(w)], i[:len(w)]) for p, i, w in zip(*top, where, strict=True)]
    else:
        per_text = _packed_top_k(model, tokenizer, arrays, max_tokens, top_k)
    return [
        [[Prediction(tokenizer.token_text(int(i)), int(i), float(p))
          for p, i in zip(top_p[m], top_i[m], strict=True)] for m in range(len(top_p))]
        for top_p, top_i in per_text
    ]


def _mask_positions(input_ids: np.ndarray, mask_id: int, width: int | None = None
                    ) -> np.ndarray:
    """(B, P) positions of each row's [MASK]s, left to right, padded with position 0; P the
    most in a row (or `width`)."""
    where = [np.flatnonzero(row == mask_id) for row in input_ids]
    positions = np.zeros((len(where), width or max(len(p) for p in where)), np.int32)
    for i, p in enumerate(where):
        positions[i, :len(p)] = p
    return positions


def _top_k(model: Any, arrays: dict[str, Any], positions: np.ndarray, k: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """The `k` best probabilities and token ids at `positions` (B, P): each (B, P, k)."""
    logits = _mlm_logits(model, {**arrays, "masked_positions": positions})  # (B, P, V)
    probs = jax.nn.softmax(jnp.asarray(logits, jnp.float32), axis=-1)
    top_p, top_i = jax.lax.top_k(probs, k)  # (B, P, k)
    return np.asarray(top_p), np.asarray(top_i)


def _packed_top_k(model: Any, tokenizer: Tokenizer, arrays: dict[str, np.ndarray],
                  max_tokens: int, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Each text's (probabilities, ids) (its masks, k) from packed batches: a row's [MASK]s,
    left to right, are its texts' in turn."""
    mask_id = tokenizer.special.mask
    batches = packed_batches(arrays, max_tokens=max_tokens, limit=model_max_length(model),
                             pad_id=tokenizer.special.pad, config=model.config)
    P = max(int((b.arrays["input_ids"] == mask_id).sum(1).max()) for b in batches)
    out: list[tuple[np.ndarray, np.ndarray]] = [(np.zeros(0), np.zeros(0))] * len(arrays[
        "input_ids"])
    for b in batches:
        positions = _mask_positions(b.arrays["input_ids"], mask_id, P)  # (R, P): one shape
        top_p, top_i = _top_k(model, b.arrays, positions, k)
        is_mask = b.arrays["input_ids"] == mask_id  # (R, S)
        for n, r, start, length in zip(b.members, b.layout.row, b.layout.start,
                                       b.layout.length, strict=True):
            slots = slice(int(is_mask[r, :start].sum()), int(is_mask[r, :start + length].sum()))
            out[n] = (top_p[r, slots], top_i[r, slots])
    return out


@nnx.jit
def _mlm_logits(model: Any, arrays: dict[str, Any]) -> jax.Array:
    return model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                 arrays["masked_positions"], **packing_options(arrays)).mlm_logits  # (B, P, V)


def fill_in(text: str, predictions: list[list[Prediction]], mask: str = "[MASK]") -> str:
    """`text` with each [MASK] replaced by its best prediction (WordPiece "##" joined on)."""
    out = text
    for top in predictions:
        token = top[0].token
        before, after = out.split(mask, 1)
        out = (before.rstrip() + token[2:] if token.startswith("##") else before + token) + after
    return out


def filled(tokenizer: Tokenizer, text: str, predictions: list[list[Prediction]]) -> str:
    """`text` with each [MASK] filled by its best prediction: a WordPiece vocabulary's pieces in
    the text as written (`fill_in`); a byte-level BPE's or SentencePiece's as the tokenizer
    decodes the filled tokens (what transformers' pipeline gives as `sequence`: their mask token
    takes the space before it, their pieces carry their own)."""
    if tokenizer.wordpiece:
        return fill_in(text, predictions)
    best = iter([top[0].id for top in predictions])
    ids = [next(best) if i == tokenizer.special.mask else i
           for i in tokenizer.encode_batch([tokenizer.with_mask_token(text)])[0]]
    return tokenizer.tokenizer.decode(ids, skip_special_tokens=True)
