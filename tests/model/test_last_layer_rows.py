"""The last layer at the masked positions only (`BertModel`'s `output_positions`, which the
masked-LM classes pass their `masked_positions` as): the numbers of the full layer's rows, in
bertjax and in its PyTorch mirror, with the work really left out.

Tolerances: outputs within 1e-6 max abs and gradients within 1e-6 of each one's largest entry
(`parity.tensors.gradient_errors`), float32: the rows path multiplies smaller matrices, which
may sum in another order. The mirror against bertjax at `parity.tensors.TOLERANCE`.
"""

from __future__ import annotations

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from bertjax import BertConfig, BertForMaskedLM, BertForPreTraining, BertModel
from bertjax.io.weights import state_to_numpy
from bertjax.losses import cross_entropy
from parity.convert import to_torch_model
from parity.tensors import TOLERANCE, gradient_errors, random_batch

CONFIG = BertConfig.from_preset("tiny", vocab_size=211)
B, S, P = 3, 24, 5
OUTPUTS = ("mlm_logits", "nsp_logits", "pooled_output", "sequence_output")


def _batch(seed: int = 2) -> dict[str, np.ndarray]:
    batch = random_batch(CONFIG, batch_size=B, seq_len=S, num_predictions=P, seed=seed)
    batch["masked_positions"][1:, -1] = 0  # padding slots point at [CLS], as the data layer's
    return batch


def _call(model, batch, masked: bool, **options):
    """The model at the masked positions, or at every position and the rows taken after."""
    out = model(jnp.asarray(batch["input_ids"]), jnp.asarray(batch["token_type_ids"]),
                jnp.asarray(batch["attention_mask"]),
                jnp.asarray(batch["masked_positions"]) if masked else None, **options)
    if masked:
        return out
    rows = jnp.asarray(batch["masked_positions"])[:, :, None]  # (B, P, 1)
    return out.replace(mlm_logits=jnp.take_along_axis(out.mlm_logits, rows, 1),
                       sequence_output=jnp.take_along_axis(out.sequence_output, rows, 1))


def _loss_and_grads(model, batch, masked: bool, dropout_rng=None):
    graphdef, params = nnx.split(model, nnx.Param)
    weights = jnp.asarray(batch["masked_weights"])
    options = {} if dropout_rng is None else {"deterministic": False, "dropout_rng": dropout_rng}

    def loss(p):
        out = _call(nnx.merge(graphdef, p), batch, masked, **options)
        mlm = jnp.sum(cross_entropy(out.mlm_logits, jnp.asarray(batch["masked_ids"])) * weights)
        nsp = 0.0 if out.nsp_logits is None else jnp.sum(
            cross_entropy(out.nsp_logits, jnp.asarray(batch["next_sentence_label"])))
        return mlm + nsp

    value, grads = jax.jit(jax.value_and_grad(loss))(params)  # compiled whole, not op by op
    return float(value), state_to_numpy(grads)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [BertForPreTraining, BertForMaskedLM])
@pytest.mark.parametrize("remat", [False, True])
def test_rows_path_gives_the_full_layers_rows_and_gradients(cls, remat):
    model = cls(CONFIG.replace(remat=remat), rngs=nnx.Rngs(0))
    batch = _batch()
    fast, full = _call(model, batch, masked=True), _call(model, batch, masked=False)
    assert fast.sequence_output.shape == (B, P, CONFIG.hidden_size)
    for name in OUTPUTS:
        a, b = getattr(fast, name), getattr(full, name)
        assert (a is None) == (b is None) == (name in ("nsp_logits", "pooled_output")
                                              and cls is BertForMaskedLM), name
        if a is not None:
            assert float(jnp.max(jnp.abs(a - b))) <= 1e-6, name
    (la, ga), (lb, gb) = _loss_and_grads(model, batch, True), _loss_and_grads(model, batch, False)
    assert la == pytest.approx(lb, rel=1e-6, abs=0)
    assert max(gradient_errors(ga, gb).values()) <= 1e-6


@pytest.mark.slow
def test_dropout_masks_are_the_whole_layers_at_those_rows():
    """With dropout the rows path draws the whole layer's masks and takes its rows (attention
    probabilities, attention output, MLP output): the same outputs and gradients as the full
    layer. A layer asked for rows with dropout but no rngs says what is missing."""
    config = CONFIG.replace(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    batch = _batch()
    options = {"deterministic": False, "dropout_rng": jax.random.key(7)}
    fast, full = _call(model, batch, True, **options), _call(model, batch, False, **options)
    for name in OUTPUTS:
        assert float(jnp.max(jnp.abs(getattr(fast, name) - getattr(full, name)))) <= 1e-6, name
    other = _call(model, batch, True, deterministic=False, dropout_rng=jax.random.key(8))
    assert float(jnp.max(jnp.abs(other.mlm_logits - fast.mlm_logits))) > 1e-3  # masks differ
    key = jax.random.key(7)
    (la, ga), (lb, gb) = (_loss_and_grads(model, batch, masked, key) for masked in (True, False))
    assert la == pytest.approx(lb, rel=1e-6, abs=0)
    assert max(gradient_errors(ga, gb).values()) <= 1e-6
    x = jnp.ones((B, S, CONFIG.hidden_size))
    with pytest.raises(ValueError, match="needs rngs"):
        model.bert.layers[-1](x, jnp.ones((B, S), jnp.int32), deterministic=False, rngs=None,
                              positions=jnp.zeros((B, 2), jnp.int32))


def _mlp_rows(model, batch, masked: bool) -> list[int]:
    """The row counts of the traced feed-forward input products (N, I), layer by layer."""
    jaxpr = str(jax.make_jaxpr(lambda: _call(model, batch, masked))())
    return [int(n) for n in re.findall(rf"f32\[(\d+),{CONFIG.intermediate_size}\] = dot_general",
                                       jaxpr)]


def test_the_last_layer_computes_only_the_masked_rows_and_cls():
    batch = _batch()
    pretraining = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    L = CONFIG.num_hidden_layers
    assert _mlp_rows(pretraining, batch, masked=False) == [B * S] * L
    assert _mlp_rows(pretraining, batch, masked=True) == [B * S] * (L - 1) + [B * (1 + P)]
    masked_lm = BertForMaskedLM(CONFIG, rngs=nnx.Rngs(0))  # no pooler: no [CLS] row
    assert _mlp_rows(masked_lm, batch, masked=True) == [B * S] * (L - 1) + [B * P]
    # maps or hidden states asked for, or a scan model: every row, the output taken from them
    full = _call(pretraining, batch, True, output_hidden_states=True)
    assert full.hidden_states[-1].shape == (B, S, CONFIG.hidden_size)
    scan = BertForPreTraining(CONFIG.replace(scan_layers=True), rngs=nnx.Rngs(0))
    jaxpr = str(jax.make_jaxpr(lambda: _call(scan, batch, True))())
    assert f"f32[{B * (1 + P)},{CONFIG.intermediate_size}]" not in jaxpr


@pytest.mark.parametrize("cls", [BertForPreTraining, BertForMaskedLM])
def test_the_mirror_computes_the_same_rows(cls):
    model = cls(CONFIG, rngs=nnx.Rngs(0))
    tmodel = to_torch_model(model)
    batch = _batch()
    t = {k: torch.from_numpy(v) for k, v in batch.items()}
    with torch.no_grad():
        fast = tmodel(t["input_ids"], t["token_type_ids"], t["attention_mask"],
                      t["masked_positions"])
        full = tmodel(t["input_ids"], t["token_type_ids"], t["attention_mask"])
    rows = t["masked_positions"].long()[:, :, None]
    assert fast.sequence_output.shape == (B, P, CONFIG.hidden_size)
    taken = torch.gather(full.mlm_logits, 1, rows.expand(-1, -1, full.mlm_logits.shape[-1]))
    assert float((fast.mlm_logits - taken).abs().max()) <= 1e-6
    if cls is BertForPreTraining:
        assert float((fast.nsp_logits - full.nsp_logits).abs().max()) <= 1e-6
    ours = _call(model, batch, masked=True)
    for name in OUTPUTS:
        if getattr(ours, name) is not None:
            diff = np.max(np.abs(np.asarray(getattr(ours, name)) - getattr(fast, name).numpy()))
            assert diff <= TOLERANCE, name


def test_no_fewer_rows_than_tokens_runs_the_whole_layer_in_both():
    """[CLS] and 5 positions in sequences of 6: computing rows would save nothing."""
    model = BertForPreTraining(CONFIG, rngs=nnx.Rngs(0))
    batch = random_batch(CONFIG, batch_size=B, seq_len=6, num_predictions=5, seed=3)
    assert _mlp_rows(model, batch, masked=True) == [B * 6] * CONFIG.num_hidden_layers
    t = {k: torch.from_numpy(v) for k, v in batch.items()}
    with torch.no_grad():
        theirs = to_torch_model(model)(t["input_ids"], t["token_type_ids"], t["attention_mask"],
                                       t["masked_positions"])
    ours = _call(model, batch, masked=True)
    assert ours.sequence_output.shape == tuple(theirs.sequence_output.shape) == (
        B, 5, CONFIG.hidden_size)
    for name in OUTPUTS:
        diff = np.max(np.abs(np.asarray(getattr(ours, name)) - getattr(theirs, name).numpy()))
        assert diff <= TOLERANCE, name


def test_output_positions_are_checked_by_name():
    model = BertModel(CONFIG, rngs=nnx.Rngs(0))
    batch = _batch()
    ids = jnp.asarray(batch["input_ids"])
    with pytest.raises(ValueError, match=r"output_positions must have shape \(batch=3"):
        model(ids, output_positions=jnp.zeros((B + 1, P), jnp.int32))
    with pytest.raises(ValueError, match="output_positions"):
        model(ids, output_positions=jnp.full((B, P), S, jnp.int32))
    out = model(ids, output_positions=jnp.asarray(batch["masked_positions"]))
    whole = model(ids).sequence_output
    rows = jnp.take_along_axis(whole, jnp.asarray(batch["masked_positions"])[:, :, None], 1)
    assert float(jnp.max(jnp.abs(out.sequence_output - rows))) <= 1e-6
    assert float(jnp.max(jnp.abs(out.pooled_output - model(ids).pooled_output))) <= 1e-6
