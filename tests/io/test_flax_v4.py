"""transformers-v4 Flax checkpoints in: the migration path transformers 5 does not offer.

The fixtures (tests/fixtures/flax_v4/, made once by scripts/dev/make_flax_v4_fixtures.py with
transformers 4.57.6 + flax 0.12.8 in a side environment) are real `FlaxBert*.save_pretrained`
directories, one per class plus a sharded one, with FlaxBert's own outputs on fixed inputs.

Tolerance: 1e-5 max abs diff against FlaxBert's outputs, per-token outputs at unpadded
positions (FlaxBert and bertjax mask padding differently: padded query rows are not compared), or
3 x FlaxBert's own float32 noise where that is larger (the parity rule, `parity.noise`): its
distance from the same class of transformers run in float64 on the same weights.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

from bertjax.cli.main import main
from bertjax.pretrained import from_pretrained, load_hf, save_pretrained
from parity.noise import failures

TOL = 1e-5
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flax_v4"
# FlaxBert's output field -> ours.
FIELDS = {"last_hidden_state": "sequence_output", "pooler_output": "pooled_output",
          "prediction_logits": "mlm_logits", "seq_relationship_logits": "nsp_logits",
          "start_logits": "start_logits", "end_logits": "end_logits"}
LOGITS_OF = {"BertForMaskedLM": "mlm_logits", "BertForNextSentencePrediction": "nsp_logits"}
CLASSES = ["BertModel", "BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
           "BertForSequenceClassification", "BertForTokenClassification",
           "BertForQuestionAnswering", "BertForMultipleChoice"]


def _fixture(name: str) -> tuple[Path, dict[str, np.ndarray]]:
    path = FIXTURES / name
    return path, dict(np.load(path / "outputs.npz"))


INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def _outputs(saved: dict[str, np.ndarray], values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`values` (by FlaxBert's output field) as compared: per-token ones at unpadded positions."""
    real = saved["attention_mask"].astype(bool)
    return {f: v[real] if v.shape[:2] == real.shape else v for f, v in values.items()}


def _transformers(path: Path, name: str, saved: dict[str, np.ndarray], *,
                  float64: bool = False) -> dict[str, np.ndarray]:
    """transformers' `name` on the saved inputs, from the Hugging Face directory `path`: FlaxBert's
    output fields (`float64`: run in float64, the measure of float32's own noise)."""
    model = getattr(transformers, name).from_pretrained(path, attn_implementation="eager").eval()
    model = model.double() if float64 else model
    ids, types, mask = (torch.from_numpy(saved[k]).long() for k in INPUTS)
    with torch.no_grad():
        out = model(ids, token_type_ids=types, attention_mask=mask)
    return {f: getattr(out, f).numpy() for f in saved if f not in INPUTS}


def ours_and_flax(model, saved: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """(our outputs, FlaxBert's saved ones) on the saved inputs, by FlaxBert's field, as
    compared (per-token ones at unpadded positions)."""
    out = model(*(jnp.asarray(saved[k]) for k in INPUTS))
    ours = {f: np.asarray(getattr(out, FIELDS.get(f) or LOGITS_OF.get(type(model).__name__, f)))
            for f in saved if f not in INPUTS}
    flax = {f: v for f, v in saved.items() if f not in INPUTS}
    return _outputs(saved, ours), _outputs(saved, flax)


def _parity_failures(model, saved: dict[str, np.ndarray], tmp_path: Path) -> list[str]:
    """Each output of ours past the parity rule against FlaxBert's, with transformers in float64
    (on the same weights, exported) measuring FlaxBert's float32 noise; [] when all pass."""
    save_pretrained(model, tmp_path / "float64")
    ref64 = _transformers(tmp_path / "float64", type(model).__name__, saved, float64=True)
    return failures(*ours_and_flax(model, saved), _outputs(saved, ref64), TOL)


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_each_flax_checkpoint_reproduces_flaxbert(name, tmp_path):
    path, saved = _fixture(f"Flax{name}")
    model = load_hf(path)
    assert type(model).__name__ == name  # config.json's architecture decides the class
    assert _parity_failures(model, saved, tmp_path) == []


def test_sharded_flax_checkpoint_loads_like_the_whole_one(tmp_path):
    path, saved = _fixture("FlaxBertForPreTraining_sharded")
    assert not (path / "flax_model.msgpack").exists()
    assert len(list(path.glob("flax_model-*.msgpack"))) > 1
    model, tokenizer = from_pretrained(path)  # with its vocab.txt
    assert tokenizer.vocab_size == 99
    assert _parity_failures(model, saved, tmp_path) == []


@pytest.mark.slow
@pytest.mark.parametrize("name", CLASSES)
def test_export_migrates_to_a_directory_transformers_5_loads(tmp_path, name):
    path, saved = _fixture(f"Flax{name}")
    assert main(["convert", str(path), str(tmp_path / "out")]) == 0
    _, info = getattr(transformers, name).from_pretrained(
        tmp_path / "out", attn_implementation="eager", output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info
    theirs, theirs64 = (_transformers(tmp_path / "out", name, saved, float64=f)
                        for f in (False, True))
    flax = {f: v for f, v in saved.items() if f not in INPUTS}
    assert failures(_outputs(saved, theirs), _outputs(saved, flax), _outputs(saved, theirs64),
                    TOL) == []


def _copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def _export_fails(path: Path, tmp_path: Path, capsys) -> str:
    """`bertjax convert` of `path`: exit 2, one line, nothing written."""
    assert main(["convert", str(path), str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    return err


def test_truncated_msgpack_is_named(tmp_path, capsys):
    path = _copy("FlaxBertForMaskedLM", tmp_path)
    data = (path / "flax_model.msgpack").read_bytes()
    (path / "flax_model.msgpack").write_bytes(data[: len(data) // 2])
    err = _export_fails(path, tmp_path, capsys)
    assert f"{path / 'flax_model.msgpack'} is not a readable Flax msgpack checkpoint" in err
    assert "damaged or incomplete" in err


def test_msgpack_of_something_else_is_not_a_bert(tmp_path, capsys):
    from flax.serialization import msgpack_serialize

    path = _copy("FlaxBertForMaskedLM", tmp_path)
    other = {"decoder": {"layers_0": {"kernel": np.ones((4, 4), np.float32)}}}
    (path / "flax_model.msgpack").write_bytes(msgpack_serialize(other))
    err = _export_fails(path, tmp_path, capsys)
    assert "holds no BERT weights (no embeddings/word_embeddings/embedding; found decoder)" in err
    (path / "flax_model.msgpack").write_bytes(msgpack_serialize([1, 2, 3]))
    err = _export_fails(path, tmp_path, capsys)
    assert "holds a msgpack list, not a dict of parameters" in err


def test_sharded_index_naming_a_missing_shard_is_named(tmp_path, capsys):
    path = _copy("FlaxBertForPreTraining_sharded", tmp_path)
    (path / "flax_model-00003-of-00004.msgpack").unlink()
    err = _export_fails(path, tmp_path, capsys)
    assert "flax_model.msgpack.index.json names shard files that are missing: " \
           "flax_model-00003-of-00004.msgpack" in err


def test_config_naming_another_head_is_refused(tmp_path, capsys):
    path = _copy("FlaxBertForQuestionAnswering", tmp_path)
    config = json.loads((path / "config.json").read_text())
    config["architectures"] = ["FlaxBertForMaskedLM"]
    (path / "config.json").write_text(json.dumps(config))
    err = _export_fails(path, tmp_path, capsys)
    assert (f"{path / 'config.json'} names BertForMaskedLM, but the weights hold no mlm_head and "
            "hold qa_outputs") in err


def test_missing_and_misshaped_arrays_are_named(tmp_path, capsys):
    from flax.serialization import msgpack_restore, msgpack_serialize

    path = _copy("FlaxBertForTokenClassification", tmp_path)
    params = msgpack_restore((path / "flax_model.msgpack").read_bytes())
    del params["bert"]["encoder"]["layer"]["1"]["output"]["dense"]["bias"]
    params["classifier"]["kernel"] = params["classifier"]["kernel"][:, :4]  # 5 labels -> 4
    (path / "flax_model.msgpack").write_bytes(msgpack_serialize(params))
    err = _export_fails(path, tmp_path, capsys)
    assert "missing key bert.layers.1.output.bias (expected shape (36,))" in err
    assert "wrong shape for token_classifier.weight: expected (5, 36), found (4, 36)" in err
