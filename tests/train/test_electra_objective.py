"""ELECTRA's objective (`bertjax.train.electra`): the pair shares its embeddings, the samples
replace exactly the real predictions, the loss sums are ELECTRA's, and the PyTorch mirror
(`bert_torch.electra`) computes the same loss, gradients and AdamW update from the same noise,
judged against its own float32 noise (a float64 run) as parity judges BERT's."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

from bert_torch.electra import ElectraPair as TorchPair
from bert_torch.electra import electra_loss
from bert_torch.train import make_optimizer as torch_optimizer
from bertjax import BertConfig
from bertjax.io.weights import state_to_numpy
from bertjax.runs import config as rc
from bertjax.train.electra import (
    ElectraPair,
    electra,
    electra_means,
    electra_sums,
    replace_tokens,
    sample_replacements,
)
from bertjax.train.optim import make_optimizer
from bertjax.train.schedule import OptimConfig
from parity.noise import judge

DISC = BertConfig.from_preset("tiny", vocab_size=96, model_type="electra", embedding_size=48,
                              hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                              initializer_range=0.2, max_position_embeddings=64)
GEN = rc.generator_config(rc.load(None, {"train.objective": "electra"}), DISC)
B, S, P = 3, 24, 5
TOL = 1e-5


def _batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, DISC.vocab_size, size=(B, S)).astype(np.int32)
    mask = np.ones((B, S), np.int32)
    mask[-1, S // 2:] = 0  # a padded row
    positions = np.stack([np.sort(rng.choice(np.arange(1, S // 2), P, replace=False))
                          for _ in range(B)]).astype(np.int32)
    weights = np.ones((B, P), np.float32)
    weights[0, -1] = 0.0  # an empty prediction slot
    positions[0, -1] = 0
    masked_ids = np.take_along_axis(ids, positions, 1)
    masked_ids[0, -1] = 0
    inputs = ids.copy()
    np.put_along_axis(inputs, positions, 4, 1)  # [MASK]
    inputs[0, 0] = ids[0, 0]
    return {"input_ids": inputs, "token_type_ids": np.zeros((B, S), np.int32),
            "attention_mask": mask, "masked_positions": positions, "masked_ids": masked_ids,
            "masked_weights": weights}


def _noise(seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).gumbel(size=(B, P, DISC.vocab_size)).astype(np.float32)


def test_the_pair_shares_one_set_of_embeddings_and_saves_it_once():
    pair = ElectraPair(DISC, GEN, rngs=nnx.Rngs(0))
    assert pair.generator.bert.embeddings is pair.bert.embeddings
    names = [".".join(map(str, p)) for p, _ in nnx.to_flat_state(nnx.state(pair, nnx.Param))]
    assert any(n.startswith("bert.embeddings.word_embeddings") for n in names)
    assert not any(n.startswith("generator.bert.embeddings.") for n in names)
    assert GEN.hidden_size == DISC.hidden_size // 4 and GEN.embedding_width == DISC.embedding_width


def test_samples_replace_the_real_predictions_alone_and_label_what_changed():
    batch = {k: jnp.asarray(v) for k, v in _batch().items()}
    sampled = np.asarray(batch["masked_ids"]).copy()
    sampled[1, 0] = (sampled[1, 0] + 1) % DISC.vocab_size  # one replaced, the rest equal
    sampled[0, -1] = 7  # an empty slot's sample is not written
    inputs, labels = (np.asarray(x) for x in replace_tokens(batch, jnp.asarray(sampled)))
    original = _batch()["input_ids"].copy()
    np.put_along_axis(original[1:], _batch()["masked_positions"][1:],
                      _batch()["masked_ids"][1:], 1)
    np.put_along_axis(original[:1, :], _batch()["masked_positions"][:1, :P - 1],
                      _batch()["masked_ids"][:1, :P - 1], 1)
    expected = original.copy()
    expected[1, _batch()["masked_positions"][1, 0]] = sampled[1, 0]
    assert np.array_equal(inputs, expected)
    assert labels.sum() == 1 and labels[1, _batch()["masked_positions"][1, 0]] == 1
    logits = jnp.full((B, P, DISC.vocab_size), -5.0).at[..., 9].set(5.0)
    assert np.all(np.asarray(sample_replacements(logits, jnp.zeros_like(logits))) == 9)


def _jax_loss(pair: ElectraPair, batch: dict, noise: np.ndarray):
    graphdef, params, rest = nnx.split(pair, nnx.Param, ...)
    objective = electra(50.0)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    counts = objective.counts(jbatch)

    def loss(p):
        sums = electra_sums(nnx.merge(graphdef, p, rest), jbatch, lambda shape: jnp.asarray(noise))
        return objective.loss(sums, counts), sums

    with jax.default_matmul_precision("highest"):
        (value, sums), grads = jax.jit(jax.value_and_grad(loss, has_aux=True))(params)
    return float(value), sums, state_to_numpy(grads), params


def _torch_pair(pair: ElectraPair, dtype: torch.dtype) -> TorchPair:
    mirror = TorchPair(DISC, GEN)
    weights = state_to_numpy(nnx.state(pair, nnx.Param))
    shared = {f"generator.{k}": v for k, v in weights.items() if k.startswith("bert.embeddings.")}
    mirror.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in {**weights, **shared}
                            .items()}, strict=True)
    return mirror.to(dtype).eval()


def _torch_loss(mirror: TorchPair, batch: dict, noise: np.ndarray, dtype: torch.dtype):
    tbatch = {k: torch.from_numpy(v) for k, v in batch.items()}
    tbatch["masked_weights"] = tbatch["masked_weights"].to(dtype)
    loss, parts = electra_loss(mirror, tbatch, torch.from_numpy(noise).to(dtype))
    mirror.zero_grad()
    loss.backward()
    grads = {n: p.grad.detach().numpy() for n, p in mirror.named_parameters() if p.grad is not None}
    return float(loss.detach()), grads


def test_the_loss_and_its_gradients_equal_the_pytorch_mirrors():
    pair, batch, noise = ElectraPair(DISC, GEN, rngs=nnx.Rngs(3)), _batch(), _noise()
    ours, sums, our_grads, _ = _jax_loss(pair, batch, noise)
    ref, ref_grads = _torch_loss(_torch_pair(pair, torch.float32), batch, noise, torch.float32)
    ref64, ref64_grads = _torch_loss(_torch_pair(pair, torch.float64), batch, noise, torch.float64)
    assert judge("loss", np.float32(ours), np.float32(ref), np.float64(ref64), TOL).passed, (
        ours, ref, ref64)
    means = electra_means({k: float(v) for k, v in sums.items()})
    assert 0 < means["replaced_share"] < 1 and 0 < means["rtd_accuracy"] < 1
    assert set(our_grads) == set(ref_grads)  # one set of embeddings: its gradient summed
    floor = max(float(np.abs(g).max()) for g in ref_grads.values())
    for name in our_grads:
        row = judge(f"grad.{name}", our_grads[name], ref_grads[name], ref64_grads[name], TOL,
                    relative=True, floor=floor)
        assert row.passed, row


def test_a_weight_moved_by_a_thousandth_fails_the_same_comparison():
    pair, batch, noise = ElectraPair(DISC, GEN, rngs=nnx.Rngs(3)), _batch(), _noise()
    ours, *_ = _jax_loss(pair, batch, noise)
    moved = ElectraPair(DISC, GEN, rngs=nnx.Rngs(3))  # the mirrors hold it, in both dtypes
    kernel = moved.discriminator_predictions.dense_prediction.kernel
    kernel[...] = kernel[...] * 1.001
    ref, _ = _torch_loss(_torch_pair(moved, torch.float32), batch, noise, torch.float32)
    ref64, _ = _torch_loss(_torch_pair(moved, torch.float64), batch, noise, torch.float64)
    assert not judge("loss", np.float32(ours), np.float32(ref), np.float64(ref64), TOL).passed


def test_one_adamw_update_equals_torch_optims():
    pair, batch, noise = ElectraPair(DISC, GEN, rngs=nnx.Rngs(4)), _batch(), _noise()
    optim = OptimConfig(learning_rate=1e-3, weight_decay=0.01)
    _, _, _, params = _jax_loss(pair, batch, noise)
    graphdef, _, rest = nnx.split(pair, nnx.Param, ...)
    objective = electra(50.0)
    jbatch = {k: jnp.asarray(v) for k, v in batch.items()}
    tx = make_optimizer(optim, 10)

    def loss(p):
        sums = electra_sums(nnx.merge(graphdef, p, rest), jbatch, lambda shape: jnp.asarray(noise))
        return objective.loss(sums, objective.counts(jbatch))

    with jax.default_matmul_precision("highest"):
        grads = jax.jit(jax.grad(loss))(params)
        updates, _ = tx.update(grads, tx.init(params), params)
        new = jax.tree.map(lambda p, u: p + u, params, updates)
    ours = state_to_numpy(new)
    results = {}
    for dtype in (torch.float32, torch.float64):
        mirror = _torch_pair(pair, dtype)
        optimizer, scheduler = torch_optimizer(mirror, optim, 10)
        _torch_loss(mirror, batch, noise, dtype)
        torch.nn.utils.clip_grad_norm_(mirror.parameters(), optim.clip_norm)
        optimizer.step()
        results[dtype] = {n: p.detach().numpy() for n, p in mirror.named_parameters()}
    for name, value in ours.items():
        row = judge(f"step.{name}", value, results[torch.float32][name],
                    results[torch.float64][name], TOL)
        assert row.passed, row


@pytest.mark.parametrize(("override", "message"), [
    ({"train.objective": "electra", "model.model_type": "bert"},
     "train.objective=electra trains BertForReplacedTokenDetection, a head of electra models only"),
    ({"train.objective": "electra", "model.generator_size": "0.3"},
     "model.generator_size=0.3 gives the generator a hidden size of 76.8"),
    ({"train.objective": "electra", "train.rtd_loss_weight": "0"},
     "train.rtd_loss_weight must be a number above 0, got '0'"),
    ({"train.rtd_loss_weight": "10"}, "train.rtd_loss_weight set ELECTRA's generator and loss"),
])
def test_electras_options_are_checked_when_read(override, message):
    with pytest.raises(ValueError, match=message.replace(".", r"\.")):
        rc.load(None, override)


def test_the_electra_objective_draws_its_own_samples_and_its_family_is_electras():
    assert electra().draws and not dataclasses.replace(electra(), draws=False).draws
    config = rc.load(None, {"train.objective": "electra"})
    assert (config.model_type, config.model_class) == ("electra", "BertForReplacedTokenDetection")
    assert config.to_dict()["model"]["generator_size"] == 0.25
