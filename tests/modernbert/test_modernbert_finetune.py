"""`bertjax finetune` from a ModernBERT directory, each task end to end at a tiny size (the
fixtures' 4-layer encoders, two steps, sequences of at most 40 tokens): the best epoch is
written as transformers' ModernBERT class of the task, which transformers 5 loads with no key
missing or left over and which gives bertjax's logits on a padded batch within 1e-5. The
classifier starts from config b, whose `classifier_pooling` is mean: ModernBERT's own head
(pooling, dense, activation, norm, classifier) is what transformers runs on the export.

ModernBERT has no token types: every task's batches carry type 0 only (pairs included, as
RoBERTa's and DistilBERT's), and the encoder reads none.
"""

from __future__ import annotations

import json
import random

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import transformers
from modernbert_fixtures import TOL, directory

import bertjax
from bertjax.cli.main import main
from bertjax.data.squad import QAExample, write_squad
from bertjax.tasks.registry import TaskOptions, make_task, read_task_examples

LINES = ("To be, or not to be.", "The king is dead.", "Who is there?", "Long live the king!",
         "What light breaks?", "Good morrow, cousin.", "Stand and unfold yourself.",
         "Not a mouse stirring.")
NAMES = ("Hamlet", "Horatio", "Ophelia", "Laertes")


def _jsonl(path, rows: list[dict]):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def _classification(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        text = rng.choice(LINES)
        row = {"text": text, "label": "royal" if "king" in text else "common"}
        if i % 3 == 0:
            row["text_pair"] = rng.choice(LINES)
        rows.append(row)
    return rows


def _tagged(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        name = rng.choice(NAMES)
        words = [name, *rng.choice(LINES).split()][:6]
        rows.append({"tokens": words, "tags": ["B-PER"] + ["O"] * (len(words) - 1)})
    return rows


def _questions(rng: random.Random, n: int) -> list[QAExample]:
    out = []
    for i in range(n):
        name, line = rng.choice(NAMES), rng.choice(LINES)
        context = f"{line} {name} said so."
        out.append(QAExample(f"q{i}", "Who said so?", context, ((name, len(line) + 1),), f"q{i}"))
    return out


def _choices(rng: random.Random, n: int) -> list[dict]:
    rows = []
    for _ in range(n):
        picked = rng.sample(LINES, 3)
        rows.append({"context": rng.choice(LINES), "choices": picked, "label": rng.randrange(3)})
    return rows


def _data(task: str, tmp_path) -> list[str]:
    """--train and --validation files of `task`: 16 and 4 examples."""
    rng = random.Random(0)
    files = []
    for split, n in (("train", 16), ("validation", 4)):
        if task == "question-answering":
            path = tmp_path / f"{split}.json"
            write_squad(_questions(rng, n), path)
        else:
            make = {"classification": _classification, "token-classification": _tagged,
                    "multiple-choice": _choices}[task]
            path = _jsonl(tmp_path / f"{split}.jsonl", make(rng, n))
        files += [f"--{split}", str(path)]
    return files


# task -> (fixture config to start from, transformers' class written, extra options)
TASKS = {
    "classification": ("b", "ModernBertForSequenceClassification", []),
    "token-classification": ("a", "ModernBertForTokenClassification", []),
    "question-answering": ("b", "ModernBertForQuestionAnswering",
                           ["--doc-stride", "8", "--max-query-length", "8"]),
    "multiple-choice": ("a", "ModernBertForMultipleChoice", []),
}


@pytest.mark.slow
@pytest.mark.parametrize("task", TASKS)
def test_finetune_writes_what_transformers_runs_alike(task, tmp_path):
    config, written, extra = TASKS[task]
    start = directory(config, "BertModel")
    out = tmp_path / "run"
    assert main(["finetune", str(start), "--task", task, *_data(task, tmp_path), "--output-dir",
                 str(out), "--epochs", "1", "--batch-size", "8", "--max-length", "40",
                 "--no-progress", *extra]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 2  # 16 examples (QA: as many windows) in batches of 8
    saved = json.loads((out / "model" / "config.json").read_text())
    assert saved["architectures"] == [written]
    assert saved["classifier_pooling"] == json.loads((start / "config.json").read_text())[
        "classifier_pooling"]
    theirs, info = getattr(transformers, written).from_pretrained(out / "model",
                                                                  output_loading_info=True)
    assert {k: v for k, v in info.items() if v} == {}, info
    ours, tokenizer = bertjax.from_pretrained(out / "model")
    before, _ = bertjax.from_pretrained(start)
    trained = np.asarray(ours.bert.layers[1].mlp.wi.kernel[...])
    assert not np.allclose(trained, np.asarray(before.layers[1].mlp.wi.kernel[...]))
    _same_logits(ours, theirs, task)


def _same_logits(ours, theirs, task: str) -> None:
    """bertjax's and transformers' logits on a right-padded batch (per task: two texts, or one
    example's three choices), at the real tokens."""
    hf_tok = transformers.AutoTokenizer.from_pretrained(theirs.name_or_path)
    if task == "multiple-choice":
        batch = hf_tok(["The king is dead."] * 3, ["Long live the king!", "Who?", "To be."],
                       padding=True, return_tensors="np")
        batch = {k: v[None] for k, v in batch.items()}  # (1, 3, S)
    else:
        batch = hf_tok(["Who is there?", "Long live the king! Hamlet said so."], padding=True,
                       return_tensors="np")
    assert set(batch) == {"input_ids", "attention_mask"}  # no token types, as transformers'
    with torch.no_grad():
        out = theirs.eval()(**{k: torch.from_numpy(v) for k, v in batch.items()})
    got = ours(jnp.asarray(batch["input_ids"]), None, jnp.asarray(batch["attention_mask"]))
    fields = ("start_logits", "end_logits") if task == "question-answering" else ("logits",)
    mask = batch["attention_mask"].astype(bool)
    for field in fields:
        a, b = np.asarray(getattr(got, field)), getattr(out, field).numpy()
        if task in ("token-classification", "question-answering"):
            a, b = a[mask], b[mask]
        np.testing.assert_allclose(a, b, rtol=0, atol=TOL)


@pytest.mark.parametrize("task", TASKS)
def test_no_task_feeds_a_modernbert_token_types(task, tmp_path):
    """Each task's batches, pairs included ([CLS] A [SEP] B [SEP], question + context, context +
    choice): token type 0 everywhere, as transformers' tokenizer gives none; and the encoder
    reads none (type 1 everywhere changes nothing)."""
    model, tokenizer = bertjax.from_pretrained(directory("a", "BertModel"))
    train = read_task_examples(task, _data(task, tmp_path)[1], what="--train")
    made, labels = make_task(task, train, TaskOptions(doc_stride=8, max_query_length=8))
    named = model.config if labels is None else model.config.replace(id2label=labels)
    arrays = made.batch(tokenizer, made.units(tokenizer, train, 40), 40, named)
    assert (np.asarray(arrays["token_type_ids"]) == 0).all()
    ids, mask = (jnp.asarray(arrays[k]).reshape(-1, arrays[k].shape[-1])
                 for k in ("input_ids", "attention_mask"))
    np.testing.assert_array_equal(model(ids, jnp.ones_like(ids), mask).sequence_output,
                                  model(ids, None, mask).sequence_output)


def test_max_length_past_the_checkpoints_positions_is_one_line(tmp_path, capsys):
    """Fixture a has 64 positions (its config.json's max_position_embeddings): --max-length 65
    is refused in one line before anything is trained or written."""
    out = tmp_path / "run"
    assert main(["finetune", str(directory("a", "BertModel")), "--task", "classification",
                 *_data("classification", tmp_path), "--output-dir", str(out),
                 "--max-length", "65", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "--max-length 65 is longer than the model's 64 positions; pass --max-length 64 or " \
           "less" in err
    assert not out.exists()
