"""A checkpoint is what its config says (issue 62): weights named as another family's than
config.json's `model_type` are refused when loaded, in one line naming both, before anything
runs. They loaded silently: BERT's weights under a RoBERTa config.json ran with RoBERTa's
position offset, its logits 0.40 off on a scale of 0.43, where transformers calls every such
weight unexpected."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from message_checks import snapshot
from use_helpers import tiny_checkpoint

import bertjax
from bertjax.cli.main import main

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "families"



def _relabelled(source: Path, out: Path, model_type: str, **fields) -> Path:
    """A copy of the checkpoint `source` whose config.json says `model_type`."""
    shutil.copytree(source, out)
    config = json.loads((out / "config.json").read_text())
    (out / "config.json").write_text(json.dumps({**config, "model_type": model_type, **fields}))
    return out


CASES = {  # (checkpoint, the model_type its config.json is given, the family its weights are)
    "BERT weights, RoBERTa config": (None, "roberta", "bert"),
    "RoBERTa weights, BERT config": ("roberta/RobertaForMaskedLM", "bert",
                                     "roberta or xlm-roberta"),
    "ELECTRA weights, RoBERTa config": ("electra/ElectraForMaskedLM", "roberta", "electra"),
}


@pytest.mark.parametrize("case", CASES)
def test_loading_refuses_weights_of_another_family_naming_both(case, tmp_path, capsys):
    source, model_type, theirs = CASES[case]
    model = _relabelled(tiny_checkpoint() if source is None else FIXTURES / source,
                        tmp_path / "model", model_type, pad_token_id=1)
    before = snapshot(tmp_path)
    expected = (f"{model}/config.json says model_type {model_type!r}, but the weights beside it "
                f"have names only {theirs} checkpoints have (")
    with pytest.raises(bertjax.InputError) as refused:
        bertjax.from_pretrained(model)
    assert str(refused.value).startswith(expected)
    assert "the config and the weights are of different families" in str(refused.value)
    assert str(refused.value).endswith("or the weights that came with this config")
    assert main(["fill-mask", str(model), "To be or not to [MASK]."]) == 2
    err = capsys.readouterr().err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"bertjax fill-mask: error: {expected}"), line
    assert snapshot(tmp_path) == before


def test_the_names_every_family_shares_decide_nothing(tmp_path):
    """A bare encoder (no prefix) and the heads every family names alike load under any
    config.json whose family has them; only a family's own spelling is checked."""
    from bertjax.io.family_check import check_weights_family

    shared = ["embeddings.word_embeddings.weight", "classifier.weight", "qa_outputs.bias"]
    for model_type in ("bert", "roberta", "xlm-roberta", "electra", "distilbert"):
        check_weights_family(shared, model_type, "config.json")
    check_weights_family(["encoder.layer.0.output.dense.weight"], "roberta", "config.json")
    with pytest.raises(bertjax.InputError, match=r"model_type 'distilbert', but .* names only "
                                                 r"bert, electra, roberta or xlm-roberta "
                                                 r"checkpoints have \(encoder\.layer\.0"):
        check_weights_family(["encoder.layer.0.output.dense.weight"], "distilbert", "config.json")
