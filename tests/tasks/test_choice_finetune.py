"""Fine-tuning for multiple choice: a tiny model learns which of 2 to 4 choices is the right one
(examples with fewer choices padded and masked), the best epoch is exported as transformers'
BertForMultipleChoice with the same logits, and bad records are named by file and line."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest
import torch
import transformers
from use_helpers import sentences, tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.data.choices import ChoiceExample, read_choices
from bertjax.heads import BertForMultipleChoice
from bertjax.tasks.multiple_choice import choice_inputs, overlap_choice, predict_choices

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5  # exported logits, max abs difference (float32)


def _rows(n: int, seed: int) -> list[dict]:
    """A line and 2 to 4 other lines; the right one starts with a cue word the context names
    (at the start: the end of a long pair is cut at --max-length)."""
    rng, lines = random.Random(seed), sentences(400)
    rows = []
    for _ in range(n):
        choices = [rng.choice(lines) for _ in range(rng.randint(2, 4))]
        label = rng.randrange(len(choices))
        choices[label] = f"Amen! {choices[label]}"
        rows.append({"context": f"{rng.choice(lines)} Say amen.", "choices": choices,
                     "label": label})
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("choices")
    return [_write(tmp / f"{name}.jsonl", _rows(n, seed))
            for name, n, seed in (("train", 160, 0), ("validation", 40, 1), ("test", 40, 2))]


@pytest.fixture(scope="module")
def finetuned(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("chooser") / "run"
    train, validation, test = data
    code = main(["finetune", str(tiny_checkpoint()), "--task", "multiple-choice", "--train",
                 str(train), "--validation", str(validation), "--test", str(test),
                 "--output-dir", str(out), "--epochs", "4", "--batch-size", "8",
                 "--optim.learning-rate", "1e-3", "--max-length", "48", "--no-progress"])
    assert code == 0
    return out


def test_the_right_choice_is_learned(finetuned):
    summary = json.loads((finetuned / "summary.json").read_text())
    assert summary["task"] == "multiple-choice"
    assert summary["test"]["accuracy"] >= 0.9, summary  # chance is about 0.36
    report = json.loads((finetuned / "choices_test.json").read_text())
    assert report["examples"] == 40 and 0.25 < report["chance"] < 0.5


def test_exported_chooser_loads_in_transformers_with_the_same_logits(finetuned, data):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model", model_cls=BertForMultipleChoice)
    theirs, info = transformers.BertForMultipleChoice.from_pretrained(
        finetuned / "model", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    examples = [e for e in read_choices(data[2]) if len(e.choices) == 3][:4]
    arrays = choice_inputs(tokenizer, examples, 48)  # (B, 3, S)
    with torch.no_grad():
        ref = theirs.eval()(**{k: torch.from_numpy(arrays[k]).long() for k in
                               ("input_ids", "token_type_ids", "attention_mask")}).logits
    ours = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"]).logits
    assert float(np.abs(np.asarray(ours) - ref.numpy()).max()) <= TOL
    probs = predict_choices(model, tokenizer, examples, max_length=48)
    np.testing.assert_allclose(probs, torch.softmax(ref, -1).numpy(), atol=TOL)


def test_fewer_choices_are_padded_and_get_no_probability(finetuned):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model", model_cls=BertForMultipleChoice)
    two = ChoiceExample("Say amen.", ("a line", "another Amen."), 1, "x:1")
    four = ChoiceExample("Say amen.", ("a", "b", "c", "d Amen."), 3, "x:2")
    arrays = choice_inputs(tokenizer, [two, four], 32)
    assert arrays["input_ids"].shape[:2] == (2, 4)
    assert arrays["choice_mask"].tolist() == [[1, 1, 0, 0], [1, 1, 1, 1]]
    probs = predict_choices(model, tokenizer, [two, four], max_length=32)
    assert probs[0, 2:].tolist() == [0.0, 0.0]
    alone = predict_choices(model, tokenizer, [two], max_length=32)
    np.testing.assert_allclose(probs[0, :2], alone[0], atol=1e-6)  # padding changes nothing


def test_overlap_baseline_and_bad_records(tmp_path, capsys):
    assert overlap_choice(ChoiceExample("the king is dead", ("a fool", "the king lives"), 1,
                                        "x")) == 1
    rows = [{"context": "c", "choices": ["a", "b"], "label": 0},
            {"context": "c", "choices": ["a", "b"], "label": 2}]
    bad = _write(tmp_path / "bad.jsonl", rows)
    assert main(["finetune", str(tiny_checkpoint()), "--task", "multiple-choice", "--train",
                 str(bad), "--output-dir", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:2: field 'label' must be the index of the right choice" in err
    one = _write(tmp_path / "one.jsonl", [{"context": "c", "choices": ["a"], "label": 0}])
    with pytest.raises(ValueError, match=r"one.jsonl:1: field 'choices' must be a list of 2 to 16"):
        read_choices(one)
    assert not (tmp_path / "out").exists()


def test_the_choose_command_ranks_the_choices(finetuned, capsys):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model", model_cls=BertForMultipleChoice)
    example = ChoiceExample("Say amen.", ("a plain line", "Amen! a line"), 1, "x")
    probs = predict_choices(model, tokenizer, [example], max_length=48)[0]
    assert main(["choose", str(finetuned / "model"), "--context", example.context,
                 "--choice", example.choices[0], "--choice", example.choices[1],
                 "--max-length", "48", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["index"] for r in rows] == [1, 0]  # the cue wins, most probable first
    np.testing.assert_allclose([r["probability"] for r in rows], probs[[1, 0]], atol=1e-7)
    assert main(["choose", str(finetuned / "model"), "--context", "c", "--choice", "a"]) == 2
    assert "give 2 to 16 non-empty choices" in capsys.readouterr().err
