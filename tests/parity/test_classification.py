"""Sequence classification: bertjax, its PyTorch mirror and transformers agree on logits and on
every parameter's gradient, and checkpoints move between them.

Tolerances: logits 1e-5 max abs; gradients 1e-5 relative to each gradient's max magnitude, floored
at 1% of the model's largest gradient (as `parity.tensors`, for the same reasons).
"""

from __future__ import annotations

import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

import bert_torch
from bert_torch.losses import classification_loss as torch_classification_loss
from bertjax import BertConfig, BertForSequenceClassification
from bertjax.io.names import to_hf_name
from bertjax.io.weights import state_to_numpy
from bertjax.losses import classification_loss
from bertjax.pretrained import load_hf, save_pretrained
from parity.convert import flax_to_torch, to_torch_model, torch_to_flax
from parity.tensors import gradient_errors

TOL = 1e-5
HF = dict(vocab_size=90, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
          intermediate_size=80, max_position_embeddings=40, type_vocab_size=2,
          id2label={0: "comedy", 1: "history", 2: "tragedy"}, label2id=None)


def _transformers_model(seed: int = 0) -> transformers.BertForSequenceClassification:
    torch.manual_seed(seed)
    config = transformers.BertConfig(**{k: v for k, v in HF.items() if v is not None},
                                     attn_implementation="eager")
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorm weights, not just the init values
        for n, p in model.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, HF["vocab_size"], (4, 14)).astype(np.int64)
    mask = np.ones_like(ids)
    mask[1, 9:] = 0
    mask[3, 5:] = 0
    types = (np.arange(14)[None, :] >= 6).astype(np.int64) * mask
    return {"input_ids": ids, "token_type_ids": types, "attention_mask": mask,
            "labels": rng.integers(0, 3, 4).astype(np.int64)}


@pytest.fixture(scope="module")
def three(tmp_path_factory):
    """The same classifier in transformers, bertjax (load_hf) and bert_torch (converted)."""
    path = tmp_path_factory.mktemp("cls")
    theirs = _transformers_model()
    theirs.save_pretrained(path)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # every weight is there: no "freshly initialised" warning
        ours = load_hf(path, model_cls=BertForSequenceClassification)
    return theirs, ours, to_torch_model(ours)


def test_config_carries_the_labels(three):
    _, ours, _ = three
    assert ours.config.id2label == ("comedy", "history", "tragedy") and ours.config.num_labels == 3


@pytest.mark.slow
def test_logits_agree_three_ways(three):
    theirs, ours, mirror = three
    b = _batch()
    t = {k: torch.from_numpy(v) for k, v in b.items() if k != "labels"}
    with torch.no_grad():
        ref = theirs(**t).logits.numpy()
        mine = mirror(t["input_ids"], t["token_type_ids"], t["attention_mask"]).logits.numpy()
    with jax.default_matmul_precision("highest"):
        out = ours(b["input_ids"], b["token_type_ids"], b["attention_mask"]).logits
    assert out.shape == (4, 3) and out.dtype == jnp.float32
    assert float(np.abs(np.asarray(out) - ref).max()) <= TOL
    assert float(np.abs(mine - ref).max()) <= TOL


@pytest.mark.slow
def test_every_gradient_agrees_three_ways(three):
    theirs, ours, mirror = three
    b = _batch(1)
    graphdef, params, rest = nnx.split(ours, nnx.Param, ...)

    def loss(p):
        m = nnx.merge(graphdef, p, rest)
        return classification_loss(
            m(b["input_ids"], b["token_type_ids"], b["attention_mask"]).logits, b["labels"])

    with jax.default_matmul_precision("highest"):
        grads = state_to_numpy(jax.grad(loss)(params))

    t = {k: torch.from_numpy(v) for k, v in b.items()}
    theirs.zero_grad()
    theirs(**{k: v for k, v in t.items() if k != "labels"}, labels=t["labels"]).loss.backward()
    hf_grads = {n: p.grad.numpy() for n, p in theirs.named_parameters()}
    ref = {n: hf_grads[to_hf_name(n)] for n in grads}  # transformers' gradients, our names
    mirror.zero_grad()
    torch_classification_loss(mirror(t["input_ids"], t["token_type_ids"], t["attention_mask"]).logits,
                              t["labels"]).backward()
    mine = {n: p.grad.numpy() for n, p in mirror.named_parameters()}
    assert len(grads) == len(list(theirs.parameters())) == 2 * 2 * 8 + 5 + 2 + 2
    worst_ours = max(gradient_errors(grads, ref).values())
    worst_mirror = max(gradient_errors(mine, ref).values())
    assert worst_ours <= TOL and worst_mirror <= TOL, (worst_ours, worst_mirror)


def test_export_reloads_in_transformers_with_identical_logits(three, tmp_path):
    _, ours, _ = three
    save_pretrained(ours, tmp_path / "out")
    reloaded, info = transformers.BertForSequenceClassification.from_pretrained(
        tmp_path / "out", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]
    assert reloaded.config.id2label == {0: "comedy", 1: "history", 2: "tragedy"}
    b = _batch(2)
    t = {k: torch.from_numpy(v) for k, v in b.items() if k != "labels"}
    with torch.no_grad():
        ref = reloaded.eval()(**t).logits.numpy()
    with jax.default_matmul_precision("highest"):
        out = np.asarray(ours(b["input_ids"], b["token_type_ids"], b["attention_mask"]).logits)
    assert float(np.abs(out - ref).max()) <= TOL


def test_mirror_round_trip_and_structure():
    config = BertConfig.from_preset("tiny", vocab_size=64, id2label=("a", "b", "c", "d"))
    model = BertForSequenceClassification(config, rngs=nnx.Rngs(3))
    sd = flax_to_torch(model)
    assert sd["classifier.weight"].shape == (4, 128)
    back = torch_to_flax(sd, config, BertForSequenceClassification)
    again = flax_to_torch(back)
    assert all(torch.equal(sd[k], again[k]) for k in sd)
    tmodel = bert_torch.BertForSequenceClassification(config)
    tmodel.load_state_dict(sd, strict=True)
    flax_modules = {".".join(map(str, p)) for p, _ in nnx.iter_modules(model) if p}
    assert flax_modules == {n for n, _ in tmodel.named_modules() if n}


@pytest.mark.slow
def test_pretraining_checkpoint_gives_a_fresh_classifier_and_says_so(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(**{k: v for k, v in HF.items() if v is not None})
    transformers.BertForPreTraining(config).save_pretrained(tmp_path)
    with pytest.warns(UserWarning, match="no weights for classifier: freshly initialised"):
        model = load_hf(tmp_path, model_cls=BertForSequenceClassification)
    assert model.config.num_labels == 3
    # a token-classification checkpoint's `classifier` is another head: not taken for ours
    transformers.BertForTokenClassification(config).save_pretrained(tmp_path / "tok")
    with pytest.warns(UserWarning, match="classifier: freshly initialised"):
        load_hf(tmp_path / "tok", model_cls=BertForSequenceClassification)
