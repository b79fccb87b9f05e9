"""Local layers compute their window only (`bertjax.attention.windowed_attention`): on the exact
path without probability dropout, where the sequence is long enough for it to save work, each
block of queries reads only the keys its window reaches. Its outputs and gradients are the
whole masked matrix's (what the path computes with `output_attentions`, the parity reference)
at every row, padding rows whose window holds no key included, for padded and packed rows,
a loop of layers and a scan over them.

A small ModernBERT: a window of 4 tokens each side (`local_attention` 8), 32-token rows, so the
queries go in 8 blocks of 4, each against 12 keys; layers 0 and 3 global, 1 and 2 local.
"""

from __future__ import annotations

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from modernbert_fixtures import config, packed_rows

from bertjax import BertForMaskedLM
from bertjax.attention import window_block
from bertjax.modernbert import ModernBertModel

TOL = 1e-5  # float32: the same products, summed in another order
S, LENGTHS = 32, (32, 20, 5)  # the last row's positions 10.. see no real key in their window


def _batch() -> tuple[jax.Array, jax.Array]:
    rng = np.random.default_rng(0)
    mask = (np.arange(S)[None, :] < np.array(LENGTHS)[:, None]).astype(np.int32)  # (B, S)
    ids = np.where(mask == 1, rng.integers(5, 97, size=mask.shape), 0).astype(np.int32)
    return jnp.asarray(ids), jnp.asarray(mask)


def _model(cls=ModernBertModel, **overrides):
    return cls(config(local_attention=8, max_position_embeddings=S, **overrides),
               rngs=nnx.Rngs(0))


@nnx.jit(static_argnames=("whole",))
def _encode(model, ids, mask, whole: bool, **packing):
    return model(ids, None, mask, output_attentions=whole, **packing).sequence_output


def test_window_block_only_where_it_saves_half_the_scores():
    assert window_block(512, 64) == 64  # ModernBERT's 128-token window at 512: 192 keys of 512
    assert window_block(S, 4) == 4
    assert window_block(256, 64) is None  # 192 of 256 keys: the whole matrix
    assert window_block(30, 4) is None  # 4 does not divide 30


def test_windowed_outputs_are_the_whole_matrix_at_every_row():
    model = _model()
    ids, mask = _batch()
    with jax.default_matmul_precision("highest"):
        windowed, whole = (_encode(model, ids, mask, w) for w in (False, True))
    np.testing.assert_allclose(windowed, whole, rtol=0, atol=TOL)  # padding rows too


def test_windowed_path_computes_blocks_and_the_whole_path_none():
    """The local layers' scores are (.., 4 queries, 12 keys) blocks on the windowed path; the
    global layers' and, with attentions asked for, every layer's are (.., 32, 32)."""
    model = _model()
    ids, mask = _batch()
    graphdef, state = nnx.split(model)

    def scores(whole: bool) -> list[tuple[int, ...]]:
        def run(state):
            return nnx.merge(graphdef, state)(ids, None, mask, output_attentions=whole).sequence_output
        jaxpr = jax.make_jaxpr(run)(state)
        shapes = [tuple(v.aval.shape[-2:]) for e in _equations(jaxpr.jaxpr)
                  if e.primitive.name == "dot_general" for v in e.outvars]
        return [s for s in shapes if s in {(4, 12), (S, S)}]

    assert sorted(scores(False)) == [(4, 12)] * 2 * 2 + [(S, S)] * 2 * 2  # 2 layers x 2 chunks
    assert scores(True) == [(S, S)] * 4 * 2


def _equations(jaxpr):
    """Every equation of `jaxpr` and of the programs inside it (scan, cond, jit), in order."""
    for e in jaxpr.eqns:
        yield e
        for sub in jax.extend.core.jaxprs_in_params(e.params):
            yield from _equations(sub)


def test_windowed_gradients_are_the_whole_matrix():
    model = _model(BertForMaskedLM)
    ids, mask = _batch()
    positions = jnp.asarray([[1, 7, 30], [2, 11, 19], [1, 3, 4]])  # (B, 3) real tokens
    graphdef, params = nnx.split(model, nnx.Param)

    def loss(params, whole: bool):
        out = nnx.merge(graphdef, params)(ids, None, mask, masked_positions=positions,
                                          output_attentions=whole)
        return jnp.sum(jax.nn.log_softmax(out.mlm_logits)[..., 5])

    with jax.default_matmul_precision("highest"):
        windowed, whole = (jax.jit(jax.grad(loss), static_argnums=1)(params, w)
                           for w in (False, True))
    for (path, a), b in zip(jax.tree.leaves_with_path(windowed), jax.tree.leaves(whole),
                            strict=True):
        scale = max(1.0, float(jnp.max(jnp.abs(b))))
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL * scale, err_msg=jax.tree_util.keystr(path))


@pytest.mark.parametrize("scan", [False, True])
def test_windowed_packed_rows_and_scan_are_the_whole_matrix(scan):
    """Three sequences packed into two rows: the window stops at each sequence's edge."""
    model = _model(scan_layers=scan)
    ids, mask = _batch()
    rows = packed_rows(np.asarray(ids), np.asarray(mask), [[1, 2], [0]], S)
    packing = {k: jnp.asarray(rows[k]) for k in ("sequence_ids", "cls_positions")}
    args = (jnp.asarray(rows["input_ids"]), jnp.asarray(rows["attention_mask"]))
    with jax.default_matmul_precision("highest"):
        windowed, whole = (_encode(model, *args, w, **packing) for w in (False, True))
        padded = _encode(model, ids, mask, False)
    np.testing.assert_allclose(windowed, whole, rtol=0, atol=TOL)
    for i, (r, start, n) in rows["spans"].items():  # each sequence as it is alone in the batch
        np.testing.assert_allclose(windowed[r, start:start + n], padded[i, :n], rtol=0, atol=TOL)
