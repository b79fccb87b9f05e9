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

With `match_heads=N`, the last N heads of each chosen layer start as match heads instead (the
query-key product near the identity, as mimetic initialisation has it): query and key are one
fixed projection of the token's content (the dimensions the positions leave, without the two
token-type rows' directions), so each piece attends to the other occurrences of itself, in its
own segment or the other one; `peak_logit` over a row's other logits for an identical piece.
Such a head compares the two segments of a pair, which the relative-position heads cannot at
step 0 (their query and key read the positions alone), and next-sentence prediction needs.

Only initial values change: the architecture, the parameter names and the Hugging Face export are
BERT's, and every weight trains as usual.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.model import BertModel

OFFSETS = (-1, 1, -2, 2)  # head h of a chosen layer looks at the key offset[h % 4] away
PEAK_LOGIT = 7.0


def frequencies(m: int) -> np.ndarray:
    """m angular frequencies from pi (period 2) down to pi/8 (period 16), geometric: the sum of
    their cosines is 1 at offset 0 and at most 0.22 at any other offset up to 127 (0.30 up to
    511)."""
    return np.pi * (1 / 8) ** (np.arange(m) / max(m - 1, 1))


def local_attention_init(model: nnx.Module, *, layers: int = 1,
                         offsets: tuple[int, ...] = OFFSETS, peak_logit: float = PEAK_LOGIT,
                         match_heads: int = 0) -> None:
    """Make the first `layers` layers' heads of `model` (a BertModel or a model holding one as
    `bert`) relative-position heads, the last `match_heads` of each match heads, in place (see
    the module docstring)."""
    bert: BertModel = model if isinstance(model, BertModel) else model.bert
    config = bert.config
    if not 1 <= layers <= config.num_hidden_layers:
        raise ValueError(f"local attention layers must be in [1, {config.num_hidden_layers}] "
                         f"for this model, got {layers}")
    if not 0 <= match_heads <= config.num_attention_heads:
        raise ValueError(f"match heads must be in [0, {config.num_attention_heads}] for this "
                         f"model, got {match_heads}")
    h, d = config.hidden_size, config.head_dim
    m = d // 2  # frequency pairs: one head's dimensions hold them all
    if 2 * m >= h:
        raise ValueError(f"local attention init needs the hidden size ({h}) above the head "
                         f"size ({d}): the positions take one head's dimensions")
    sigma = config.initializer_range
    amplitude = sigma * math.sqrt((h - 2 * m) / m)  # positions as much energy as a word row
    _position_rows(bert, m, amplitude)
    # LayerNorm scale of word + position + type (each as much energy): positions' coordinates
    # after it are amplitude * scale; q.k at the peak is (c * amplitude * scale)^2 * m
    scale = 1.0 / math.sqrt(3 * (h - 2 * m) * sigma**2 / h)
    c = math.sqrt(peak_logit * math.sqrt(d) / m) / (amplitude * scale)
    w = frequencies(m)
    heads = config.num_attention_heads
    local = heads - match_heads  # the first `local` heads look at neighbours
    query = np.zeros((2 * m, heads * d))  # (2m, H): the position rows
    for head in range(local):
        query[:, head * d: head * d + 2 * m] = c * _rotation(w, offsets[head % len(offsets)])
    key = np.zeros_like(query)
    key[:, : local * d] = np.tile(np.pad(c * np.eye(2 * m), ((0, 0), (0, d - 2 * m))), local)
    columns = (np.arange(h) % d) < 2 * m  # each head's first 2m dimensions
    columns[local * d:] = False
    match = _match_rows(bert, m, scale, peak_logit, match_heads)  # (H - 2m, match_heads * d)
    attention = bert.layers.attention if config.scan_layers else None
    for i in range(layers):
        target = attention if attention is not None else bert.layers[i].attention
        for linear, rows in ((target.query, query), (target.key, key)):
            kernel = np.array(linear.kernel[...])  # (H, H), or (L, H, H) stacked
            bias = np.array(linear.bias[...])  # (H,), or (L, H)
            k, b = (kernel[i], bias[i]) if attention is not None else (kernel, bias)
            k[:, columns] = 0.0  # the positional head dimensions read the positions only
            k[: 2 * m, columns] = rows[:, columns]
            b[columns] = 0.0
            if match_heads:  # query = key: the token's content, the same projection
                k[:, local * d:] = 0.0
                k[2 * m:, local * d:] = match
                b[local * d:] = 0.0
            linear.kernel[...] = jnp.asarray(kernel)
            linear.bias[...] = jnp.asarray(bias)


def _match_rows(bert: BertModel, m: int, scale: float, peak_logit: float, match_heads: int
                ) -> np.ndarray:
    """(H - 2m, match_heads * d): per match head, d orthonormal directions of the content
    dimensions (after `_position_rows`: the word and token-type rows' only) orthogonal to the
    token-type rows, scaled so that two occurrences of one piece score `peak_logit`: a word
    row's content has about sigma^2 d of its energy in d such directions, times the embedding
    LayerNorm's `scale` squared."""
    config = bert.config
    h, d, sigma = config.hidden_size, config.head_dim, config.initializer_range
    if not match_heads:
        return np.zeros((h - 2 * m, 0))
    types = np.array(bert.embeddings.token_type_embeddings.embedding[...])[:, 2 * m:]  # (T, H-2m)
    rng = np.random.default_rng(0)  # a fixed projection: the same model from the same seed
    basis, _ = np.linalg.qr(np.concatenate([types.T, rng.standard_normal(
        (h - 2 * m, match_heads * d))], axis=1))  # (H - 2m, T + match_heads * d) orthonormal
    directions = basis[:, types.shape[0]:]  # orthogonal to the type rows
    c = math.sqrt(peak_logit / (scale**2 * sigma**2 * math.sqrt(d)))
    return c * directions


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


# The compare heads (`compare_heads_init`): the last head of the first two layers.
COMPARE_GAIN = 4.0  # the residual stream's coordinates after a LayerNorm are about 1


def compare_heads_init(model: nnx.Module, *, peak_logit: float = PEAK_LOGIT
                       ) -> tuple[np.ndarray, np.ndarray]:
    """Give [CLS] at step 0 the share of segment B's pieces that also occur in segment A: the
    signal next-sentence prediction starts from (a word-overlap baseline), in place.

    After `local_attention_init` (its position rows and its scale): in layer 1 the last head
    becomes a match head (`match_heads`) whose value is the token's segment (+1 in A, -1 in B,
    read from the token-type rows' difference) and whose output writes it along a fixed
    direction `u`, so each token carries the share of its piece's occurrences that lie in A;
    in layer 2 the last head has a constant query and the segment as its key, so every token
    ([CLS] included) attends to segment B's tokens alike, and writes their mean along `u` into a
    second direction. Both heads' other dimensions start at zero; all of it trains as usual.
    Returns the two directions (H,), `u` and the second (tests and probes read them).
    """
    bert: BertModel = model if isinstance(model, BertModel) else model.bert
    config = bert.config
    if config.num_hidden_layers < 2:
        raise ValueError(f"compare heads take the first two layers; this model has "
                         f"{config.num_hidden_layers}")
    h, d, sigma = config.hidden_size, config.head_dim, config.initializer_range
    m = d // 2
    scale = 1.0 / math.sqrt(3 * (h - 2 * m) * sigma**2 / h)  # as local_attention_init's
    types = np.array(bert.embeddings.token_type_embeddings.embedding[...])  # (T, H)
    segment = np.zeros(h)
    segment[2 * m:] = types[0, 2 * m:] - types[1, 2 * m:]
    half_gap = np.linalg.norm(segment) / 2 * scale  # |x . segment| of a token, after the norm
    segment /= np.linalg.norm(segment)  # x . segment: about +half_gap in A, -half_gap in B
    rng = np.random.default_rng(1)
    u, u2 = np.linalg.qr(np.concatenate([segment[2 * m:, None], rng.standard_normal(
        (h - 2 * m, 2))], axis=1))[0][:, 1:].T  # unit directions orthogonal to the segment
    u, u2 = np.pad(u, (2 * m, 0)), np.pad(u2, (2 * m, 0))
    col = h - d  # the last head's first dimension
    match = _match_rows(bert, m, scale, peak_logit, 1)  # (H - 2m, d)
    first, second = _layer_attention(bert, 0), _layer_attention(bert, 1)

    def head_only(kernel: np.ndarray, bias: np.ndarray) -> None:
        kernel[:, col:] = 0.0
        bias[col:] = 0.0

    def match_query_key(kernel: np.ndarray, bias: np.ndarray) -> None:
        head_only(kernel, bias)
        kernel[2 * m:, col:] = match

    def segment_value(kernel: np.ndarray, bias: np.ndarray) -> None:
        head_only(kernel, bias)
        kernel[:, col] = segment / half_gap  # +1 in A, -1 in B

    def constant_query(kernel: np.ndarray, bias: np.ndarray) -> None:
        head_only(kernel, bias)
        bias[col] = peak_logit * math.sqrt(d)  # times the key below: peak_logit on B's tokens

    def b_key(kernel: np.ndarray, bias: np.ndarray) -> None:
        head_only(kernel, bias)
        kernel[:, col] = -segment / half_gap  # +1 in B, -1 in A

    def u_value(kernel: np.ndarray, bias: np.ndarray) -> None:
        head_only(kernel, bias)
        kernel[:, col] = u / COMPARE_GAIN  # the overlap, about in [-1, 1]

    for attention, changes, direction in (
            (first, {"query": match_query_key, "key": match_query_key, "value": segment_value}, u),
            (second, {"query": constant_query, "key": b_key, "value": u_value}, u2)):
        for name, change in changes.items():
            _update(getattr(attention.module, name), attention.index, change)
        _update(attention.module.output, attention.index,
                lambda kernel, bias, w=direction: _write_rows(kernel, col, w))
    return u, u2


def _write_rows(kernel: np.ndarray, col: int, direction: np.ndarray) -> None:
    """The output projection's rows of the last head: its first dimension along `direction`
    (times COMPARE_GAIN), the others zero."""
    kernel[col:, :] = 0.0
    kernel[col, :] = COMPARE_GAIN * direction


class _Attention:
    """A layer's attention module and, for stacked (scan) layers, the layer's index."""

    def __init__(self, module: nnx.Module, index: int | None):
        self.module, self.index = module, index


def _layer_attention(bert: BertModel, i: int) -> _Attention:
    if bert.config.scan_layers:
        return _Attention(bert.layers.attention, i)
    return _Attention(bert.layers[i].attention, None)


def _update(linear: nnx.Module, index: int | None, change) -> None:
    """`change(kernel (H, H), bias (H,))` in place on a linear layer's (or a stacked layer's)
    numpy copy, written back."""
    kernel = np.array(linear.kernel[...])
    bias = np.array(linear.bias[...])
    k, b = (kernel[index], bias[index]) if index is not None else (kernel, bias)
    change(k, b)
    linear.kernel[...] = jnp.asarray(kernel)
    linear.bias[...] = jnp.asarray(bias)
