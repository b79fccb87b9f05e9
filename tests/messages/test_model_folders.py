"""A model a user owns is never replaced unasked (issue 62): `bertjax convert` and
`bertjax.save_pretrained` write into a new or empty directory; one that holds a model - whoever
wrote it: transformers, `bertjax finetune`, an earlier `convert` - is replaced only with `--force`
(`overwrite=True`), never when it is the model read, and never when it also holds files no model
has. Each refusal is one line (exit status 2 at the command line) naming what the directory
holds, and leaves every file as it was."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from message_checks import refused, snapshot
from use_helpers import tiny_checkpoint

import bertjax
from bertjax.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "families"
WORDS = "bert.embeddings.word_embeddings.weight"



@pytest.fixture
def folders(tmp_path) -> dict[str, Path]:
    """A RoBERTa transformers wrote with its tokenizer, a classifier as `bertjax finetune`
    writes it (`ft/model`), the model converted, and a run-like source: copies, per test."""
    roberta = tmp_path / "my-roberta"
    shutil.copytree(FIXTURES / "roberta" / "RobertaForMaskedLM", roberta,
                    ignore=shutil.ignore_patterns("outputs.npz", "fill_mask.json"))
    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    config = model.config.replace(id2label=("neg", "pos"))
    classifier = tmp_path / "ft" / "model"
    bertjax.save_pretrained(bertjax.BertForSequenceClassification(config, rngs=nnx.Rngs(0)),
                            classifier, tokenizer)
    (tmp_path / "ft" / "metrics.json").write_text("{}\n")
    source = tmp_path / "source"
    shutil.copytree(tiny_checkpoint(), source)
    return {"roberta": roberta, "finetuned": classifier, "source": source}


@pytest.mark.parametrize(("target", "holds"), [
    ("finetuned", "a BertForSequenceClassification model (model_type bert) with its tokenizer "
                  "(config.json, model.safetensors, special_tokens_map.json, tokenizer.json, "
                  "tokenizer_config.json and 1 more)"),
    ("roberta", "a RobertaForMaskedLM model (model_type roberta, saved by transformers 5.24.0) "
                "with its tokenizer (config.json, model.safetensors, tokenizer.json, "
                "tokenizer_config.json)"),
])
def test_convert_refuses_a_folder_holding_a_model_and_names_it(folders, target, holds, tmp_path,
                                                               capsys):
    out = folders[target]
    before = snapshot(tmp_path)
    line = refused(["convert", str(folders["source"]), str(out)], capsys)
    assert line == (f"bertjax convert: error: OUT_DIR {out} already holds {holds}; pass --force "
                    "to replace it, or choose another OUT_DIR (a new or empty directory)")
    assert snapshot(tmp_path) == before


def test_force_replaces_a_model_but_never_the_input_nor_a_users_files(folders, tmp_path,
                                                                      capsys):
    source, roberta = folders["source"], folders["roberta"]
    (folders["finetuned"] / "notes.txt").write_text("my results")
    before = snapshot(tmp_path)
    line = refused(["convert", str(source), str(source), "--force"], capsys)
    assert "is the MODEL this command reads: writing it would replace your input" in line
    line = refused(["convert", str(source), str(folders["finetuned"]), "--force"], capsys)
    assert line.endswith("with its tokenizer and files no model has (notes.txt): it is never "
                         "replaced, even with --force; move those files out, or choose another "
                         "OUT_DIR (a new or empty directory)")
    assert snapshot(tmp_path) == before
    assert main(["convert", str(source), str(roberta), "--force"]) == 0  # asked: replaced
    written = json.loads((roberta / "config.json").read_text())
    assert (written["model_type"], written["architectures"]) == ("bert", ["BertForPreTraining"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ft", "my-roberta", "source"]
    capsys.readouterr()
    before = snapshot(tmp_path)  # bertjax's own export is a model too: it was replaced unasked
    line = refused(["convert", str(source), str(roberta)], capsys)  # for its file names
    assert line.startswith(f"bertjax convert: error: OUT_DIR {roberta} already holds a "
                           "BertForPreTraining model (model_type bert) with its tokenizer (")
    assert snapshot(tmp_path) == before


def test_save_pretrained_replaces_a_model_only_with_overwrite(folders, tmp_path):
    model, tokenizer = bertjax.from_pretrained(folders["source"])
    roberta = folders["roberta"]
    before = snapshot(tmp_path)
    with pytest.raises(FileExistsError) as refused:
        bertjax.save_pretrained(model, roberta, tokenizer)
    assert str(refused.value) == (
        f"output directory {roberta} already holds a RobertaForMaskedLM model (model_type "
        "roberta, saved by transformers 5.24.0) with its tokenizer (config.json, "
        "model.safetensors, tokenizer.json, tokenizer_config.json); pass overwrite=True to "
        "replace it, or choose another output directory (a new or empty directory)")
    assert snapshot(tmp_path) == before
    bertjax.save_pretrained(model, roberta, tokenizer, overwrite=True)
    reloaded, _ = bertjax.from_pretrained(roberta)
    np.testing.assert_array_equal(
        np.asarray(reloaded.bert.embeddings.word_embeddings.embedding[...]),
        np.asarray(model.bert.embeddings.word_embeddings.embedding[...]))
