"""bertjax vs bert_torch: whole model and module by module, float32 on the CPU.

Tolerance: 1e-5 max abs diff for every forward tensor (the Hugging Face PT/Flax test tolerance);
1e-5 relative to each gradient's max magnitude (floored at 1% of the largest gradient, see
parity.tensors) for every parameter's gradient of the MLM + NSP loss; each raised to 3 x the
mirror's own float32 noise where that is larger (the parity rule, `parity.noise`: the mirror runs
in float64 too).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from bertjax import BertConfig, BertForPreTraining
from parity.convert import to_torch_model
from parity.noise import judge
from parity.tensors import TOLERANCE, compare, random_batch

TINY = BertConfig.from_preset("tiny")


@pytest.fixture(scope="module")
def tiny_pair():
    """The model, its float32 mirror and its float64 mirror (the noise `_close` allows for)."""
    model = BertForPreTraining(TINY, rngs=nnx.Rngs(1))
    return model, to_torch_model(model), to_torch_model(model, float64=True)


@pytest.mark.slow
@pytest.mark.parametrize("masked", [True, False])
def test_tiny_whole_model_parity(tiny_pair, masked):
    model, *_ = tiny_pair
    batch = random_batch(TINY, batch_size=3, seq_len=24, num_predictions=5, seed=2)
    report = compare(model, batch, masked=masked)
    assert report.passed, report.format()
    expected_rows = 4 + TINY.num_hidden_layers + (TINY.num_hidden_layers + 1)
    n_params = len(jax.tree.leaves(nnx.state(model, nnx.Param)))
    assert len(report.rows) == expected_rows + (n_params if masked else 0)
    # padding is real in this batch: some rows are shorter than the sequence
    assert batch["attention_mask"].sum(1).min() < 24
    assert report.row("mlm_logits").max_abs <= TOLERANCE
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"] if masked else None)
    assert out.mlm_logits.shape == ((3, 5, TINY.vocab_size) if masked else (3, 24, TINY.vocab_size))


@pytest.mark.slow
def test_base_whole_model_parity():
    config = BertConfig.from_preset("base")
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    batch = random_batch(config, batch_size=2, seq_len=32, num_predictions=6, seed=0)
    report = compare(model, batch, masked=True)
    print(report.format())
    assert report.passed, report.format()
    unmasked = compare(model, batch, masked=False)
    assert unmasked.passed, unmasked.format()
    print("largest diffs on base:",
          {p: report.worst(p) for p in ("mlm_logits", "nsp_logits", "sequence_output",
                                        "pooled_output", "attentions", "hidden_states")},
          "largest gradient rel diff:", max(r.max_rel for r in report.rows if r.name.startswith("grad")))


def _inputs(seed: int = 0):
    batch = random_batch(TINY, batch_size=3, seq_len=20, num_predictions=4, seed=seed)
    return batch, {k: jnp.asarray(v) for k, v in batch.items()}, {
        k: torch.from_numpy(v) for k, v in batch.items()}


def _close(ours, tiny_pair, call):
    """`ours` against `call(mirror, tensor)` of the float32 mirror, the rule's bar raised by the
    float64 mirror's answer (`tensor(x)`: the float array `x` in the mirror's dtype)."""
    _, mirror, mirror64 = tiny_pair
    ref32 = call(mirror, lambda x: torch.from_numpy(np.asarray(x, np.float32)))
    ref64 = call(mirror64, lambda x: torch.from_numpy(np.asarray(x, np.float64)))
    judged = judge("tensor", ours, ref32.detach().numpy(), ref64.detach().numpy(), TOLERANCE)
    assert judged.passed, judged
    return judged.distance


def test_embeddings_module_parity(tiny_pair):
    model, *_ = tiny_pair
    _, j, t = _inputs()
    _close(model.bert.embeddings(j["input_ids"], j["token_type_ids"]), tiny_pair,
           lambda m, f: m.bert.embeddings(t["input_ids"], t["token_type_ids"]))


@pytest.mark.slow
def test_attention_and_layer_module_parity(tiny_pair):
    model, *_ = tiny_pair
    _, j, t = _inputs(1)
    x = np.random.default_rng(0).normal(size=(3, 20, TINY.hidden_size)).astype(np.float32)
    ours, our_probs = model.bert.layers[0].attention(jnp.asarray(x), j["attention_mask"])
    _close(ours, tiny_pair, lambda m, f: m.bert.layers[0].attention(f(x), t["attention_mask"])[0])
    _close(our_probs, tiny_pair,
           lambda m, f: m.bert.layers[0].attention(f(x), t["attention_mask"])[1])
    # masked keys get exactly zero probability, rows still sum to one
    keys_masked = np.asarray(j["attention_mask"])[:, None, None, :] == 0
    assert np.all(np.asarray(our_probs)[np.broadcast_to(keys_masked, our_probs.shape)] == 0)
    np.testing.assert_allclose(np.asarray(our_probs).sum(-1), 1.0, atol=1e-6)
    ours, _ = model.bert.layers[1](jnp.asarray(x), j["attention_mask"])
    _close(ours, tiny_pair, lambda m, f: m.bert.layers[1](f(x), t["attention_mask"])[0])


def test_fully_masked_row_stays_finite(tiny_pair):
    model, *_ = tiny_pair
    batch, j, t = _inputs(2)
    mask = np.zeros_like(batch["attention_mask"])
    out = model(j["input_ids"], j["token_type_ids"], jnp.asarray(mask), output_attentions=True)
    assert np.all(np.isfinite(np.asarray(out.mlm_logits)))
    np.testing.assert_allclose(np.asarray(out.attentions[0]), 1.0 / mask.shape[1], rtol=1e-6)
    _close(out.mlm_logits, tiny_pair, lambda m, f: m(
        t["input_ids"], t["token_type_ids"], torch.from_numpy(mask)).mlm_logits)


def test_heads_module_parity(tiny_pair):
    model, *_ = tiny_pair
    h = np.random.default_rng(3).normal(size=(2, 5, TINY.hidden_size)).astype(np.float32)
    _close(model.mlm_head(jnp.asarray(h), model.bert.embeddings.word_embeddings), tiny_pair,
           lambda m, f: m.mlm_head(f(h), m.bert.embeddings.word_embeddings))
    _close(model.bert.pooler(jnp.asarray(h)), tiny_pair, lambda m, f: m.bert.pooler(f(h)))
    pooled = np.tanh(h[:, 0])
    _close(model.nsp_head(jnp.asarray(pooled)), tiny_pair, lambda m, f: m.nsp_head(f(pooled)))


def test_mlm_decoder_is_tied_to_word_embeddings(tiny_pair):
    model, *_ = tiny_pair
    names = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(model, nnx.Param))]
    assert not any("decoder" in n for n in names)
    h = np.random.default_rng(4).normal(size=(1, 2, TINY.hidden_size)).astype(np.float32)
    # scaling the word embeddings scales the MLM logits (bias is zero at init): they are one tensor
    words = model.bert.embeddings.word_embeddings
    before = np.asarray(model.mlm_head(jnp.asarray(h), words))
    words.embedding[...] = words.embedding[...] * 2
    try:
        after = np.asarray(model.mlm_head(jnp.asarray(h), words))
    finally:
        words.embedding[...] = words.embedding[...] / 2
    np.testing.assert_allclose(after, 2 * before, rtol=1e-5, atol=1e-6)


def test_outputs_fields_and_shapes(tiny_pair):
    model, *_ = tiny_pair
    _, j, t = _inputs()
    out = model(j["input_ids"], masked_positions=j["masked_positions"],
                output_attentions=True, output_hidden_states=True)
    assert out.mlm_logits.shape == (3, 4, TINY.vocab_size) and out.mlm_logits.dtype == jnp.float32
    assert out.nsp_logits.shape == (3, 2)
    # at masked positions the sequence output is those rows; maps and hidden states stay whole
    assert out.sequence_output.shape == (3, 4, TINY.hidden_size)
    assert out.pooled_output.shape == (3, TINY.hidden_size)
    assert len(out.attentions) == TINY.num_hidden_layers
    assert out.attentions[-1].shape == (3, TINY.num_attention_heads, 20, 20)
    assert len(out.hidden_states) == TINY.num_hidden_layers + 1
    assert out.hidden_states[-1].shape == (3, 20, TINY.hidden_size)
    np.testing.assert_array_equal(
        np.asarray(out.sequence_output),
        np.take_along_axis(np.asarray(out.hidden_states[-1]), j["masked_positions"][:, :, None], 1))
    assert model(j["input_ids"]).sequence_output.shape == (3, 20, TINY.hidden_size)
    plain = model(j["input_ids"])
    assert plain.attentions is None and plain.hidden_states is None
    # default attention_mask is all ones and default token types are zeros, in both frameworks
    explicit = model(j["input_ids"], jnp.zeros_like(j["input_ids"]), jnp.ones_like(j["input_ids"]))
    np.testing.assert_array_equal(np.asarray(plain.mlm_logits), np.asarray(explicit.mlm_logits))
    _close(plain.mlm_logits, tiny_pair, lambda m, f: m(t["input_ids"]).mlm_logits)


@pytest.mark.slow
def test_dropout_needs_a_key_and_changes_outputs(tiny_pair):
    model, *_ = tiny_pair
    _, j, _ = _inputs()
    with pytest.raises(ValueError, match="dropout_rng"):
        model(j["input_ids"], deterministic=False)
    a = model(j["input_ids"], deterministic=False, dropout_rng=jax.random.key(0)).mlm_logits
    b = model(j["input_ids"], deterministic=False, dropout_rng=jax.random.key(0)).mlm_logits
    c = model(j["input_ids"], deterministic=False, dropout_rng=jax.random.key(1)).mlm_logits
    d = model(j["input_ids"]).mlm_logits
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert not np.allclose(np.asarray(a), np.asarray(c))
    assert not np.allclose(np.asarray(a), np.asarray(d))


@pytest.mark.slow
def test_bfloat16_compute_keeps_float32_params_and_logits():
    config = TINY.replace(dtype="bfloat16")
    model16 = BertForPreTraining(config, rngs=nnx.Rngs(1))
    model32 = BertForPreTraining(TINY, rngs=nnx.Rngs(1))
    params = jax.tree.leaves(nnx.state(model16, nnx.Param))
    assert all(p.dtype == jnp.float32 for p in params)
    _, j, _ = _inputs()
    out16 = model16(j["input_ids"], j["token_type_ids"], j["attention_mask"],
                    j["masked_positions"], output_attentions=True)
    out32 = model32(j["input_ids"], j["token_type_ids"], j["attention_mask"],
                    j["masked_positions"])
    assert out16.mlm_logits.dtype == jnp.float32 and out16.nsp_logits.dtype == jnp.float32
    assert out16.attentions[0].dtype == jnp.float32
    assert out16.sequence_output.dtype == jnp.bfloat16
    # bfloat16 has 8 bits of mantissa: logits agree to about 1e-2 of their scale
    scale = float(np.abs(np.asarray(out32.mlm_logits)).max())
    diff = float(np.abs(np.asarray(out16.mlm_logits) - np.asarray(out32.mlm_logits)).max())
    assert 0 < diff <= 5e-2 * scale, (diff, scale)


@pytest.mark.slow
def test_bfloat16_mirror_computes_in_bfloat16_too():
    """bert_torch honours `config.dtype`: a bfloat16 bertjax model's mirror computes in bfloat16
    (float32 parameters, softmax, LayerNorm statistics and logits), so the two agree far more
    closely than either agrees with float32."""
    config = TINY.replace(dtype="bfloat16")
    model16 = BertForPreTraining(config, rngs=nnx.Rngs(1))
    model32 = BertForPreTraining(TINY, rngs=nnx.Rngs(1))
    batch = random_batch(config, batch_size=3, seq_len=24, num_predictions=5, seed=2)
    keys = ("input_ids", "token_type_ids", "attention_mask", "masked_positions")
    ours = model16(*(batch[k] for k in keys))
    ref32 = model32(*(batch[k] for k in keys))
    torch16 = to_torch_model(model16)
    assert all(p.dtype == torch.float32 for p in torch16.parameters())
    theirs = torch16(*(torch.from_numpy(batch[k]) for k in keys))
    assert theirs.sequence_output.dtype == torch.bfloat16 and theirs.mlm_logits.dtype == torch.float32
    for field in ("mlm_logits", "nsp_logits", "pooled_output"):
        a = np.asarray(getattr(ours, field), np.float32)
        scale = float(np.abs(a).max())
        mirror = float(np.abs(a - getattr(theirs, field).detach().float().numpy()).max())
        to_f32 = float(np.abs(a - np.asarray(getattr(ref32, field), np.float32)).max())
        assert mirror <= 1e-2 * scale, (field, mirror, scale)  # 2e-2 relative is the bar
        assert mirror < to_f32, (field, mirror, to_f32)
