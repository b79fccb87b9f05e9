"""Hugging Face interop: transformers checkpoints in, bertjax checkpoints out, safe loading.

Tolerance: 1e-5 max abs diff of MLM and NSP logits against transformers itself, or 3 x
transformers' own float32 noise (its distance from a float64 run) where that is larger
(`parity.noise`).
"""

from __future__ import annotations

import copy
import pickle
import subprocess
import sys
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from flax import nnx

from bertjax import BertConfig, BertForPreTraining
from bertjax.errors import InputError
from bertjax.pretrained import load_hf, save_pretrained
from parity.noise import judge

TOL = 1e-5

HF_CONFIGS = {
    "small": dict(vocab_size=120, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                  intermediate_size=128, max_position_embeddings=64),
    # odd sizes everywhere, three token types, a tanh GELU and a different LayerNorm eps
    "odd": dict(vocab_size=99, hidden_size=48, num_hidden_layers=3, num_attention_heads=3,
                intermediate_size=70, max_position_embeddings=37, type_vocab_size=3,
                hidden_act="gelu_new", layer_norm_eps=1e-7, initializer_range=0.2),
    "one_head": dict(vocab_size=50, hidden_size=24, num_hidden_layers=1, num_attention_heads=1,
                     intermediate_size=24, max_position_embeddings=16, type_vocab_size=1,
                     hidden_act="relu"),
}


def _hf_model(name: str, seed: int = 0) -> transformers.BertForPreTraining:
    torch.manual_seed(seed)
    config = transformers.BertConfig(**HF_CONFIGS[name], attn_implementation="eager")
    model = transformers.BertForPreTraining(config).eval()
    with torch.no_grad():  # non-trivial biases and LayerNorm weights, not just the init values
        for n, p in model.named_parameters():
            if n.endswith("bias") or "LayerNorm" in n:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(config: dict, seed: int = 0):
    rng = np.random.default_rng(seed)
    S = min(12, config["max_position_embeddings"])
    ids = rng.integers(0, config["vocab_size"], (3, S))
    mask = np.ones((3, S), np.int64)
    mask[1, S - 4:] = 0
    mask[2, 3:] = 0
    types = rng.integers(0, config.get("type_vocab_size", 2), (3, S))
    return ids, types, mask


def _ours(model, ids, types, mask):
    return model(jnp.asarray(ids), jnp.asarray(types), jnp.asarray(mask))


def _theirs(model, ids, types, mask):
    with torch.no_grad():
        return model(torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
                     attention_mask=torch.from_numpy(mask))


def _max_diff(a, b) -> float:
    return float(np.max(np.abs(np.asarray(a) - b.detach().numpy())))


def _within(ours, hf, batch, field: str) -> None:
    """The parity rule (`parity.noise`): `ours` against transformers' `field` in float32, its
    float64 run measuring the reference's own noise."""
    ref32 = getattr(_theirs(hf, *batch), field).numpy()
    ref64 = getattr(_theirs(copy.deepcopy(hf).double(), *batch), field).numpy()
    judged = judge(field, ours, ref32, ref64, TOL)
    assert judged.passed, judged


@pytest.mark.parametrize("name", sorted(HF_CONFIGS))
def test_load_hf_matches_transformers(tmp_path, name):
    hf = _hf_model(name)
    hf.save_pretrained(tmp_path)
    ours = load_hf(tmp_path)
    batch = _batch(HF_CONFIGS[name])
    out = _ours(ours, *batch)
    _within(out.mlm_logits, hf, batch, "prediction_logits")
    _within(out.nsp_logits, hf, batch, "seq_relationship_logits")


@pytest.mark.parametrize("name", ["small", "odd"])
def test_save_hf_reloads_in_transformers_with_identical_logits(tmp_path, name):
    hf = _hf_model(name, seed=1)
    hf.save_pretrained(tmp_path / "src")
    ours = load_hf(tmp_path / "src")
    save_pretrained(ours, tmp_path / "out")
    reloaded, info = transformers.BertForPreTraining.from_pretrained(
        tmp_path / "out", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert not info["mismatched_keys"]
    batch = _batch(HF_CONFIGS[name], seed=2)
    a, b = _theirs(hf, *batch), _theirs(reloaded.eval(), *batch)
    assert torch.equal(a.prediction_logits, b.prediction_logits)
    assert torch.equal(a.seq_relationship_logits, b.seq_relationship_logits)


def test_save_hf_from_a_fresh_bertjax_model(tmp_path):
    model = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=64), rngs=nnx.Rngs(5))
    save_pretrained(model, tmp_path / "ckpt")
    with pytest.raises(FileExistsError, match=r"already holds a BertForPreTraining model "
                                              r"\(model_type bert\).*pass overwrite=True"):
        save_pretrained(model, tmp_path / "ckpt")  # a model there is replaced only when asked
    save_pretrained(model, tmp_path / "ckpt", overwrite=True)
    assert sorted(p.name for p in (tmp_path / "ckpt").iterdir()) == ["config.json",
                                                                    "model.safetensors"]
    hf = transformers.BertForPreTraining.from_pretrained(tmp_path / "ckpt",
                                                         attn_implementation="eager").eval()
    cfg = dict(vocab_size=64, max_position_embeddings=128)
    batch = _batch(cfg)
    out = _ours(model, *batch)
    _within(out.mlm_logits, hf, batch, "prediction_logits")
    _within(out.nsp_logits, hf, batch, "seq_relationship_logits")


def test_bare_bert_model_without_prefix_gets_fresh_heads_and_says_so(tmp_path):
    torch.manual_seed(0)
    config = transformers.BertConfig(**HF_CONFIGS["small"], attn_implementation="eager")
    bare = transformers.BertModel(config).eval()
    bare.save_pretrained(tmp_path)
    assert type(load_hf(tmp_path)).__name__ == "BertModel"  # the class config.json names
    with pytest.warns(UserWarning, match="no weights for mlm_head, nsp_head: freshly initialised"):
        ours = load_hf(tmp_path, model_cls=BertForPreTraining)
    batch = _batch(HF_CONFIGS["small"])
    out = _ours(ours, *batch)
    _within(out.sequence_output, bare, batch, "last_hidden_state")
    _within(out.pooled_output, bare, batch, "pooler_output")


def test_pytorch_model_bin_is_read(tmp_path):
    hf = _hf_model("small")
    hf.save_pretrained(tmp_path, safe_serialization=False) if _can_save_bin() else None
    if not (tmp_path / "pytorch_model.bin").exists():
        hf.config.save_pretrained(tmp_path)
        torch.save(hf.state_dict(), tmp_path / "pytorch_model.bin")
    ours = load_hf(tmp_path)
    batch = _batch(HF_CONFIGS["small"])
    _within(_ours(ours, *batch).mlm_logits, hf, batch, "prediction_logits")


def _can_save_bin() -> bool:
    import inspect

    return "safe_serialization" in inspect.signature(
        transformers.PreTrainedModel.save_pretrained).parameters


class _Exploit:
    def __init__(self, target):
        self.target = target

    def __reduce__(self):
        return (open, (self.target, "w"))


def test_code_executing_pickle_is_refused_without_running(tmp_path):
    hf = _hf_model("small")
    hf.config.save_pretrained(tmp_path)
    sentinel = tmp_path / "pwned"
    state = {"bert.embeddings.word_embeddings.weight": torch.zeros(2), "x": _Exploit(sentinel)}
    with open(tmp_path / "pytorch_model.bin", "wb") as f:
        torch.save(state, f, pickle_module=pickle)
    with pytest.raises(ValueError, match="refusing to load .*pytorch_model.bin.*weights_only"):
        load_hf(tmp_path)
    assert not sentinel.exists()


def test_untied_decoder_and_missing_files_are_errors(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf = _hf_model("small")
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    words = tensors["bert.embeddings.word_embeddings.weight"]
    tensors["cls.predictions.decoder.weight"] = words + 1.0
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match="untied MLM decoder"):
        load_hf(tmp_path)
    (tmp_path / "model.safetensors").write_bytes(b"\x00garbage")
    with pytest.raises(ValueError, match="not a readable safetensors file"):
        load_hf(tmp_path)
    (tmp_path / "model.safetensors").unlink()
    with pytest.raises(FileNotFoundError, match=r"holds no model weights \(none of model.safetensors"):
        load_hf(tmp_path)
    with pytest.raises(InputError, match="does not exist"):
        load_hf(tmp_path / "nope")


def test_missing_encoder_weight_is_an_error(tmp_path):
    from safetensors.numpy import load_file, save_file

    _hf_model("small").save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    del tensors["bert.encoder.layer.1.output.dense.weight"]
    save_file(tensors, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"missing key bert\.layers\.1\.output\.weight"):
        load_hf(tmp_path)


def test_safetensors_import_needs_no_torch(tmp_path):
    _hf_model("small").save_pretrained(tmp_path)
    code = (
        "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises
        "import warnings; from bertjax.pretrained import load_hf\n"
        f"m = load_hf({str(tmp_path)!r}); print(m.config.hidden_size)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "64"


def test_tf_era_gamma_beta_names_load(tmp_path):
    from safetensors.numpy import load_file, save_file

    hf = _hf_model("small")
    hf.save_pretrained(tmp_path)
    tensors = load_file(tmp_path / "model.safetensors")
    renamed = {k.replace("LayerNorm.weight", "LayerNorm.gamma").replace("LayerNorm.bias",
                                                                         "LayerNorm.beta"): v
               for k, v in tensors.items()}
    save_file(renamed, tmp_path / "model.safetensors")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = load_hf(tmp_path)
    batch = _batch(HF_CONFIGS["small"])
    _within(_ours(ours, *batch).mlm_logits, hf, batch, "prediction_logits")


def test_sharded_safetensors_checkpoint_loads(tmp_path):
    hf = _hf_model("small")
    hf.save_pretrained(tmp_path, max_shard_size="20KB")
    assert (tmp_path / "model.safetensors.index.json").exists()
    ours = load_hf(tmp_path)
    batch = _batch(HF_CONFIGS["small"])
    _within(_ours(ours, *batch).mlm_logits, hf, batch, "prediction_logits")


def test_save_hf_over_a_checkpoint_is_atomic_and_refuses_foreign_files(tmp_path, monkeypatch):
    old = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=64), rngs=nnx.Rngs(1))
    new = BertForPreTraining(BertConfig.from_preset("tiny", vocab_size=64), rngs=nnx.Rngs(2))
    ckpt = tmp_path / "ckpt"
    save_pretrained(old, ckpt)
    before = {p.name: p.read_bytes() for p in ckpt.iterdir()}

    import safetensors.numpy

    def crash(*args, **kwargs):
        raise OSError("disk full")

    with monkeypatch.context() as m:  # a writer that dies half way leaves the old checkpoint
        m.setattr(safetensors.numpy, "save_file", crash)
        with pytest.raises(OSError, match="disk full"):
            save_pretrained(new, ckpt, overwrite=True)
    assert {p.name: p.read_bytes() for p in ckpt.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt"]  # no temporary left behind

    save_pretrained(new, ckpt, overwrite=True)
    batch = _batch(dict(vocab_size=64, max_position_embeddings=128))
    assert _max_diff(_ours(load_hf(ckpt), *batch).mlm_logits,
                     torch.from_numpy(np.array(_ours(new, *batch).mlm_logits))) == 0.0

    (ckpt / "notes.txt").write_text("mine")  # a model beside a user's file: never replaced
    with pytest.raises(FileExistsError, match=r"files no model has \(notes\.txt\): it is never "
                                              r"replaced, even with overwrite=True"):
        save_pretrained(old, ckpt, overwrite=True)
    assert (ckpt / "notes.txt").read_text() == "mine"
    # A download in another format is a model too: replaced only when asked.
    download = tmp_path / "download"
    download.mkdir()
    (download / "config.json").write_text("{}")
    (download / "pytorch_model.bin").write_bytes(b"weights")
    with pytest.raises(FileExistsError, match=r"already holds a model whose config\.json names no "
                                              r"class \(config\.json, pytorch_model\.bin\)"):
        save_pretrained(old, download)
    assert (download / "pytorch_model.bin").read_bytes() == b"weights"


def test_top_level_api():
    import bertjax
    import parity
    from bertjax.pretrained import from_pretrained, save_pretrained

    assert bertjax.load_hf is load_hf
    assert bertjax.from_pretrained is from_pretrained and bertjax.save_pretrained is save_pretrained
    assert {"from_pretrained", "save_pretrained", "load_hf"} <= set(bertjax.__all__)
    with pytest.raises(AttributeError, match="no attribute 'save_hf'"):
        _ = bertjax.save_hf  # the old name is gone (0.1.0 is unreleased: no shims)
    from parity.convert import flax_to_torch, torch_to_flax
    from parity.tensors import compare

    assert (parity.flax_to_torch, parity.torch_to_flax, parity.compare) == (
        flax_to_torch, torch_to_flax, compare)
    with pytest.raises(AttributeError, match="no attribute 'load'"):
        _ = parity.load
