"""The scripts in examples/ run, on tiny settings, and do what they say: the custom loop trains,
evaluates, resumes from its checkpoint and exports a directory transformers loads with the same
logits; fine-tuning your own CSV from a Hugging Face directory exports a classifier; the parity
check passes a good conversion and refuses one that differs."""

from __future__ import annotations

import ast
import csv
import importlib.util
import random
import re
from pathlib import Path

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers

import bertjax

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
QA_MODEL = ROOT / "tests" / "fixtures" / "qa_pipeline" / "model"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, EXAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _bertjax_modules(path: Path) -> set[str]:
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            modules |= ({f"{node.module}.{a.name}" for a in node.names} if node.module == "bertjax"
                        else {node.module})
    return {m for m in modules if m.split(".")[0] == "bertjax"}


def test_the_custom_loop_uses_public_names_from_three_modules_in_80_lines() -> None:
    path = EXAMPLES / "custom_pretraining_loop.py"
    assert _bertjax_modules(path) == {"bertjax", "bertjax.data", "bertjax.train"}
    assert len(path.read_text().splitlines()) <= 80


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(a - b).max() / max(1.0, np.abs(b).max()))


def test_the_custom_loop_trains_resumes_and_exports_for_transformers(tmp_path, capsys) -> None:
    loop = _load("custom_pretraining_loop")
    tiny = ["--out", str(tmp_path / "run"), "--preset", "tiny", "--vocab-size", "200",
            "--seq-len", "32", "--batch-size", "4", "--eval-every", "10"]
    held = loop.main([*tiny, "--steps", "20"])
    first = capsys.readouterr().out
    assert first.count("held-out MLM accuracy") == 2 and "step 20:" in first
    assert 0.0 <= held["mlm_accuracy"] <= 1.0 and np.isfinite(held["perplexity"])
    loop.main([*tiny, "--steps", "30"])  # resumes at its step-20 checkpoint
    again = capsys.readouterr().out
    assert "step 10:" not in again and "step 30:" in again
    assert sorted(p.name for p in (tmp_path / "run" / "checkpoints").iterdir()) == ["20", "30"]

    export = tmp_path / "run" / "hf"
    ours, tokenizer = bertjax.from_pretrained(export)
    ids = np.array([[tokenizer.special.cls, 7, 8, 9, tokenizer.special.sep]], np.int64)
    hf = transformers.BertForPreTraining.from_pretrained(export, attn_implementation="eager")
    with torch.no_grad():
        theirs = hf.eval()(torch.from_numpy(ids)).prediction_logits.numpy()
    mine = np.asarray(ours(jnp.asarray(ids)).mlm_logits)
    assert _relative(mine, theirs) < 1e-5  # float32, two implementations


def _labelled_csv(path: Path, n: int = 80) -> Path:
    rng = random.Random(0)
    words = ["rose", "night", "love", "sword", "crown", "king", "fool", "moon"]
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=["text", "label"])
        writer.writeheader()
        for i in range(n):
            cue = "merry sweet" if i % 2 else "blood war"
            writer.writerow({"text": f"{cue} {' '.join(rng.sample(words, 4))}",
                             "label": "comedy" if i % 2 else "tragedy"})
    return path


def test_finetuning_your_csv_from_a_hugging_face_directory(tmp_path, capsys) -> None:
    example = _load("finetune_your_data")
    result = example.main([str(QA_MODEL), str(_labelled_csv(tmp_path / "train.csv")),
                           "--out", str(tmp_path / "out"), "--epochs", "2", "--batch-size", "8",
                           "--learning-rate", "1e-3", "--max-length", "32"])
    printed = capsys.readouterr().out
    assert "new heads: classifier" in printed and result.best_epoch in (1, 2)
    assert set(result.labels) == {"comedy", "tragedy"}
    model, _ = bertjax.from_pretrained(tmp_path / "out" / "model")
    assert type(model).__name__ == "BertForSequenceClassification"
    assert model.config.id2label == ("comedy", "tragedy")
    assert printed.count("'comedy' (") + printed.count("'tragedy' (") == 3


def test_the_parity_check_passes_a_good_conversion_and_refuses_one_that_differs(
        tmp_path, capsys, monkeypatch) -> None:
    example = _load("check_converted_checkpoint")
    errors = example.main([str(QA_MODEL), "Who greets Maria?", "Sir Toby greets Maria."])
    assert set(errors) == {f"{who} {field}" for who in ("transformers", "bert_torch")
                           for field in ("start_logits", "end_logits")}
    assert max(errors.values()) <= example.TOLERANCE
    real = transformers.BertForQuestionAnswering.from_pretrained

    def drifted(*args, **kwargs):  # a conversion that lost a little of one weight
        loaded = real(*args, **kwargs)
        model = loaded[0] if isinstance(loaded, tuple) else loaded
        with torch.no_grad():
            model.qa_outputs.bias += 1e-3
        return loaded

    monkeypatch.setattr(transformers.BertForQuestionAnswering, "from_pretrained", drifted)
    with pytest.raises(SystemExit, match=r"start_logits is [0-9.e-]+ away from transformers [0-9.]+ "
                       r"BertForQuestionAnswering.s start_logits, relative to the outputs. scale"):
        example.main([str(QA_MODEL), "Who greets Maria?"])  # the probe check sees it first
    monkeypatch.setattr(example, "verify_export", lambda *args: [])
    with pytest.raises(SystemExit, match="does not reproduce its outputs within 1e-05"):
        example.main([str(QA_MODEL), "Who greets Maria?"])  # and so do your sentences
    assert re.search(r"transformers (start|end)_logits: [0-9.e-]+ DIFFERS", capsys.readouterr().out)
