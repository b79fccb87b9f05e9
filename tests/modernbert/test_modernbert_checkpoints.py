"""ModernBERT checkpoints written by transformers 5 in, computed, mirrored and out again.

The fixtures (tests/fixtures/modernbert/<a|b>/<Class>/, scripts/dev/make_modernbert_fixtures.py)
are every class of two configurations, "a" (transformers' defaults: no biases but the decoder's,
[CLS] pooling, every third layer global, window 8) and "b" (every switch turned: all biases but
the decoder's, mean pooling, gelu_new and ReLU, the first layer local, RoPE bases 1000 / 50,
window 5, norm_eps 1e-6), with transformers' outputs on 21-token right-padded rows (longer than both windows)
in float32 (eager) and float64 (sdpa), and the float32 gradients of a fixed weighted sum of them.

Tolerance (the parity rule, `parity.noise`): each output within 1e-5 of transformers' float32
run, or 3 x that run's distance from its float64 run where larger, at the real tokens (the
module docstring of modernbert_fixtures says why not at padding); gradients within 1e-5 relative
to each tensor's scale.
"""

from __future__ import annotations

import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx
from modernbert_fixtures import (
    CASES,
    INPUTS,
    TOL,
    directory,
    fields,
    hf_class,
    ours,
    real_tokens,
    saved,
)

import bertjax
from bertjax.io.hf import hf_name
from bertjax.io.weights import state_to_numpy
from parity.convert import to_torch_model
from parity.noise import failures


@pytest.fixture(scope="module")
def loaded() -> dict[tuple[str, str], tuple]:
    """Each fixture through `bertjax.from_pretrained`: (model, tokenizer), loaded once."""
    return {case: bertjax.from_pretrained(directory(*case)) for case in CASES}


def _references(arrays: dict[str, np.ndarray], names: list[str]) -> tuple[dict, dict]:
    """transformers' float32 and float64 outputs of `names`, at the real tokens."""
    return (real_tokens(arrays, {n: arrays[n] for n in names}),
            real_tokens(arrays, {n: arrays[f"{n}@float64"] for n in names}))


@pytest.mark.parametrize(("config", "name"), CASES)
def test_checkpoint_gives_transformers_outputs(loaded, config, name):
    model, tokenizer = loaded[config, name]
    assert type(model).spec.name == name and model.config.model_type == "modernbert"
    assert tokenizer.family.model_type == "modernbert"
    arrays = saved(config, name)
    got = real_tokens(arrays, ours(model, arrays))
    assert failures(got, *_references(arrays, list(got)), TOL) == []


# every head once, each configuration in three (a backward pass compiles for ~15 s here)
GRADIENT_CASES = [("a", "BertModel"), ("a", "BertForMaskedLM"), ("a", "BertForQuestionAnswering"),
                  ("b", "BertForSequenceClassification"), ("b", "BertForTokenClassification"),
                  ("b", "BertForMultipleChoice")]


@pytest.mark.slow
@pytest.mark.parametrize(("config", "name"), GRADIENT_CASES)
def test_gradients_match_transformers(loaded, config, name):
    model, _ = loaded[config, name]
    arrays = saved(config, name)
    weights = {f: jnp.asarray(arrays[f"loss_weight/{f}"]) for f in fields(name).values()}
    inputs = [jnp.asarray(arrays[k]) if k in arrays else None for k in INPUTS]

    @nnx.jit
    def gradients(m, weights, inputs):
        def loss(m):
            out = m(*inputs)
            return sum(jnp.sum(getattr(out, o) * weights[t]) for o, t in fields(name).items())
        return nnx.grad(loss)(m)

    with jax.default_matmul_precision("highest"):
        grads = state_to_numpy(gradients(model, weights, inputs))
    got = {hf_name(k, type(model).base_model_prefix, "modernbert"): v for k, v in grads.items()}
    theirs = {k.removeprefix("grad/"): v for k, v in arrays.items() if k.startswith("grad/")}
    assert set(got) == set(theirs)
    worst = {k: float(np.max(np.abs(got[k] - theirs[k])) / max(1.0, np.max(np.abs(theirs[k]))))
             for k in theirs}
    assert max(worst.values()) <= TOL, sorted(worst.items(), key=lambda kv: -kv[1])[:3]


@pytest.mark.parametrize(("config", "name"), CASES)
def test_mirror_computes_the_same(loaded, config, name):
    """bert_torch's ModernBERT holds the same weights by the same names (strict load) and gives
    the same outputs, in float32 and float64."""
    model, _ = loaded[config, name]
    arrays = saved(config, name)
    got = real_tokens(arrays, ours(model, arrays))
    runs = []
    for float64 in (False, True):
        mirror = to_torch_model(model, float64=float64)
        with torch.no_grad():
            out = mirror(*(torch.from_numpy(arrays[k]) if k in arrays else None for k in INPUTS))
        runs.append(real_tokens(arrays, {t: getattr(out, o).double().numpy()
                                         for o, t in fields(name).items()}))
    assert failures(got, *runs, TOL) == []


@pytest.mark.parametrize(("config", "name"), CASES)
def test_saved_back_transformers_loads_the_same(loaded, config, name, tmp_path):
    model, tokenizer = loaded[config, name]
    bertjax.save_pretrained(model, tmp_path / "out", tokenizer)
    cls = getattr(transformers, hf_class(name))
    hf, info = cls.from_pretrained(tmp_path / "out", attn_implementation="eager",
                                   output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info
    arrays = saved(config, name)
    with torch.no_grad():
        out = hf.eval()(**{k: torch.from_numpy(arrays[k]) for k in INPUTS if k in arrays})
    names = list(fields(name).values())
    theirs = real_tokens(arrays, {f: getattr(out, f).numpy() for f in names})
    assert failures(theirs, *_references(arrays, names), TOL) == []
    written = json.loads((tmp_path / "out" / "config.json").read_text())
    assert written["cls_token_id"] == tokenizer.special.cls == hf.config.cls_token_id
    assert "position_embedding_type" not in written and "type_vocab_size" not in written
    text, pair = "Then let us go, my lord.", "What light through yonder window breaks?"
    before = transformers.AutoTokenizer.from_pretrained(directory(config, name))
    after = transformers.AutoTokenizer.from_pretrained(tmp_path / "out")
    assert after(text, pair)["input_ids"] == before(text, pair)["input_ids"]


@pytest.mark.parametrize(("config", "name"), [("b", "BertForMaskedLM"),
                                              ("a", "BertForQuestionAnswering")])
def test_a_pytorch_bin_checkpoint_loads_the_same(loaded, config, name, tmp_path):
    """A `pytorch_model.bin` (what transformers 4 wrote; 5 writes safetensors only): its whole
    state dict, the masked LM's tied decoder.weight included, reads as safetensors do."""
    hf = getattr(transformers, hf_class(name)).from_pretrained(directory(config, name))
    torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    for file in ("config.json", "tokenizer.json"):
        shutil.copy(directory(config, name) / file, tmp_path)
    model, _ = bertjax.from_pretrained(tmp_path)
    arrays = saved(config, name)
    np.testing.assert_array_equal(list(ours(model, arrays).values())[0],
                                  list(ours(loaded[config, name][0], arrays).values())[0])


def _older_config(data: dict, *, every: int | None = None) -> dict:
    """A transformers-4 config.json of `data`: the RoPE bases by their older names and, with
    `every`, global_attn_every_n_layers for layer_types."""
    old = {k: v for k, v in data.items() if k != "rope_parameters"}
    old["global_rope_theta"] = data["rope_parameters"]["full_attention"]["rope_theta"]
    old["local_rope_theta"] = data["rope_parameters"]["sliding_attention"]["rope_theta"]
    if every is not None:
        del old["layer_types"]
        old["global_attn_every_n_layers"] = every
    return old


@pytest.mark.parametrize(("config", "every"), [("a", 3), ("b", None)])
def test_a_transformers_4_config_reads_the_same(loaded, config, every, tmp_path):
    """global_attn_every_n_layers and global_rope_theta / local_rope_theta (the names before
    transformers 5's layer_types and rope_parameters): the same config, the same logits, in
    bertjax and in transformers."""
    source = directory(config, "BertForMaskedLM")
    copy = shutil.copytree(source, tmp_path / "old")
    data = json.loads((source / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps(_older_config(data, every=every)))
    model, _ = bertjax.from_pretrained(copy)
    original = loaded[config, "BertForMaskedLM"][0]
    assert model.config == original.config
    hf = transformers.ModernBertForMaskedLM.from_pretrained(copy, attn_implementation="eager")
    assert hf.config.layer_types == list(original.config.attention_types)
    assert hf.config.rope_parameters == data["rope_parameters"]
    arrays = saved(config, "BertForMaskedLM")
    np.testing.assert_array_equal(ours(model, arrays)["logits"], ours(original, arrays)["logits"])
