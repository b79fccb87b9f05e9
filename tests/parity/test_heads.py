"""Every BERT class of transformers, in bertjax and bert_torch: transformers -> bertjax ->
transformers with no missing or unexpected key, and the same outputs and gradients as
transformers' class of the same name and as the `bert_torch` mirror.

Shapes are odd on purpose: hidden 48 with 3 heads, intermediate 70, 99 words, 3 token types,
3 labels, padded rows (multiple choice: 3 examples x 2 choices). Biases and LayerNorm weights are
perturbed so a weight loaded in the wrong place shows.

Tolerance (float32): 1e-5 max abs diff of every output; gradients 1e-5 of each parameter's
largest gradient (at least 1): with a loss reaching every logit they run to ~30, where 1e-5
absolute would ask for better than float32's 7 digits. Each is raised to 3 x the reference's own
float32 noise where that is larger (the parity rule, `parity.noise`: the reference - transformers
or the mirror - runs in float64 too).
"""

from __future__ import annotations

import copy
import json
import logging
import zlib

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

import bert_torch
from bertjax import BertConfig
from bertjax.config.heads import MODELS
from bertjax.heads import MODEL_CLASSES
from bertjax.io.hf import hf_name
from bertjax.io.weights import state_to_numpy
from bertjax.pretrained import load_hf, save_pretrained
from parity.convert import to_torch_model
from parity.noise import failures

TOL = 1e-5
HF_CONFIG = dict(vocab_size=99, hidden_size=48, num_hidden_layers=2, num_attention_heads=3,
                 intermediate_size=70, max_position_embeddings=40, type_vocab_size=3,
                 hidden_act="gelu", num_labels=3, initializer_range=0.1)
# BERT's classes (ELECTRA's discriminator, an ELECTRA head only, is held against transformers'
# ElectraForPreTraining in tests/model/test_families.py)
CLASSES = sorted(n for n in MODEL_CLASSES if not MODELS[n].families)


def _hf_model(name: str, seed: int = 0):
    torch.manual_seed(seed)
    labels = {"num_labels": 2} if name == "BertForQuestionAnswering" else {}  # start, end
    config = transformers.BertConfig(**{**HF_CONFIG, **labels}, attn_implementation="eager")
    model = getattr(transformers, name)(config).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(name: str, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (3, 2, 11) if name == "BertForMultipleChoice" else (3, 11)
    ids = rng.integers(1, HF_CONFIG["vocab_size"], shape)
    types = rng.integers(0, HF_CONFIG["type_vocab_size"], shape)
    mask = np.ones(shape, np.int64)
    mask[1, ..., 7:] = 0  # padded rows
    mask[2, ..., 3:] = 0
    return ids, types, mask


def _weights(name: str, shape: tuple[int, ...], field: str) -> np.ndarray:
    """A fixed random projection per output, so the loss reaches every element."""
    return np.random.default_rng(zlib.crc32(f"{name}.{field}".encode())).normal(size=shape)


def _ours(model, batch, name, grads=False):
    """(outputs by our field, gradients by Hugging Face name) of a bertjax model."""
    fields = MODELS[name].hf_outputs

    def loss(m):
        out = m(*(jnp.asarray(x) for x in batch))
        total = sum(jnp.sum(getattr(out, f) * _weights(name, getattr(out, f).shape, f))
                    for f in fields)
        return total, {f: getattr(out, f) for f in fields}

    (_, outs), g = nnx.value_and_grad(loss, has_aux=True)(model)
    prefix = type(model).base_model_prefix
    return ({f: np.asarray(v) for f, v in outs.items()},
            {hf_name(k, prefix): v for k, v in state_to_numpy(g).items()})


def _theirs(model, batch, name, fields):
    """(outputs, gradients by parameter name) of a PyTorch model whose output fields are
    `fields` (ours -> its own)."""
    model.zero_grad()
    ids, types, mask = (torch.from_numpy(x) for x in batch)
    out = model(ids, token_type_ids=types, attention_mask=mask)  # transformers' order differs
    values = {f: getattr(out, theirs) for f, theirs in fields.items()}
    total = sum(torch.sum(v * torch.from_numpy(_weights(name, tuple(v.shape), f)))
                for f, v in values.items())
    total.backward()
    return ({f: v.detach().numpy() for f, v in values.items()},
            {n: p.grad.numpy() for n, p in model.named_parameters() if p.grad is not None})


def _against(ours: tuple[dict, dict], reference, reference64, batch, name, fields,
             rename=lambda k: k) -> list[str]:
    """The outputs and gradients (renamed by `rename`) of ours that fail the parity rule
    against a PyTorch `reference`, its float64 twin measuring its noise (none: [])."""
    ref32 = _theirs(reference, batch, name, fields)
    ref64 = _theirs(reference64, batch, name, fields)
    grads32, grads64 = ({rename(k): v for k, v in g.items()} for g in (ref32[1], ref64[1]))
    return (failures(ours[0], ref32[0], ref64[0], TOL)
            + failures(ours[1], grads32, grads64, TOL, relative=True, floor=1.0))


@pytest.fixture(scope="module")
def round_trips(tmp_path_factory):
    """Per class: the transformers model, its bertjax load and the re-export's loading info."""
    out = {}
    for name in CLASSES:
        hf = _hf_model(name)
        src = tmp_path_factory.mktemp(name)
        hf.save_pretrained(src / "in")
        ours = load_hf(src / "in")  # the class config.json names
        save_pretrained(ours, src / "out")
        back, info = getattr(transformers, name).from_pretrained(
            src / "out", attn_implementation="eager", output_loading_info=True)
        out[name] = (hf, ours, back.eval(), info)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_transformers_to_bertjax_to_transformers_loses_nothing(round_trips, name):
    hf, ours, back, info = round_trips[name]
    assert type(ours).__name__ == name  # config.json's architecture decides the class
    assert {k: v for k, v in info.items() if v} == {}, info  # nothing missing or unexpected
    original, reloaded = hf.state_dict(), back.state_dict()
    assert set(original) == set(reloaded)
    for key in original:
        np.testing.assert_array_equal(reloaded[key].numpy(), original[key].numpy(), err_msg=key)


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_outputs_and_gradients_equal_transformers(round_trips, name):
    hf, ours, _, _ = round_trips[name]
    batch = _batch(name)
    hf64 = copy.deepcopy(hf).double()
    # the tied decoder's gradient included
    assert _against(_ours(ours, batch, name), hf, hf64, batch, name, MODELS[name].hf_outputs) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_outputs_and_gradients_equal_the_torch_mirror(round_trips, name):
    _, ours, _, _ = round_trips[name]
    mirror = to_torch_model(ours)
    assert type(mirror) is getattr(bert_torch, name)
    batch = _batch(name, seed=1)
    prefix = type(ours).base_model_prefix
    assert _against(_ours(ours, batch, name), mirror, to_torch_model(ours, float64=True), batch,
                    name, {f: f for f in MODELS[name].hf_outputs},
                    rename=lambda k: hf_name(k, prefix)) == []


@pytest.mark.slow
def test_a_head_loaded_as_another_keeps_the_encoder_and_names_both_heads(round_trips, caplog,
                                                                         tmp_path):
    hf, qa, _, _ = round_trips["BertForQuestionAnswering"]
    hf.save_pretrained(tmp_path / "qa")
    with caplog.at_level(logging.INFO, logger="bertjax.io"), pytest.warns(
            UserWarning, match=r"no weights for token_classifier: freshly initialised \(seed 3\)"):
        tagger = load_hf(tmp_path / "qa", model_cls=MODEL_CLASSES["BertForTokenClassification"],
                         seed=3)
    assert "left out the weights of qa_outputs (BertForTokenClassification has no such head)" in (
        caplog.text)
    batch = _batch("BertForTokenClassification")
    np.testing.assert_array_equal(np.asarray(tagger(*map(jnp.asarray, batch)).sequence_output),
                                  np.asarray(qa(*map(jnp.asarray, batch)).sequence_output))
    with pytest.raises(ValueError, match="no weights for token_classifier, which "
                                         "BertForTokenClassification needs here"):
        load_hf(tmp_path / "qa", model_cls=MODEL_CLASSES["BertForTokenClassification"],
                missing_heads="error")


def test_one_classifier_name_three_heads_by_architecture(round_trips, tmp_path):
    """transformers names the sequence, token and choice classifiers all `classifier`: the
    checkpoint's architecture decides which head it is, so none loads as another."""
    hf, _, _, _ = round_trips["BertForSequenceClassification"]
    hf.save_pretrained(tmp_path / "seq")
    with pytest.warns(UserWarning, match="no weights for token_classifier"):
        tagger = load_hf(tmp_path / "seq", model_cls=MODEL_CLASSES["BertForTokenClassification"])
    fresh = MODEL_CLASSES["BertForTokenClassification"](tagger.config, rngs=nnx.Rngs(0))
    np.testing.assert_array_equal(np.asarray(tagger.token_classifier.kernel[...]),
                                  np.asarray(fresh.token_classifier.kernel[...]))


def test_config_naming_another_head_than_the_weights_hold_is_refused(round_trips, tmp_path):
    hf, _, _, _ = round_trips["BertForSequenceClassification"]
    hf.save_pretrained(tmp_path / "ckpt")
    config = json.loads((tmp_path / "ckpt" / "config.json").read_text())
    config["architectures"] = ["BertForQuestionAnswering"]
    (tmp_path / "ckpt" / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json names BertForQuestionAnswering, but the "
                                         r"weights hold no qa_outputs and hold classifier"):
        load_hf(tmp_path / "ckpt")


def test_multiple_choice_inputs_must_be_three_dimensional():
    config = BertConfig.from_preset("tiny", vocab_size=32)
    model = MODEL_CLASSES["BertForMultipleChoice"](config, rngs=nnx.Rngs(0))
    with pytest.raises(ValueError, match=r"input_ids of shape \(batch, num_choices, seq_len\)"):
        model(jnp.ones((2, 5), jnp.int32))
    with pytest.raises(ValueError, match="attention_mask must have the shape of input_ids"):
        model(jnp.ones((2, 3, 5), jnp.int32), attention_mask=jnp.ones((2, 5), jnp.int32))


def test_gradient_check_can_fail(round_trips):
    """The gradient comparison sees one wrong weight: a perturbed head bias moves the outputs."""
    hf, ours, _, _ = round_trips["BertForQuestionAnswering"]
    broken = nnx.clone(ours)
    broken.qa_outputs.bias[...] = broken.qa_outputs.bias[...] + 1e-3
    batch = _batch("BertForQuestionAnswering")
    fields = MODELS["BertForQuestionAnswering"].hf_outputs
    wrong = _against(_ours(broken, batch, "BertForQuestionAnswering"), hf,
                     copy.deepcopy(hf).double(), batch, "BertForQuestionAnswering", fields)
    assert any(line.startswith(("start_logits:", "end_logits:")) for line in wrong), wrong
