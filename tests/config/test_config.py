import json

import pytest

from bertjax.config import PRESETS, BertConfig


@pytest.mark.parametrize(
    ("name", "layers", "hidden", "heads"),
    [("mini", 4, 256, 4), ("small", 4, 512, 8), ("medium", 8, 512, 8), ("base", 12, 768, 12),
     ("large", 24, 1024, 16), ("tiny", 2, 128, 2)],
)
def test_presets_have_the_documented_shapes(name, layers, hidden, heads):
    c = BertConfig.from_preset(name)
    assert (c.num_hidden_layers, c.hidden_size, c.num_attention_heads) == (layers, hidden, heads)
    assert c.intermediate_size == 4 * hidden
    assert set(PRESETS) == {"tiny", "mini", "small", "medium", "base", "large"}


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"hidden_size": 100, "num_attention_heads": 3}, "hidden_size"),
        ({"vocab_size": 0}, "vocab_size"),
        ({"num_hidden_layers": -1}, "num_hidden_layers"),
        ({"intermediate_size": 0}, "intermediate_size"),
        ({"hidden_act": "swish"}, "hidden_act"),
        ({"hidden_dropout_prob": 1.5}, "hidden_dropout_prob"),
        ({"layer_norm_eps": 0.0}, "layer_norm_eps"),
        ({"pad_token_id": 5, "vocab_size": 4}, "pad_token_id"),
        ({"dtype": "float16"}, "dtype"),
    ],
)
def test_invalid_config_names_the_field(changes, field):
    with pytest.raises(ValueError, match=field):
        BertConfig(**changes)


def test_unknown_preset_lists_the_choices():
    with pytest.raises(ValueError, match="unknown preset 'huge'.*base"):
        BertConfig.from_preset("huge")


def test_hf_config_json_round_trip(tmp_path):
    c = BertConfig.from_preset("mini", vocab_size=777, hidden_act="gelu_new", layer_norm_eps=1e-7)
    c.save_hf_json(tmp_path / "config.json")
    data = json.loads((tmp_path / "config.json").read_text())
    assert data["model_type"] == "bert" and data["architectures"] == ["BertForPreTraining"]
    assert BertConfig.load_hf_json(tmp_path) == c


def test_hf_config_is_readable_by_transformers(tmp_path):
    transformers = pytest.importorskip("transformers")
    c = BertConfig.from_preset("small", vocab_size=500)
    c.save_hf_json(tmp_path / "config.json")
    hf = transformers.BertConfig.from_pretrained(tmp_path)
    for field in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "intermediate_size", "hidden_act", "layer_norm_eps", "type_vocab_size"):
        assert getattr(hf, field) == getattr(c, field), field
    assert BertConfig.from_hf_dict(hf.to_dict()) == c


def test_hf_config_refuses_other_architectures(tmp_path):
    with pytest.raises(ValueError, match="position_embedding_type 'relative_key'"):
        BertConfig.from_hf_dict({"position_embedding_type": "relative_key"})
    with pytest.raises(ValueError, match="model_type 'deberta-v2', a family bertjax does not "
                       "have; it loads bert, roberta, xlm-roberta"):
        BertConfig.from_hf_dict({"model_type": "deberta-v2"})
    with pytest.raises(FileNotFoundError, match="no config.json"):
        BertConfig.load_hf_json(tmp_path)
    (tmp_path / "config.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        BertConfig.load_hf_json(tmp_path)


@pytest.mark.slow
def test_config_module_imports_no_framework():
    import subprocess
    import sys

    code = ("import sys, bertjax, bertjax.config, bert_torch; "
            "bad = [m for m in ('jax', 'flax') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
