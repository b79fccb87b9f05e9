"""A model class declares what it is (`base_model_prefix`, `head_modules`); checkpoint code reads
the declaration instead of asking which class it was given. The declarations decide what a load
initialises fresh, what it leaves out and where the encoder's weights go; the Hugging Face name
map works by pattern under any encoder prefix.

Tolerance: exact (weights are copied, never computed).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from flax import nnx
from safetensors.numpy import load_file

from bertjax import BertConfig, BertForPreTraining, BertForSequenceClassification, BertModel
from bertjax.io.hf import hf_name, read_hf, write_hf
from bertjax.io.names import checkpoint_name, from_hf_name, to_hf_name
from bertjax.io.weights import build_model, expected_shapes, head_prefixes, model_to_numpy
from bertjax.pretrained import load_hf, save_pretrained

CONFIG = BertConfig.from_preset("tiny", vocab_size=64, id2label=("a", "b", "c"))
CLASSES = (BertModel, BertForPreTraining, BertForSequenceClassification)


def _abstract(cls):
    return nnx.eval_shape(lambda: cls(CONFIG, rngs=nnx.Rngs(0)))


@pytest.fixture(scope="module")
def pretrained_arrays():
    """A BertForPreTraining's weights under checkpoint names (the encoder under `bert.`)."""
    return model_to_numpy(BertForPreTraining(CONFIG, rngs=nnx.Rngs(1)))


def test_each_class_declares_its_encoder_and_heads():
    assert {c.__name__: (c.base_model_prefix, head_prefixes(_abstract(c))) for c in CLASSES} == {
        "BertModel": ("", ("pooler.",)),
        "BertForPreTraining": ("bert", ("mlm_head.", "nsp_head.", "bert.pooler.")),
        "BertForSequenceClassification": ("bert", ("classifier.", "bert.pooler.")),
    }
    for cls in CLASSES:  # every weight is the encoder's or a declared head's
        prefix = f"{cls.base_model_prefix}." if cls.base_model_prefix else ""
        heads = tuple(f"{h}." for h in cls.head_modules)
        assert all(n.startswith(prefix) or n.startswith(heads)
                   for n in expected_shapes(CONFIG, cls)), cls.__name__


def test_the_declared_heads_decide_what_is_initialised_fresh(pretrained_arrays):
    without_nsp = {k: v for k, v in pretrained_arrays.items() if not k.startswith("nsp_head.")}
    with pytest.warns(UserWarning, match=r"no weights for nsp_head: freshly initialised \(seed 5\)"):
        model, report = build_model(without_nsp, CONFIG, BertForPreTraining, seed=5)
    assert report.initialised_heads == ("nsp_head",) and report.seed == 5
    assert report.loaded_heads == ("mlm_head", "bert.pooler") and report.left_out_heads == ()
    fresh = model_to_numpy(BertForPreTraining(CONFIG, rngs=nnx.Rngs(5)))
    loaded = model_to_numpy(model)
    np.testing.assert_array_equal(loaded["nsp_head.weight"], fresh["nsp_head.weight"])
    np.testing.assert_array_equal(loaded["mlm_head.bias"], pretrained_arrays["mlm_head.bias"])

    class NSPRequired(BertForPreTraining):  # the same modules; nsp_head declared no head
        head_modules: ClassVar[tuple[str, ...]] = ("mlm_head",)

    with pytest.raises(ValueError, match=r"missing key nsp_head\.weight"):
        build_model(without_nsp, CONFIG, NSPRequired)
    with pytest.raises(ValueError, match="no weights for nsp_head, which BertForPreTraining needs"):
        build_model(without_nsp, CONFIG, BertForPreTraining, missing_heads="error")


def test_heads_of_other_classes_are_left_out_and_the_encoder_moves_to_the_prefix(pretrained_arrays):
    with pytest.warns(UserWarning, match=r"no weights for classifier: freshly"):
        classifier, report = build_model(pretrained_arrays, CONFIG, BertForSequenceClassification)
    assert report.model_class == "BertForSequenceClassification"
    assert report.initialised_heads == ("classifier",) and report.loaded_heads == ("bert.pooler",)
    assert report.left_out_heads == ("mlm_head", "nsp_head")
    got = model_to_numpy(classifier)
    assert not any(k.startswith(("mlm_head.", "nsp_head.")) for k in got)
    bare, report = build_model(pretrained_arrays, CONFIG, BertModel)  # no warning: no head
    assert report.loaded_heads == ("pooler",) and report.initialised_heads == ()
    bare = model_to_numpy(bare)
    for name, value in pretrained_arrays.items():
        if name.startswith("bert."):
            np.testing.assert_array_equal(got[name], value, err_msg=name)
            np.testing.assert_array_equal(bare[name.removeprefix("bert.")], value, err_msg=name)


def test_a_missing_pooler_is_fresh_and_unknown_or_encoder_keys_are_errors(pretrained_arrays):
    no_pooler = {k: v for k, v in pretrained_arrays.items() if not k.startswith("bert.pooler.")}
    with pytest.warns(UserWarning, match=r"no weights for bert\.pooler: freshly"):
        build_model(no_pooler, CONFIG, BertForPreTraining)
    with pytest.warns(UserWarning, match=r"no weights for pooler: freshly"):
        build_model(no_pooler, CONFIG, BertModel)
    with pytest.raises(ValueError, match=r"unexpected key cls\.unknown\.weight"):
        build_model({**pretrained_arrays, "cls.unknown.weight": np.zeros(2)}, CONFIG, BertModel)
    no_layer_norm = {k: v for k, v in pretrained_arrays.items()
                     if k != "bert.embeddings.layer_norm.weight"}
    with pytest.raises(ValueError, match=r"missing key embeddings\.layer_norm\.weight"):
        build_model(no_layer_norm, CONFIG, BertModel)


class TaggedEncoder(nnx.Module):
    """A head class under another encoder prefix, written only against the declarations."""

    base_model_prefix: ClassVar[str] = "encoder"
    head_modules: ClassVar[tuple[str, ...]] = ("tagger",)

    def __init__(self, config: BertConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.encoder = BertModel(config, rngs=rngs)
        self.tagger = nnx.Linear(config.hidden_size, 5, rngs=rngs)


def test_any_encoder_prefix_reads_and_writes_checkpoints(tmp_path, pretrained_arrays):
    with pytest.warns(UserWarning, match=r"no weights for tagger: freshly"):
        model, _ = build_model(pretrained_arrays, CONFIG, TaggedEncoder)
    got = model_to_numpy(model)
    np.testing.assert_array_equal(got["encoder.embeddings.word_embeddings.weight"],
                                  pretrained_arrays["bert.embeddings.word_embeddings.weight"])
    assert checkpoint_name("encoder.layers.1.output.weight", "encoder") == "bert.layers.1.output.weight"
    assert hf_name("encoder.layers.1.output.weight", "encoder") == (
        "bert.encoder.layer.1.output.dense.weight")

    write_hf(tmp_path, got, CONFIG, TaggedEncoder)  # Hugging Face's layout: the encoder at bert.
    written = set(load_file(tmp_path / "model.safetensors"))
    assert written == {hf_name(n, "encoder") for n in got}
    assert {"bert.encoder.layer.1.output.dense.weight", "tagger.weight"} <= written
    config, arrays = read_hf(tmp_path)
    assert config == CONFIG.replace(dtype=config.dtype)
    for name, value in got.items():
        if name.startswith("encoder."):
            np.testing.assert_array_equal(arrays[checkpoint_name(name, "encoder")], value)


def test_the_hugging_face_name_map_inverts_under_any_prefix():
    for cls in CLASSES:
        prefix = f"{cls.base_model_prefix}." if cls.base_model_prefix else ""
        names = set(expected_shapes(CONFIG, cls))
        names |= {n.replace("layers.1.", "layers.11.") for n in names}  # two-digit indices too
        for name in names:
            assert from_hf_name(to_hf_name(name, prefix), prefix) == name
    assert to_hf_name("bert.layers.11.attention_norm.weight") == (
        "bert.encoder.layer.11.attention.output.LayerNorm.weight")
    assert to_hf_name("layers.11.attention_norm.weight", "") == (
        "encoder.layer.11.attention.output.LayerNorm.weight")
    assert to_hf_name("mlm_head.bias") == "cls.predictions.bias"
    assert from_hf_name("cls.predictions.bias.extra") == "cls.predictions.bias.extra"  # whole name


def test_a_bare_encoder_is_written_bare_and_read_back(tmp_path):
    encoder = BertModel(CONFIG, rngs=nnx.Rngs(3))
    save_pretrained(encoder, tmp_path)
    names = set(load_file(tmp_path / "model.safetensors"))
    assert "embeddings.LayerNorm.weight" in names and not any(n.startswith("bert.") for n in names)
    back = model_to_numpy(load_hf(tmp_path, model_cls=BertModel))
    for name, value in model_to_numpy(encoder).items():
        np.testing.assert_array_equal(back[name], value, err_msg=name)


def test_models_built_from_one_class_and_config_share_nothing(pretrained_arrays):
    """The abstract model a load starts from is made once per config and class and shared
    (`bertjax.io.weights._abstract`): models built from it are independent of each other."""
    first, _ = build_model(pretrained_arrays, CONFIG, BertForPreTraining)
    second, _ = build_model(pretrained_arrays, CONFIG, BertForPreTraining)
    embeddings = second.bert.embeddings.word_embeddings.embedding
    first.bert.embeddings.word_embeddings.embedding[...] = 0.0
    assert embeddings is not first.bert.embeddings.word_embeddings.embedding
    np.testing.assert_array_equal(np.asarray(embeddings[...]),
                                  pretrained_arrays["bert.embeddings.word_embeddings.weight"])
