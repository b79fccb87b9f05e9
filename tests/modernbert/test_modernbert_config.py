"""ModernBERT's settings: every one transformers reads honoured or refused in one line, the
config.json bertjax writes read by transformers as meant, BERT's families refusing ModernBERT's
fields, and the bad inputs a user meets (another model_type, weights that disagree with the
config, a sequence past the positions)."""

from __future__ import annotations

import dataclasses
import json
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import transformers
from flax import nnx
from modernbert_fixtures import config, directory

import bertjax
from bertjax.cli.main import main
from bertjax.config import BertConfig
from bertjax.config.families import FAMILIES
from bertjax.config.modernbert import FIELDS, INERT, NAMES, SHAPES, layer_pattern
from bertjax.errors import InputError

FIXTURES_FAMILIES = directory("a", "BertModel").parents[2] / "families"
OURS = {f.name for f in dataclasses.fields(BertConfig)}
RENAMED = {theirs for _, theirs in NAMES}
READ = {"rope_parameters"}  # into global_rope_theta and local_rope_theta (read_config)
# read by transformers from a config.json's extra keys (the names before transformers 5)
OLDER = {"global_attn_every_n_layers": 2, "global_rope_theta": 500.0, "local_rope_theta": 20.0}


def test_every_setting_transformers_reads_is_taken_or_inert():
    """ModernBertConfig's own settings, each a BertConfig field (under its name or `NAMES`'),
    read into fields, or inert with a reason (`config.modernbert.INERT`); a setting a later
    transformers adds fails here until it is placed."""
    settings = set(transformers.ModernBertConfig.__annotations__)
    unplaced = settings - OURS - RENAMED - READ - set(INERT)
    assert unplaced == set(), unplaced
    assert set(FIELDS) <= OURS and all(INERT.values())


def test_transformers_reads_the_config_bertjax_writes_as_meant(tmp_path):
    c = config(norm_bias=True, attention_bias=True, mlp_bias=True, decoder_bias=False,
               classifier_bias=True, classifier_pooling="mean", classifier_activation="relu",
               hidden_act="gelu_new", layer_types=("sliding_attention", "full_attention") * 2,
               global_rope_theta=1234.0, local_rope_theta=56.0, local_attention=7,
               mlp_dropout=0.25, layer_norm_eps=1e-7, hidden_dropout_prob=0.125,
               attention_probs_dropout_prob=0.375, initializer_cutoff_factor=3.0)
    c.save_hf_json(tmp_path / "config.json", "BertForMaskedLM")
    hf = transformers.ModernBertConfig.from_pretrained(tmp_path)
    assert hf.architectures == ["ModernBertForMaskedLM"]
    assert (hf.norm_bias, hf.attention_bias, hf.mlp_bias, hf.decoder_bias, hf.classifier_bias) == (
        True, True, True, False, True)
    assert (hf.classifier_pooling, hf.classifier_activation, hf.hidden_activation) == (
        "mean", "relu", "gelu_new")
    assert hf.layer_types == list(c.layer_types) and hf.sliding_window == 3
    assert hf.rope_parameters["full_attention"]["rope_theta"] == 1234.0
    assert hf.rope_parameters["sliding_attention"]["rope_theta"] == 56.0
    assert (hf.mlp_dropout, hf.embedding_dropout, hf.attention_dropout, hf.norm_eps) == (
        0.25, 0.125, 0.375, 1e-7)
    assert hf.initializer_cutoff_factor == 3.0 and hf.classifier_dropout == 0.0
    assert BertConfig.from_hf_dict(hf.to_dict()) == c


def test_the_default_layer_pattern_reads_as_none_and_writes_out():
    c = config(num_hidden_layers=7)
    assert c.layer_types is None and c.attention_types == layer_pattern(7)
    assert c.to_hf_dict()["layer_types"] == ["full_attention", "sliding_attention",
                                             "sliding_attention"] * 2 + ["full_attention"]
    assert BertConfig.from_hf_dict(c.to_hf_dict()).layer_types is None


def test_the_older_names_are_read():
    c = BertConfig.from_hf_dict({"model_type": "modernbert", "num_hidden_layers": 5,
                                 "vocab_size": 99, "pad_token_id": 0, **OLDER})
    hf = transformers.ModernBertConfig(num_hidden_layers=5, **OLDER)
    assert list(c.attention_types) == hf.layer_types
    assert c.global_rope_theta == hf.rope_parameters["full_attention"]["rope_theta"] == 500.0
    assert c.local_rope_theta == hf.rope_parameters["sliding_attention"]["rope_theta"] == 20.0


def test_a_config_json_without_settings_has_transformers_defaults():
    c = BertConfig.from_hf_dict({"model_type": "modernbert"})
    hf = transformers.ModernBertConfig()
    assert (c.vocab_size, c.hidden_size, c.num_hidden_layers, c.intermediate_size,
            c.max_position_embeddings, c.pad_token_id, c.layer_norm_eps, c.local_attention) == (
        hf.vocab_size, hf.hidden_size, hf.num_hidden_layers, hf.intermediate_size,
        hf.max_position_embeddings, hf.pad_token_id, hf.norm_eps, hf.local_attention)
    assert list(c.attention_types) == hf.layer_types
    assert (c.hidden_dropout_prob, c.attention_probs_dropout_prob, c.mlp_dropout,
            c.classifier_dropout_prob) == (0.0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("size", ["base", "large"])
def test_the_released_shapes_are_transformers_defaults_and_large(size):
    """The presets base and large of a ModernBERT (`config.modernbert.preset`): base is
    ModernBertConfig's defaults (ModernBERT-base's config); large is ModernBERT-large's
    published shape (28 layers of 1024, 16 heads, 2624 wide) with the same vocabulary,
    positions, window, norm and rotary bases."""
    c = BertConfig.from_preset(size, model_type="modernbert")
    assert {k: getattr(c, k) for k in SHAPES[size]} == SHAPES[size]
    hf = transformers.ModernBertConfig(**SHAPES[size])
    rope = {t: hf.rope_parameters[t]["rope_theta"] for t in ("full_attention", "sliding_attention")}
    assert (c.vocab_size, c.max_position_embeddings, c.layer_norm_eps, c.local_attention,
            c.global_rope_theta, c.local_rope_theta) == (
        hf.vocab_size, hf.max_position_embeddings, hf.norm_eps, hf.local_attention,
        rope["full_attention"], rope["sliding_attention"])
    if size == "base":
        default = transformers.ModernBertConfig()
        assert (c.hidden_size, c.num_hidden_layers, c.num_attention_heads,
                c.intermediate_size) == (default.hidden_size, default.num_hidden_layers,
                                         default.num_attention_heads, default.intermediate_size)
    assert list(c.attention_types) == hf.layer_types
    assert c.attention_types[0] == c.attention_types[-1] == "full_attention"  # 22, 28: 3k + 1


def test_the_smaller_presets_keep_their_sizes_with_modernberts_feed_forward_share():
    """mini (the pre-training default) and the others: PRESETS' layers, width and heads, the
    feed-forward 1.5x the width (ModernBERT-base's 1152 / 768), ModernBERT's norm epsilon; a
    BERT's presets unchanged."""
    mini = BertConfig.from_preset("mini", model_type="modernbert")
    assert (mini.num_hidden_layers, mini.hidden_size, mini.num_attention_heads,
            mini.intermediate_size, mini.layer_norm_eps) == (4, 256, 4, 384, 1e-5)
    tiny = BertConfig.from_preset("tiny", model_type="modernbert", vocab_size=99)
    assert (tiny.intermediate_size, tiny.max_position_embeddings, tiny.vocab_size) == (192, 128, 99)
    bert = BertConfig.from_preset("mini")
    assert (bert.intermediate_size, bert.layer_norm_eps) == (1024, 1e-12)


REFUSED = [
    ({"tie_word_embeddings": False}, "untied masked-LM decoder"),
    ({"rope_scaling": {"rope_type": "linear", "factor": 2.0}}, "unscaled rotary"),
    ({"rope_parameters": {"full_attention": {"rope_type": "yarn", "rope_theta": 1.0,
                                             "factor": 4.0}}}, "default rotary"),
    ({"head_dim": 16}, "head_dim 16"),
    ({"layer_types": ["full_attention", "causal"]}, "layer_types must give one of"),
    ({"global_attn_every_n_layers": 0}, "positive integer"),
    ({"classifier_pooling": "max"}, "classifier_pooling 'max'"),
    ({"classifier_activation": "silu"}, "classifier_activation 'silu'"),
    ({"hidden_activation": "silu"}, "hidden_act 'silu'"),
    ({"local_attention": 0}, "local_attention must be a positive integer"),
]


@pytest.mark.parametrize(("change", "message"), REFUSED)
def test_settings_bertjax_does_not_compute_are_refused_in_one_line(change, message):
    data = {"model_type": "modernbert", "num_hidden_layers": 2, "vocab_size": 99,
            "pad_token_id": 0, **change}
    with pytest.raises(InputError, match=message) as err:
        BertConfig.from_hf_dict(data)
    assert "\n" not in str(err.value)


@pytest.mark.slow
def test_remat_gives_the_loop_gradients():
    ids = jnp.asarray(np.random.default_rng(0).integers(1, 97, size=(2, 16)), jnp.int32)

    def grads(remat: bool) -> list[np.ndarray]:
        model = bertjax.BertForMaskedLM(config(remat=remat, num_hidden_layers=2),
                                        rngs=nnx.Rngs(0))
        with jax.default_matmul_precision("highest"):
            state = nnx.jit(nnx.grad(lambda m: m(ids).mlm_logits.sum()))(model)
        return [np.asarray(x) for x in jax.tree.leaves(state)]

    for a, b in zip(grads(False), grads(True), strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-5 * max(1.0, np.abs(a).max()))


@pytest.mark.parametrize("field", ["norm_bias", "local_attention", "layer_types",
                                   "classifier_pooling"])
def test_the_other_families_refuse_modernbert_fields(field):
    value = {"norm_bias": True, "local_attention": 64, "layer_types": ("full_attention",) * 2,
             "classifier_pooling": "mean"}[field]
    with pytest.raises(InputError, match=f"BertConfig.{field} is modernbert's setting; a "
                                         "roberta has none"):
        BertConfig(model_type="roberta", **{field: value})
    assert field not in BertConfig(model_type="roberta").to_hf_dict()


@pytest.mark.parametrize("model_type", ["eurobert", "deberta-v2", "gpt2"])
def test_a_model_type_bertjax_lacks_is_one_line_listing_what_it_has(model_type, tmp_path, capsys):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": model_type}))
    with pytest.raises(InputError) as err:
        bertjax.from_pretrained(tmp_path)
    assert f"model_type {model_type!r}" in str(err.value)
    assert ", ".join(FAMILIES) in str(err.value) and "modernbert" in str(err.value)
    assert main(["fill-mask", str(tmp_path), "a [MASK]"]) == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and "modernbert" in stderr


@pytest.mark.parametrize(("change", "first"), [
    ({"intermediate_size": 18},
     "wrong shape for bert.layers.0.mlp.wi.weight: expected (36, 30), found (34, 30)"),
    ({"mlp_bias": True}, "missing key bert.layers.0.mlp.wi.bias (expected shape (34,))"),
    ({"norm_bias": True}, "missing key bert.embeddings.norm.bias (expected shape (30,))"),
])
def test_weights_that_disagree_with_the_config_name_the_first_tensor(change, first, tmp_path,
                                                                     capsys):
    copy = shutil.copytree(directory("a", "BertForMaskedLM"), tmp_path / "bad")
    data = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**data, **change}))
    with pytest.raises(InputError, match="does not match the model config") as err:
        bertjax.from_pretrained(copy)
    assert str(err.value).splitlines()[1].strip() == first
    assert main(["fill-mask", str(copy), "a [MASK]"]) == 2
    stderr = capsys.readouterr().err.strip()
    assert len(stderr.splitlines()) == 1 and first in stderr


def test_a_sequence_past_max_position_embeddings_says_so():
    model = bertjax.BertForMaskedLM(config(max_position_embeddings=16), rngs=nnx.Rngs(0))
    ids = jnp.ones((1, 17), jnp.int32)
    with pytest.raises(InputError, match=r"seq_len 17 > max_position_embeddings \(16\)"):
        model(ids)
    np.testing.assert_array_equal(model(ids[:, :16]).mlm_logits.shape, (1, 16, 97))


def test_a_loader_takes_overrides_of_modernbert_settings_and_refuses_shape_ones():
    """Settings that change how a ModernBERT computes, not its weights' shapes, may be
    overridden when loading; a bias switch sets shapes, which the checkpoint decides."""
    path = directory("b", "BertForSequenceClassification")
    model, _ = bertjax.from_pretrained(path, classifier_pooling="cls", local_attention=9)
    assert (model.config.classifier_pooling, model.config.local_attention) == ("cls", 9)
    with pytest.raises(InputError, match="norm_bias sets the shapes of the weights"):
        bertjax.from_pretrained(path, norm_bias=False)
    with pytest.raises(InputError, match=r"classifier_pooling='max'.*not one of"):
        bertjax.from_pretrained(path, classifier_pooling="max")


def test_weights_of_another_family_under_a_modernbert_config_are_refused(tmp_path):
    """The weights' names say their family (`bertjax.io.family_check`): a RoBERTa's under a
    ModernBERT config.json and a ModernBERT's under a BERT one are refused, naming both; the
    names every family shares (a classifier's, a bare encoder's) decide nothing."""
    from bertjax.io.family_check import check_weights_family

    roberta = FIXTURES_FAMILIES / "roberta" / "RobertaForMaskedLM"
    copy = shutil.copytree(roberta, tmp_path / "roberta")
    data = json.loads((copy / "config.json").read_text())
    (copy / "config.json").write_text(json.dumps({**data, "model_type": "modernbert"}))
    with pytest.raises(InputError, match="says model_type 'modernbert', but the weights beside it "
                                         "have names only roberta or xlm-roberta"):
        bertjax.from_pretrained(copy)
    with pytest.raises(InputError, match=r"model_type 'bert', but .* only modernbert "
                                         r"checkpoints have \(head\.dense\.weight, model\."):
        check_weights_family(["model.layers.0.attn.Wqkv.weight", "head.dense.weight",
                              "classifier.weight"], "bert", "config.json")
    for model_type in FAMILIES:
        check_weights_family(["classifier.weight", "qa_outputs.bias",
                              "embeddings.word_embeddings.weight"], model_type, "config.json")
    check_weights_family(["layers.0.attn.Wqkv.weight", "final_norm.weight", "head.norm.weight",
                          "decoder.bias"], "modernbert", "config.json")
