"""ModernBERT's attention on every path gives the same numbers: packed rows (several sequences
per row) as the padded batch for every head, rotary positions restarting per sequence and no
local window crossing a sequence's edge; and the fused path (`jax.nn.dot_product_attention`,
XLA's implementation on a CPU, `local_window_size` for the local layers) as the exact one.

The fixtures' "b" models have the narrowest window (2 tokens each side), a local first layer and
mean pooling; "a"'s sequence classifier pools [CLS]. Sequences are 21, 15 and 9 tokens.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx
from modernbert_fixtures import INPUTS, config, directory, forward, packed_rows, saved

import bertjax

TOL = 1e-5
PER_TOKEN = {"BertModel": "sequence_output", "BertForMaskedLM": "mlm_logits",
             "BertForTokenClassification": "logits", "BertForQuestionAnswering": "start_logits"}


def _run(model, **arrays):
    with jax.default_matmul_precision("highest"):
        return forward(model, *(jnp.asarray(arrays[k]) if arrays.get(k) is not None else None
                                for k in INPUTS), **{k: jnp.asarray(arrays[k]) for k in (
                                    "sequence_ids", "cls_positions") if k in arrays})


@nnx.jit
def _packed(model, ids, mask, sequence_ids, cls_positions):
    return model(ids, None, mask, sequence_ids=sequence_ids, cls_positions=cls_positions)


def _packed_run(model, rows):
    with jax.default_matmul_precision("highest"):
        return _packed(model, *(jnp.asarray(rows[k]) for k in (
            "input_ids", "attention_mask", "sequence_ids", "cls_positions")))


CASES = [("b", name) for name in ("BertModel", "BertForMaskedLM", "BertForTokenClassification",
                                  "BertForQuestionAnswering", "BertForSequenceClassification",
                                  "BertForMultipleChoice")] + [("a", "BertForSequenceClassification")]


@pytest.mark.parametrize(("config", "name"), CASES)
def test_packed_rows_give_the_padded_batch_outputs(config, name):
    model, _ = bertjax.from_pretrained(directory(config, name))
    arrays = saved(config, name)
    ids, mask = arrays["input_ids"], arrays["attention_mask"]
    padded = _run(model, input_ids=ids, attention_mask=mask)
    if name == "BertForMultipleChoice":  # each example's choices, one row: (B, C) at [CLS]
        B, C, S = ids.shape
        rows = packed_rows(ids.reshape(B * C, S), mask.reshape(B * C, S),
                           [list(range(b * C, b * C + C)) for b in range(B)], C * S)
        got = _packed_run(model, rows).logits
        np.testing.assert_allclose(got, padded.logits, rtol=0, atol=TOL)
        return
    rows = packed_rows(ids, mask, [[0], [1, 2]], 24)  # 21 | 15 + 9: the second row's edge
    packed = _packed_run(model, rows)
    if name == "BertForSequenceClassification":  # (B, K, labels) at cls_positions
        order = [(0, 0), (1, 0), (1, 1)]  # sequence i's (row, slot)
        got = np.stack([packed.logits[r, k] for r, k in order])
        np.testing.assert_allclose(got, padded.logits, rtol=0, atol=TOL)
        return
    fields = [PER_TOKEN[name]] + (["end_logits"] if name == "BertForQuestionAnswering" else [])
    for field in fields:
        whole, got = np.asarray(getattr(padded, field)), np.asarray(getattr(packed, field))
        for i, (r, start, n) in rows["spans"].items():
            np.testing.assert_allclose(got[r, start:start + n], whole[i, :n], rtol=0,
                                       atol=TOL * max(1.0, np.abs(whole).max()), err_msg=field)


@pytest.mark.slow
def test_the_fused_path_equals_the_exact_one():
    """A local first layer (a window of 3 tokens each side) and a global one, on padded rows and
    on packed ones: the fused path's outputs at the real tokens and every gradient are the exact
    path's. Global layers go as sequence lengths, local ones with `local_window_size` too;
    packed rows' mask (each sequence's window inside it) as XLA's mask."""
    models = [bertjax.BertForTokenClassification(
        config(num_hidden_layers=2, local_attention=7, attn_implementation=impl,
               layer_types=("sliding_attention", "full_attention")), rngs=nnx.Rngs(0))
        for impl in ("fused", "exact")]
    rng = np.random.default_rng(0)
    mask = (np.arange(16)[None, :] < np.array([16, 11, 5])[:, None]).astype(np.int32)  # (3, 16)
    ids = np.where(mask == 1, rng.integers(1, 97, size=mask.shape), 0).astype(np.int32)
    inputs = [jnp.asarray(ids), None, jnp.asarray(mask)]

    @nnx.jit
    def gradients(m):
        return nnx.grad(lambda m: (m(*inputs).logits ** 2 * inputs[2][..., None]).sum() / 2)(m)

    with jax.default_matmul_precision("highest"):
        outs = [np.asarray(forward(m, *inputs).logits)[mask == 1] for m in models]
        grads = [jax.tree.leaves(gradients(m)) for m in models]
    np.testing.assert_allclose(outs[0], outs[1], rtol=0, atol=TOL)
    for fused, exact in zip(*grads, strict=True):
        np.testing.assert_allclose(fused, exact, rtol=0,
                                   atol=TOL * max(1.0, float(np.abs(exact).max())))
    rows = packed_rows(ids, mask, [[0], [1, 2]], 16)
    fused, exact = (np.asarray(_packed_run(m, rows).logits) for m in models)
    keep = rows["attention_mask"].astype(bool)
    np.testing.assert_allclose(fused[keep], exact[keep], rtol=0, atol=TOL)
