"""Local-attention initialisation: attention heads that look at their neighbours from step 0.

A BERT initialised at random attends uniformly; to predict a masked piece from the pieces beside
it, it must first learn position vectors and query/key weights that single out a neighbour, and
the gradient towards that is about 1/S of the signal (uniform attention over S keys). In ten
minutes on 2 CPU cores the `mini` recipe never gets there: it stays at the accuracy of a
predictor that sees no context (docs/research.md). In the spirit of mimetic
initialisation (Trockman & Kolter, 2023: attention weights initialised to what trained ones look
like), this sets weights so that chosen heads start as relative-position heads:

- the position table holds sinusoids `a*sin(w_k i), a*cos(w_k i)` (m = head size / 2
  frequencies from pi down to pi/8) in its first 2m dimensions and zeros in the rest; the word
  and token-type rows are zero in those 2m, so after the embedding LayerNorm they carry the
  position alone;
- in each chosen layer, head h's query maps the pairs through the rotation by `w_k * offset_h`
  and its key through the identity (its first 2m head dimensions, nothing else in them), so
  `q_i . k_j` is proportional to `sum_k cos(w_k (j - i - offset_h))`, which peaks at
  `j = i + offset_h`; the scale puts `peak_logit` there (7: about 85% of the attention on that
  key in a 128-token sequence).

Only initial values change: the architecture, the parameter names and the Hugging Face export are
BERT's, and every weight trains as usual.
"""

from __future__ import annotations

import math
from typing import Any

import jax.numpy as jnp
import numpy as np

from bertjax.errors import InputError
from bertjax.model import BertLayer, BertModel

OFFSETS = (-1, 1, -2, 2)  # head h of a chosen layer looks at the key offset[h % 4] away
PEAK_LOGIT = 7.0


def frequencies(m: int) -> np.ndarray:
    """m angular frequencies from pi (period 2) down to pi/8 (period 16), geometric: the sum of
    their cosines is 1 at offset 0 and at most 0.22 at any other offset up to 127 (0.30 up to
    511)."""
    return np.pi * (1 / 8) ** (np.arange(m) / max(m - 1, 1))


def local_attention_init(model: Any, *, layers: int = 1,
                         offsets: tuple[int, ...] = OFFSETS, peak_logit: float = PEAK_LOGIT
                         ) -> None:
    """Make the first `layers` layers' heads of `model` (a BertModel or a model holding one as
    `bert`) relative-position heads, in place (see the module docstring)."""
    bert: BertModel = model if isinstance(model, BertModel) else model.bert
    config = bert.config
    if not 1 <= layers <= config.num_hidden_layers:
        raise InputError(f"local attention layers must be in [1, {config.num_hidden_layers}] "
                         f"for this model, got {layers}")
    h, d = config.hidden_size, config.head_dim
    m = d // 2  # frequency pairs: one head's dimensions hold them all
    if 2 * m >= h:
        raise InputError(f"local attention init needs the hidden size ({h}) above the head "
                         f"size ({d}): the positions take one head's dimensions")
    sigma = config.initializer_range
    amplitude = sigma * math.sqrt((h - 2 * m) / m)  # positions as much energy as a word row
    _position_rows(bert, m, amplitude)
    # LayerNorm scale of word + position + type (each as much energy): positions' coordinates
    # after it are amplitude * scale; q.k at the peak is (c * amplitude * scale)^2 * m
    scale = 1.0 / math.sqrt(3 * (h - 2 * m) * sigma**2 / h)
    c = math.sqrt(peak_logit * math.sqrt(d) / m) / (amplitude * scale)
    w = frequencies(m)
    query = np.zeros((2 * m, config.num_attention_heads * d))  # (2m, H): the position rows
    for head in range(config.num_attention_heads):
        query[:, head * d: head * d + 2 * m] = c * _rotation(w, offsets[head % len(offsets)])
    key = np.tile(np.pad(c * np.eye(2 * m), ((0, 0), (0, d - 2 * m))), config.num_attention_heads)
    columns = (np.arange(h) % d) < 2 * m  # each head's first 2m dimensions
    stacked = bert.layers if isinstance(bert.layers, BertLayer) else None  # scan: one module
    attention = None if stacked is None else stacked.attention
    for i in range(layers):
        target = attention if attention is not None else bert._loop_layers()[i].attention
        for linear, rows in ((target.query, query), (target.key, key)):
            assert linear.bias is not None  # BERT's dense layers have biases
            kernel = np.array(linear.kernel[...])  # (H, H), or (L, H, H) stacked
            bias = np.array(linear.bias[...])  # (H,), or (L, H)
            k, b = (kernel[i], bias[i]) if attention is not None else (kernel, bias)
            k[:, columns] = 0.0  # the positional head dimensions read the positions only
            k[: 2 * m, columns] = rows[:, columns]
            b[columns] = 0.0
            linear.kernel[...] = jnp.asarray(kernel)
            linear.bias[...] = jnp.asarray(bias)


def _position_rows(bert: BertModel, m: int, amplitude: float) -> None:
    """Sinusoids in the first 2m dimensions of the position table, zeros there in the word and
    token-type tables."""
    emb = bert.embeddings
    table = np.array(emb.position_embeddings.embedding[...])  # (P, H)
    angles = np.arange(table.shape[0])[:, None] * frequencies(m)[None, :]  # (P, m)
    table[:, 0: 2 * m: 2] = amplitude * np.sin(angles)
    table[:, 1: 2 * m: 2] = amplitude * np.cos(angles)
    table[:, 2 * m:] = 0.0
    emb.position_embeddings.embedding[...] = jnp.asarray(table)
    for other in (emb.word_embeddings, emb.token_type_embeddings):
        if other is None:  # a family without token types (DistilBERT)
            continue
        rows = np.array(other.embedding[...])
        rows[:, : 2 * m] = 0.0
        other.embedding[...] = jnp.asarray(rows)


def _rotation(w: np.ndarray, offset: int) -> np.ndarray:
    """(2m, 2m) block-diagonal: row vector [sin w i, cos w i] times block k gives
    [sin w (i + offset), cos w (i + offset)]."""
    m = len(w)
    out = np.zeros((2 * m, 2 * m))
    for j, theta in enumerate(w * offset):
        out[2 * j: 2 * j + 2, 2 * j: 2 * j + 2] = [[math.cos(theta), -math.sin(theta)],
                                                   [math.sin(theta), math.cos(theta)]]
    return out
