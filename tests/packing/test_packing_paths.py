"""Packed rows on every path and at the edges: the mask and positions `packed_attention` builds
(both frameworks), one sequence per row as the unpacked model, explicit `position_ids`, the last
layer at [CLS] and masked rows only, `scan_layers`, dropout, the fused-attention decision, empty
slots and padding rows, and bad packing inputs refused by name in both frameworks.

Tolerances (float32): the same computation arranged otherwise (rows path, scan, mirror) 1e-6 max
abs, bertjax against bert_torch 1e-5 (`parity.tensors.TOLERANCE`); where the same numbers must come
out (explicit positions equal to the computed ones, one sequence per row at its tokens) bitwise.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import bert_torch
from bertjax import BertConfig, BertForMultipleChoice, BertForPreTraining, BertModel, inputs, numerics
from bertjax.data.packing import pack_sequences
from parity.convert import to_torch_model
from parity.tensors import TOLERANCE, random_batch

CONFIG = BertConfig.from_preset("tiny", vocab_size=99, max_position_embeddings=40)
OUTPUTS = ("sequence_output", "pooled_output", "nsp_logits", "mlm_logits")


def _packed(seed: int = 0):
    rng = np.random.default_rng(seed)
    lengths = (9, 5, 12, 7, 3, 6)
    ids = [[2, *rng.integers(3, CONFIG.vocab_size, n - 1).tolist()] for n in lengths]
    types = [[0] * (n // 2) + [1] * (n - n // 2) for n in lengths]
    return pack_sequences(ids, types, seq_len=20)


PACKED = _packed()
MASKED = np.array([[1, 3, 8, 15], [2, 4, 10, 11], [1, 2, 4, 0]], np.int32)  # (R, P) into the rows


def _jax_args(packed=PACKED, **extra):
    return (jnp.asarray(packed.input_ids), jnp.asarray(packed.token_type_ids),
            jnp.asarray(packed.attention_mask)), {
        "sequence_ids": jnp.asarray(packed.sequence_ids),
        "cls_positions": jnp.asarray(packed.cls_positions), **extra}


def test_packed_attention_mask_and_positions_in_both_frameworks():
    sequence_ids = np.array([[1, 1, 1, 2, 2, 0, 0], [1, 2, 1, 2, 3, 3, 0]], np.int32)
    attention_mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 0, 0]], np.int32)
    mask, positions = inputs.packed_attention(jnp.asarray(sequence_ids), jnp.asarray(attention_mask))
    # tokens count from 0 per sequence, contiguous or not; padding sits at 0
    np.testing.assert_array_equal(positions, [[0, 1, 2, 0, 1, 0, 0], [0, 0, 1, 1, 0, 1, 0]])
    expected = (sequence_ids[:, :, None] == sequence_ids[:, None, :]) & (
        (sequence_ids != 0) & (attention_mask != 0))[:, None, :]
    np.testing.assert_array_equal(mask, expected)
    assert not np.asarray(mask)[0, 5:].any()  # a padding query attends nothing
    assert not np.asarray(mask)[1, :, 5].any()  # a key the attention mask drops: no query
    tmask, tpositions = bert_torch.inputs.packed_attention(torch.from_numpy(sequence_ids),
                                                           torch.from_numpy(attention_mask))
    np.testing.assert_array_equal(tmask.numpy(), expected)
    np.testing.assert_array_equal(tpositions.numpy(), positions)


@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["exact", "fused"])
def test_one_sequence_per_row_is_the_unpacked_model(implementation):
    model = BertModel(CONFIG.replace(attn_implementation=implementation), rngs=nnx.Rngs(0))
    batch = random_batch(CONFIG, batch_size=3, seq_len=16, seed=1)
    args = [jnp.asarray(batch[k]) for k in ("input_ids", "token_type_ids", "attention_mask")]
    plain = model(*args)
    packed = model(*args, sequence_ids=args[2], cls_positions=jnp.zeros((3, 1), jnp.int32))
    real = batch["attention_mask"] == 1
    np.testing.assert_array_equal(np.asarray(packed.sequence_output)[real],
                                  np.asarray(plain.sequence_output)[real])
    np.testing.assert_array_equal(packed.pooled_output[:, 0], plain.pooled_output)


@pytest.mark.slow
def test_explicit_position_ids_are_used_and_computed_ones_restart():
    model = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    args, kwargs = _jax_args()
    computed = model(*args, **kwargs)
    given = model(*args, **kwargs, position_ids=jnp.asarray(PACKED.position_ids))
    for f in OUTPUTS:  # the packer's positions are the ones the model computes
        np.testing.assert_array_equal(getattr(given, f), getattr(computed, f), err_msg=f)
    unrestarted = jnp.broadcast_to(jnp.arange(20), (3, 20))
    moved = model(*args, **kwargs, position_ids=unrestarted)
    assert float(jnp.abs(moved.nsp_logits - computed.nsp_logits).max()) > 1e-4


def _mlp_rows(model, args, kwargs) -> list[int]:
    jaxpr = str(jax.make_jaxpr(lambda: model(*args, **kwargs))())
    return [int(n) for n in re.findall(rf"f32\[(\d+),{CONFIG.intermediate_size}\] = dot_general",
                                       jaxpr)]


@pytest.mark.slow
def test_the_last_layer_computes_only_the_cls_and_masked_rows_of_packed_rows():
    model = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    args, kwargs = _jax_args()
    fast = model(*args, jnp.asarray(MASKED), **kwargs)
    full = model(*args, **kwargs)
    rows = jnp.asarray(MASKED)[:, :, None]
    assert float(jnp.abs(fast.mlm_logits - jnp.take_along_axis(full.mlm_logits, rows, 1)).max()
                 ) <= 1e-6
    assert float(jnp.abs(fast.nsp_logits - full.nsp_logits).max()) <= 1e-6
    assert float(jnp.abs(fast.pooled_output - full.pooled_output).max()) <= 1e-6
    (R, K), P = PACKED.cls_positions.shape, MASKED.shape[1]
    L, S = CONFIG.num_hidden_layers, PACKED.input_ids.shape[1]
    assert _mlp_rows(model, (*args, jnp.asarray(MASKED)), kwargs) == [R * S] * (L - 1) + [R * (K + P)]
    mirror = to_torch_model(model)
    t = [torch.from_numpy(a) for a in (PACKED.input_ids, PACKED.token_type_ids,
                                       PACKED.attention_mask, MASKED)]
    with torch.no_grad():
        theirs = mirror(*t, sequence_ids=torch.from_numpy(PACKED.sequence_ids),
                        cls_positions=torch.from_numpy(PACKED.cls_positions))
    for f in OUTPUTS:
        assert np.abs(np.asarray(getattr(fast, f)) - getattr(theirs, f).numpy()).max() <= TOLERANCE


@pytest.mark.slow
def test_scan_layers_and_dropout_take_packed_rows():
    loop = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    scan = BertForPreTraining(CONFIG.replace(scan_layers=True), rngs=nnx.Rngs(0))
    args, kwargs = _jax_args()
    a, b = loop(*args, jnp.asarray(MASKED), **kwargs), scan(*args, jnp.asarray(MASKED), **kwargs)
    for f in OUTPUTS:
        assert float(jnp.abs(getattr(a, f) - getattr(b, f)).max()) <= 1e-6, f
    # dropout on the rows path: the whole layer's masks at the rows, as unpacked
    options = {"deterministic": False, "dropout_rng": jax.random.key(3)}
    fast = loop(*args, jnp.asarray(MASKED), **kwargs, **options)
    full = loop(*args, **kwargs, **options)
    rows = jnp.asarray(MASKED)[:, :, None]
    assert float(jnp.abs(fast.mlm_logits - jnp.take_along_axis(full.mlm_logits, rows, 1)).max()
                 ) <= 1e-6
    assert float(jnp.abs(fast.mlm_logits - a.mlm_logits).max()) > 1e-3  # dropout did something


@pytest.mark.slow
def test_empty_slots_and_padding_rows():
    model = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    ids = np.concatenate([PACKED.input_ids, np.zeros((1, 20), np.int32)])  # a row of padding
    extra = {"sequence_ids": np.concatenate([PACKED.sequence_ids, np.zeros((1, 20), np.int32)]),
             "cls_positions": np.concatenate([PACKED.cls_positions, -np.ones((1, 3), np.int32)])}
    out = model(jnp.asarray(ids), **{k: jnp.asarray(v) for k, v in extra.items()},
                output_attentions=True)
    empty = extra["cls_positions"] < 0
    assert empty.sum() >= 4
    assert (np.asarray(out.pooled_output)[empty] == 0).all()  # empty slots pool to zeros
    np.testing.assert_allclose(np.asarray(out.nsp_logits)[empty],  # and score the bias alone
                               np.broadcast_to(model.nsp_head.bias[...], (empty.sum(), 2)))
    assert all(np.isfinite(np.asarray(getattr(out, f))).all() for f in OUTPUTS)
    np.testing.assert_allclose(np.asarray(out.attentions[0])[3], 1 / 20, rtol=1e-6)  # uniform
    with torch.no_grad():
        theirs = to_torch_model(model)(torch.from_numpy(ids),
                                       **{k: torch.from_numpy(v) for k, v in extra.items()})
    for f in OUTPUTS:
        assert np.abs(np.asarray(getattr(out, f)) - getattr(theirs, f).numpy()).max() <= TOLERANCE


def test_packed_multiple_choice_gives_empty_slots_the_lowest_logit():
    model = BertForMultipleChoice(CONFIG, rngs=nnx.Rngs(0))
    args, kwargs = _jax_args()
    logits = np.asarray(model(*args, **kwargs).logits)
    empty = PACKED.cls_positions < 0
    assert logits.shape == PACKED.cls_positions.shape and empty.any()
    assert (logits[empty] == np.finfo(np.float32).min).all() and np.isfinite(logits).all()
    probs = np.asarray(jax.nn.softmax(jnp.asarray(logits), axis=-1))
    assert (probs[empty] == 0).all()  # a softmax over the choices leaves them out
    with torch.no_grad():
        theirs = to_torch_model(model)(*(torch.from_numpy(np.array(a)) for a in args),
                                       **{k: torch.from_numpy(np.array(v)) for k, v in kwargs.items()})
    assert np.abs(logits - theirs.logits.numpy()).max() <= TOLERANCE


@pytest.mark.slow
def test_auto_keeps_packed_rows_exact_and_fused_gives_the_mask_to_xla(monkeypatch):
    fuse = numerics.use_fused_attention
    assert fuse("auto", False, False, cudnn=True) and not fuse("auto", False, False, True, True)
    assert fuse("fused", False, False, cudnn=False, packed=True)  # XLA with the mask
    # the fused path's call: the (B, 1, Q, S) boolean mask, no sequence lengths
    calls = []
    real = jax.nn.dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(jax.nn, "dot_product_attention", spy)
    model = BertModel(CONFIG.replace(attn_implementation="fused"), rngs=nnx.Rngs(0))
    args, kwargs = _jax_args()
    model(*args, **kwargs)
    assert len(calls) == CONFIG.num_hidden_layers
    assert calls[0]["mask"].shape == (3, 1, 20, 20) and calls[0]["mask"].dtype == jnp.bool_
    assert "key_value_seq_lengths" not in calls[0] and calls[0]["implementation"] == "xla"
    calls.clear()
    BertModel(CONFIG.replace(attn_implementation="auto"), rngs=nnx.Rngs(0))(*args, **kwargs)
    assert not calls  # float32 on a CPU: auto is exact, packed or not
    # as on an NVIDIA GPU in bfloat16, where cuDNN takes these heads: its gradient through the
    # mask was NaN on an H100, so the mask still goes to XLA's implementation
    monkeypatch.setattr(numerics.jax, "default_backend", lambda: "gpu")
    fused = CONFIG.replace(attn_implementation="fused", dtype="bfloat16")
    BertModel(fused, rngs=nnx.Rngs(0))(*args, **kwargs)
    assert [c["implementation"] for c in calls] == ["xla"] * CONFIG.num_hidden_layers


def _both(cls, *args, **kwargs):
    """Call `cls` of bertjax and of bert_torch (the same weights) on numpy arguments."""
    model = cls(CONFIG, rngs=nnx.Rngs(0))
    yield lambda: model(*(None if a is None else jnp.asarray(a) for a in args),
                        **{k: jnp.asarray(v) for k, v in kwargs.items()})
    mirror = to_torch_model(model)
    yield lambda: mirror(*(None if a is None else torch.from_numpy(np.asarray(a)) for a in args),
                         **{k: torch.from_numpy(np.asarray(v)) for k, v in kwargs.items()})


@pytest.mark.parametrize(("change", "message"), [
    ({"cls_positions": None}, "packed rows \\(sequence_ids\\) need cls_positions for the pooler"),
    ({"cls_positions": np.array([[0, 19, -1]] * 3, np.int32)},
     r"cls_positions of rows \[0, 2\] point at padding"),
    ({"cls_positions": np.array([[0, 20]] * 3, np.int32)},
     r"cls_positions has values outside \[-1, seq_len=20\)"),
    ({"cls_positions": np.zeros((2, 2), np.int32)},
     r"cls_positions must have shape \(batch=3, sequences per row\)"),
    ({"sequence_ids": -PACKED.sequence_ids}, "sequence_ids must be 0 \\(padding\\) or"),
    ({"sequence_ids": PACKED.sequence_ids[:, :5]}, "sequence_ids must have the shape of input_ids"),
    ({"position_ids": PACKED.position_ids + 39},
     r"position_ids has values outside \[0, max_position_embeddings=40\)"),
    ({"position_ids": PACKED.position_ids.astype(np.float32)}, "position_ids must be integers"),
])
def test_bad_packing_inputs_are_refused_by_name_in_both_frameworks(change, message):
    kwargs = {"sequence_ids": PACKED.sequence_ids, "cls_positions": PACKED.cls_positions, **change}
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    for call in _both(BertForPreTraining, PACKED.input_ids, **kwargs):
        with pytest.raises(ValueError, match=message):
            call()
    if "cls_positions" in change or "sequence_ids" in change:
        return
    with pytest.raises(ValueError, match=message):  # and on the host, before a jitted step
        inputs.check_batch(CONFIG, {"input_ids": PACKED.input_ids, **kwargs})


def test_multiple_choice_refuses_packing_arguments_with_stacked_choices():
    stacked = np.ones((2, 3, 5), np.int32)
    for call in _both(BertForMultipleChoice, stacked, sequence_ids=stacked):
        with pytest.raises(ValueError, match=r"sequence_ids apply to packed multiple choice"):
            call()
    for call in _both(BertForMultipleChoice, np.ones((2, 5), np.int32)):
        with pytest.raises(ValueError, match="or pack them into one row with sequence_ids and "
                                             "cls_positions"):
            call()


@pytest.mark.slow
def test_packed_rows_need_not_be_right_padding_for_fused_attention():
    """Fused attention reads an unpacked mask as lengths (right padding only); packed rows carry
    their mask whole, so a hole in a row is fine."""
    model = BertModel(CONFIG.replace(attn_implementation="fused"), rngs=nnx.Rngs(0))
    ids = np.ones((1, 6), np.int32)
    holed = np.array([[1, 1, 0, 1, 1, 0]], np.int32)
    with pytest.raises(ValueError, match="not right padding"):
        model(jnp.asarray(ids), attention_mask=jnp.asarray(holed))
    out = model(jnp.asarray(ids), attention_mask=jnp.asarray(holed),
                sequence_ids=jnp.asarray([[1, 1, 1, 2, 2, 2]]), cls_positions=jnp.asarray([[0, 3]]))
    exact = BertModel(CONFIG, rngs=nnx.Rngs(0))(
        jnp.asarray(ids), attention_mask=jnp.asarray(holed),
        sequence_ids=jnp.asarray([[1, 1, 1, 2, 2, 2]]), cls_positions=jnp.asarray([[0, 3]]))
    assert float(jnp.abs(out.sequence_output - exact.sequence_output).max()) <= TOLERANCE
