"""Strict conversion between bertjax and bert_torch: exact round trips and named errors."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from use_helpers import family_config

import bert_torch
import bertjax
from bertjax import BertConfig
from bertjax.heads import MODEL_CLASSES
from bertjax.io.weights import expected_shapes
from parity.convert import flax_to_torch, torch_to_flax

CONFIG = BertConfig.from_preset("tiny", vocab_size=97, intermediate_size=200)


def _flax_arrays(model):
    return {".".join(map(str, p)): np.asarray(v[...])
            for p, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_flax_torch_flax_round_trip_is_exact(name):
    config = family_config(name, CONFIG)
    model = MODEL_CLASSES[name](config, rngs=nnx.Rngs(7))
    back = torch_to_flax(flax_to_torch(model), config, MODEL_CLASSES[name])
    before, after = _flax_arrays(model), _flax_arrays(back)
    assert before.keys() == after.keys()
    for k in before:
        np.testing.assert_array_equal(before[k], after[k], err_msg=k)


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_torch_flax_torch_round_trip_is_exact(name):
    config = family_config(name, CONFIG)
    torch.manual_seed(3)
    tmodel = getattr(bert_torch, name)(config)
    sd = tmodel.state_dict()
    back = flax_to_torch(torch_to_flax(sd, config, MODEL_CLASSES[name]))
    assert set(back) == set(sd)
    for k in sd:
        assert back[k].dtype == sd[k].dtype and torch.equal(sd[k], back[k]), k
    getattr(bert_torch, name)(config).load_state_dict(back, strict=True)


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_expected_shapes_match_the_torch_module_exactly(name):
    config = family_config(name, CONFIG)
    tmodel = getattr(bert_torch, name)(config)
    assert expected_shapes(config, getattr(bertjax, name)) == {
        k: tuple(v.shape) for k, v in tmodel.state_dict().items()}
    # the mirror declares what it is as the Flax class does
    for attr in ("base_model_prefix", "head_modules"):
        assert getattr(type(tmodel), attr) == getattr(getattr(bertjax, name), attr), attr


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_modules_mirror_each_other_name_for_name(name):
    """Every submodule, dropout included, sits at the same path with the same class name in both
    trees (only the layer container's differs: nnx.List / nn.ModuleList)."""
    config = family_config(name, CONFIG)
    fmodel = MODEL_CLASSES[name](config, rngs=nnx.Rngs(0))
    tmodel = getattr(bert_torch, name)(config)
    flax_modules = {".".join(map(str, p)): type(m).__name__ for p, m in nnx.iter_modules(fmodel) if p}
    torch_modules = {n: type(m).__name__ for n, m in tmodel.named_modules() if n}
    assert flax_modules.keys() == torch_modules.keys()
    head_dropout = int(hasattr(fmodel, "dropout"))  # the classifiers' own
    assert (sum(name.endswith("dropout") for name in flax_modules)
            == 1 + 3 * CONFIG.num_hidden_layers + head_dropout)
    renamed = {("List", "ModuleList")}
    assert {(f, torch_modules[n]) for n, f in flax_modules.items() if f != torch_modules[n]} == renamed


def _sd():
    torch.manual_seed(0)
    return dict(bert_torch.BertForPreTraining(CONFIG).state_dict())


def test_missing_key_is_named_with_its_shape():
    sd = _sd()
    del sd["bert.layers.1.attention.key.weight"]
    with pytest.raises(ValueError, match=r"missing key bert\.layers\.1\.attention\.key\.weight "
                                         r"\(expected shape \(128, 128\)\)"):
        torch_to_flax(sd, CONFIG)


def test_extra_key_is_named():
    sd = _sd()
    sd["bert.layers.0.attention.rotary.weight"] = torch.zeros(3)
    with pytest.raises(ValueError, match=r"unexpected key bert\.layers\.0\.attention\.rotary"
                                         r"\.weight \(shape \(3,\)\)"):
        torch_to_flax(sd, CONFIG)


def test_wrong_shape_names_expected_and_found():
    sd = _sd()
    sd["bert.layers.0.intermediate.weight"] = torch.zeros(201, 128)
    with pytest.raises(ValueError, match=r"wrong shape for bert\.layers\.0\.intermediate\.weight: "
                                         r"expected \(200, 128\), found \(201, 128\)"):
        torch_to_flax(sd, CONFIG)


def test_every_problem_is_listed_at_once():
    sd = _sd()
    del sd["nsp_head.bias"]
    sd["extra"] = torch.zeros(1)
    sd["mlm_head.bias"] = torch.zeros(5)
    with pytest.raises(ValueError, match="3 problems") as err:
        torch_to_flax(sd, CONFIG)
    for name in ("nsp_head.bias", "extra", "mlm_head.bias"):
        assert name in str(err.value)


def test_different_layer_count_is_explained():
    sd = _sd()
    with pytest.raises(ValueError, match="weights have 2 layers but the config asks for "
                                         "num_hidden_layers=3") as err:
        torch_to_flax(sd, CONFIG.replace(num_hidden_layers=3))
    assert "missing key bert.layers.2.attention.query.weight" in str(err.value)


def test_config_that_does_not_match_names_every_tensor():
    sd = _sd()
    with pytest.raises(ValueError, match=r"wrong shape for bert\.embeddings\.word_embeddings"
                                         r"\.weight: expected \(98, 128\), found \(97, 128\)"):
        torch_to_flax(sd, CONFIG.replace(vocab_size=98))


@pytest.mark.slow
def test_numpy_state_dict_is_accepted_and_converted_model_runs():
    sd = {k: v.numpy() for k, v in _sd().items()}
    model = torch_to_flax(sd, CONFIG)
    out = model(jnp.ones((1, 4), jnp.int32))
    assert out.mlm_logits.shape == (1, 4, 97)
    assert all(x.dtype == jnp.float32 for x in jax.tree.leaves(nnx.state(model)))
