"""Attention's arithmetic, shared by the encoder's layers: scaled dot-product attention with a
float32 softmax (the exact path, the parity reference), and the row helpers that let a layer
compute at some rows only (the last layer at [CLS] and the masked rows) with the dropout masks the
whole layer would draw there.

Shapes: B batch, S keys, Q queries, A heads, D head dim.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import jax
import jax.numpy as jnp
from flax import nnx

from bertjax import numerics
from bertjax.errors import InputError

__all__ = ["dropout_rows", "exact_attention", "fused_attention", "local_mask", "take_rows",
           "window_block", "windowed_attention"]


def exact_attention(
    q: jax.Array,
    k: jax.Array,
    v: jax.Array,
    attention_mask: jax.Array,
    dropout: Callable[[jax.Array], jax.Array],
    chunks: int | None = None,
) -> tuple[jax.Array, jax.Array]:
    """Scaled dot-product attention of queries q (B, Q, A, D) over k, v (B, S, A, D) with a key
    padding mask (B, S) or a query x key mask (B, Q, S) (packed rows): float32 scores and masked
    softmax, `dropout` on the probabilities, the context in v's dtype. Returns the context
    (B, Q, A, D) and the probabilities before dropout (B, A, Q, S). Self-attention over every
    position has Q = S.

    `chunks` (`numerics.cpu_attention_chunks`, for a CPU) computes heads-major, in that many
    slices of the batch for XLA CPU to run side by side; `dropout` is then called once per
    slice, so give several only with a dropout that draws nothing. None leaves the layout to
    the compiler. The same products per sequence and head either way: the same numbers up to
    float32 rounding.
    """
    if chunks is None:
        return _attend(q, k, v, attention_mask, dropout, heads_major=False)
    chunks = max(1, min(chunks, len(q)))
    if chunks == 1:  # one slice (an empty batch included)
        return _attend(q, k, v, attention_mask, dropout, heads_major=True)
    attended = [_attend(q_, k_, v_, mask, dropout, heads_major=True)
                for q_, k_, v_, mask in batch_slices(chunks, q, k, v, attention_mask)]
    return (jnp.concatenate([c for c, _ in attended]),  # (B, Q, A, D)
            jnp.concatenate([p for _, p in attended]))  # (B, A, Q, S)


def batch_slices(chunks: int, *arrays: jax.Array) -> list[tuple[jax.Array, ...]]:
    """`arrays` (each (B, ...)) cut into `chunks` slices of the batch, as even as they come:
    slice i holds rows B * i // chunks up to B * (i + 1) // chunks of every array."""
    bounds = [len(arrays[0]) * i // chunks for i in range(chunks + 1)]
    return [tuple(x[a:b] for x in arrays) for a, b in itertools.pairwise(bounds)]


# The batched matmuls of `_attend`, as laid out in memory: (b, S, A, D) operands, or heads-major
# (b, A, S, D) ones whose batch axes lead, not strided through (S, A).
_SCORES = {False: "bqad,bkad->baqk", True: "baqd,bakd->baqk"}
_CONTEXT = {False: "baqk,bkad->bqad", True: "baqk,bakd->baqd"}


def _attend(q: jax.Array, k: jax.Array, v: jax.Array, attention_mask: jax.Array,
            dropout: Callable[[jax.Array], jax.Array], *, heads_major: bool
            ) -> tuple[jax.Array, jax.Array]:
    """`exact_attention` of q (b, Q, A, D) over k, v (b, S, A, D), optionally heads-major."""
    if heads_major:
        q, k, v = (x.transpose(0, 2, 1, 3) for x in (q, k, v))  # (b, A, Q or S, D)
    scores = jnp.einsum(_SCORES[heads_major], q, k, preferred_element_type=jnp.float32)
    scores = scores / jnp.sqrt(jnp.float32(q.shape[-1]))  # (b, A, Q, S) float32
    mask = attention_mask[:, None, None, :] if attention_mask.ndim == 2 else (
        attention_mask[:, None, :, :])  # (b, 1, 1 or Q, S)
    probs = numerics.masked_softmax(scores, mask)
    context = jnp.einsum(_CONTEXT[heads_major], dropout(probs).astype(v.dtype), v)  # v's layout
    if heads_major:
        context = context.transpose(0, 2, 1, 3)  # (b, A, Q, D) -> (b, Q, A, D)
    return context, probs  # (b, Q, A, D), (b, A, Q, S)


def fused_attention(q: jax.Array, k: jax.Array, v: jax.Array, attention_mask: jax.Array,
                    cudnn: bool, window: int | None = None) -> jax.Array:
    """`jax.nn.dot_product_attention` of q (B, Q, A, D) over k, v (B, S, A, D): the context
    (B, Q, A, D). A key padding mask (B, S), right padding, goes as sequence lengths; packed rows'
    mask (B, Q, S) as its `mask`, to XLA's implementation. `cudnn`: cuDNN's flash attention
    (`numerics.cudnn_attention_applies`), never with packed rows. `window`: query i attends the
    keys i - window .. i + window only (ModernBERT's local layers), as `local_window_size` with
    sequence lengths (cuDNN takes no window to the right without a causal mask, so XLA's
    implementation computes these); a packed mask holds the window already (`local_mask`).

    On an H100 (JAX 0.11.2) cuDNN's gradient refused odd lengths ("Unsupported sequence length
    Q 21, KV 128": the last layer at [CLS] + 20 masked rows) and came back NaN through packed
    rows' mask, which it takes only as a (B, 1, Q, S) bias. So an odd Q or S gets one more row
    of zeros: a key past every sequence's length (masked), a query whose output is dropped
    (its gradient is zero)."""
    if attention_mask.ndim == 3:  # (B, 1, Q, S): one mask for every head
        return jax.nn.dot_product_attention(q, k, v, mask=attention_mask[:, None],
                                            implementation="xla")
    lengths = jnp.sum(attention_mask, axis=-1, dtype=jnp.int32)  # (B,) right padding
    if not cudnn or window is not None:
        return jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths,
                                            local_window_size=window, implementation="xla")
    Q = q.shape[1]
    q, k, v = (_even_rows(t) for t in (q, k, v))  # (B, Q or S rounded up to even, A, D)
    return jax.nn.dot_product_attention(q, k, v, key_value_seq_lengths=lengths,
                                        implementation="cudnn")[:, :Q]


def local_mask(attention_mask: jax.Array, window: int) -> jax.Array:
    """A sliding window of `window` keys on either side of each query, on a key padding mask
    (B, S) or packed rows' mask (B, S, S): (B, S, S), query i attending key j where
    |i - j| <= window and the mask allows (transformers' bidirectional sliding window). In packed
    rows the window stays inside the query's sequence."""
    S = attention_mask.shape[-1]
    rows = jnp.arange(S)
    band = jnp.abs(rows[:, None] - rows[None, :]) <= window  # (S, S) query x key
    keys = attention_mask[:, None, :] if attention_mask.ndim == 2 else attention_mask
    return band[None] & keys.astype(bool)  # (B, S, S)


def window_block(seq_len: int, window: int) -> int | None:
    """The query block `windowed_attention` computes `seq_len` tokens in for a window of `window`
    keys on either side: `window` queries (each block then reads 3 x window keys), or None
    where that saves less than half of the scores (a short sequence, or one the block does not
    divide), and the whole score matrix is computed and masked instead."""
    block = max(1, window)
    if seq_len % block or 2 * (block + 2 * window) > seq_len:
        return None
    return block


def windowed_attention(q: jax.Array, k: jax.Array, v: jax.Array, attention_mask: jax.Array,
                       window: int, block: int, chunks: int | None = None) -> jax.Array:
    """`exact_attention` under `local_mask(attention_mask, window)`, without dropout, computing
    only the scores inside the window: queries in blocks of `block` (`window_block`), each
    against the `block + 2 window` keys its queries can see (keys past either end are padding,
    masked). Returns the context (B, S, A, D). q, k, v (B, S, A, D); the mask a key padding
    mask (B, S) or packed rows' (B, S, S). `chunks` as `exact_attention`'s: slices of the batch
    XLA CPU runs side by side.

    A query with no key in its window (a padding row far past its sequence's end) gets what the
    whole masked matrix gives it, the mean of every value, so the outputs equal the masked
    path's at every row up to float32 rounding."""
    if chunks is None or chunks <= 1 or len(q) <= 1:
        return _windowed(q, k, v, attention_mask, window, block)
    parts = batch_slices(min(chunks, len(q)), q, k, v, attention_mask)
    return jnp.concatenate([_windowed(q_, k_, v_, mask, window, block)  # (B, S, A, D)
                            for q_, k_, v_, mask in parts])


def _windowed(q: jax.Array, k: jax.Array, v: jax.Array, attention_mask: jax.Array, window: int,
              block: int) -> jax.Array:
    """`windowed_attention` of one slice of the batch."""
    B, S, A, D = q.shape
    n, span = S // block, block + 2 * window

    def spans(x: jax.Array, rows: bool = False) -> jax.Array:
        """x (B, [S,] S, ...) padded by `window` keys on either side -> (B, n, [block,] span, ...):
        block i's keys i*block - window .. i*block + block + window (and its query rows)."""
        axis = 2 if rows else 1
        x = jnp.pad(x, [(0, 0)] * axis + [(window, window)] + [(0, 0)] * (x.ndim - axis - 1))
        parts = [x[:, i * block:(i + 1) * block, i * block:i * block + span] if rows else
                 x[:, i * block:i * block + span] for i in range(n)]
        return jnp.stack(parts, axis=1)

    keys = (spans(attention_mask)[:, :, None, :] if attention_mask.ndim == 2
            else spans(attention_mask, rows=True))  # (B, n, 1 or block, span)
    offset = jnp.arange(span)[None, :] - window - jnp.arange(block)[:, None]  # key - query
    mask = (jnp.abs(offset) <= window) & keys.astype(bool)  # (B, n, block, span)
    qb = q.reshape(B, n, block, A, D)  # (B, S, A, D) -> (B, n, block, A, D)
    scores = jnp.einsum("bnqad,bnkad->bnaqk", qb, spans(k), preferred_element_type=jnp.float32)
    probs = numerics.masked_softmax(scores / jnp.sqrt(jnp.float32(D)), mask[:, :, None])
    context = jnp.einsum("bnaqk,bnkad->bnqad", probs.astype(v.dtype), spans(v))
    context = context.reshape(B, S, A, D)  # (B, n, block, A, D) -> (B, S, A, D)
    empty = ~jnp.any(mask, axis=-1).reshape(B, S)  # (B, S): rows whose window holds no key
    uniform = jnp.mean(v.astype(jnp.float32), axis=1, keepdims=True).astype(v.dtype)  # (B, 1, A, D)
    return jnp.where(empty[:, :, None, None], uniform, context)


def _even_rows(x: jax.Array) -> jax.Array:
    """x (B, N, ...) with a row of zeros appended on axis 1 where N is odd."""
    if x.shape[1] % 2 == 0:
        return x
    return jnp.pad(x, [(0, 0), (0, 1)] + [(0, 0)] * (x.ndim - 2))


def take_rows(x: jax.Array, positions: jax.Array) -> jax.Array:
    """The rows of x (B, S, H) at positions (B, Q): (B, Q, H)."""
    return jnp.take_along_axis(x, positions[:, :, None], axis=1)  # (B, Q, H)


def dropout_rows(dropout: nnx.Dropout, x: jax.Array, positions: jax.Array | None, length: int,
                 axis: int, *, deterministic: bool, rngs: nnx.Rngs | None) -> jax.Array:
    """`dropout` on x, the rows `positions` (B, Q) along `axis` of an array `length` long there:
    the rows of the mask `dropout` draws for the whole array (nnx.Dropout's draw, same key), so
    a layer computed at some rows drops out what the whole layer would at those rows."""
    if positions is None:
        return dropout(x, deterministic=deterministic, rngs=rngs)
    if deterministic or dropout.rate == 0.0:
        return x
    if dropout.rate == 1.0:
        return jnp.zeros_like(x)
    if rngs is None:
        raise InputError("dropout at some rows needs rngs: call the model with "
                         "deterministic=False and a dropout_rng")
    keep = 1.0 - dropout.rate
    key = rngs[dropout.rng_collection]()
    whole = jax.random.bernoulli(key, keep, (*x.shape[:axis], length, *x.shape[axis + 1:]),
                                 out_sharding=jax.typeof(x).sharding)  # as nnx.Dropout draws
    index = positions.reshape(positions.shape + (1,) * (x.ndim - 2))  # (B, Q, 1...)
    if axis != 1:  # (B, 1..., Q, 1...): Q at `axis`
        index = jnp.moveaxis(index, 1, axis)
    mask = jnp.take_along_axis(whole, index, axis=axis)  # x's shape
    return jax.lax.select(mask, x / keep, jnp.zeros_like(x))
