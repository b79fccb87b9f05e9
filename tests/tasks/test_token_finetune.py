"""Fine-tuning for token classification: a tiny model learns to tag names it can learn, the best
epoch is exported as transformers' BertForTokenClassification with the same logits, entity
scores and the memorisation baseline are reported, and bad records are named by file and line."""

from __future__ import annotations

import json
import os
import random
import types

import numpy as np
import pytest
import torch
import transformers
from use_helpers import sentences, tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.data.tagging import TaggedSentence, read_tagged
from bertjax.heads import BertForTokenClassification
from bertjax.tasks.token_classification import (
    TokenClassificationTask,
    most_frequent_tags,
    predict_tags,
)

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5  # exported logits, max abs difference (float32)
PEOPLE = [["Hamlet"], ["Ophelia"], ["Sir", "Toby", "Belch"], ["Horatio"]]
PLACES = [["Elsinore"], ["Denmark"], ["Illyria"]]


def _sentence(rng: random.Random, line: str) -> dict:
    """A line of the plays with a person and a place put in at random places."""
    words = line.split()[:12]
    person, place = rng.choice(PEOPLE), rng.choice(PLACES)
    at = sorted(rng.sample(range(len(words) + 1), 2))
    tokens = words[:at[0]] + person + words[at[0]:at[1]] + place + words[at[1]:]
    tags = (["O"] * at[0] + ["B-PER"] + ["I-PER"] * (len(person) - 1) + ["O"] * (at[1] - at[0])
            + ["B-LOC"] + ["I-LOC"] * (len(place) - 1) + ["O"] * (len(words) - at[1]))
    return {"tokens": tokens, "tags": tags}


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    rng = random.Random(0)
    rows = [_sentence(rng, line) for line in sentences(260) if len(line.split()) >= 3]
    tmp = tmp_path_factory.mktemp("tagged")
    conll = "\n\n".join("\n".join(f"{t} {g}" for t, g in zip(r["tokens"], r["tags"], strict=True))
                        for r in rows[200:240])
    (tmp / "test.conll").write_text(conll + "\n")
    return _write(tmp / "train.jsonl", rows[:160]), _write(tmp / "val.jsonl", rows[160:200]), \
        tmp / "test.conll"


@pytest.fixture(scope="module")
def finetuned(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("tagger") / "run"
    train, validation, test = data
    code = main(["finetune", str(tiny_checkpoint()), "--task", "token-classification",
                 "--train", str(train), "--validation", str(validation), "--test", str(test),
                 "--output-dir", str(out), "--epochs", "4", "--batch-size", "8",
                 "--optim.learning-rate", "3e-3", "--max-length", "48", "--no-progress"])
    assert code == 0
    return out


def test_names_are_learned_and_scored_at_the_entity_level(finetuned, data):
    summary = json.loads((finetuned / "summary.json").read_text())
    assert summary["task"] == "token-classification"
    assert summary["labels"] == ["O", "B-LOC", "B-PER", "I-LOC", "I-PER"]
    assert summary["test"]["f1"] >= 0.9, summary
    evals = [r for r in map(json.loads, (finetuned / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "eval"]
    best = max(evals, key=lambda e: (e["f1"], e["accuracy"]))
    assert summary["best_epoch"] == best["epoch"] and summary["validation"]["f1"] == best["f1"]
    report = json.loads((finetuned / "entities_test.json").read_text())
    assert set(report["per_type"]) == {"LOC", "PER"}
    assert report["true"] == 2 * len(read_tagged(data[2]))  # a person and a place in each
    assert summary["baseline"].startswith("each word's most frequent training tag")


def test_exported_tagger_loads_in_transformers_with_the_same_logits(finetuned, data):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model",
                                               model_cls=BertForTokenClassification)
    theirs, info = transformers.BertForTokenClassification.from_pretrained(
        finetuned / "model", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert theirs.config.id2label[2] == "B-PER"
    test = read_tagged(data[2])[:6]
    enc = transformers.AutoTokenizer.from_pretrained(finetuned / "model")(
        [list(s.tokens) for s in test], is_split_into_words=True, padding=True,
        return_tensors="pt")
    with torch.no_grad():
        ref = theirs.eval()(**enc).logits.numpy()
    ours = np.asarray(model(enc["input_ids"].numpy(), enc["token_type_ids"].numpy(),
                            enc["attention_mask"].numpy()).logits)
    assert float(np.abs(ours - ref).max()) <= TOL
    predicted, _ = predict_tags(model, tokenizer, test, max_length=48)
    first = [[int(np.argmax(ref[b, i])) for i, w in enumerate(enc.word_ids(b))
              if w is not None and (i == 0 or enc.word_ids(b)[i - 1] != w)]
             for b in range(len(test))]
    assert predicted == [[theirs.config.id2label[t] for t in row] for row in first]


def test_a_cut_word_is_predicted_outside(finetuned, data):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model",
                                               model_cls=BertForTokenClassification)
    sentence = read_tagged(data[0])[0]
    predicted, _ = predict_tags(model, tokenizer, [sentence], max_length=4)  # 2 pieces at most
    assert len(predicted[0]) == len(sentence.tokens) and set(predicted[0][2:]) == {"O"}


def test_the_data_and_the_loss_skip_the_same_label():
    from bertjax.data.tagging import IGNORE
    from bertjax.losses import IGNORE_INDEX

    assert IGNORE == IGNORE_INDEX == -100  # transformers' ignore index


def test_baseline_memorises_each_words_commonest_tag():
    train = [TaggedSentence(("Hamlet", "speaks"), ("B-PER", "O"), "a:1"),
             TaggedSentence(("Hamlet", "Hamlet"), ("B-LOC", "B-PER"), "a:4")]
    assert most_frequent_tags(train) == {"Hamlet": "B-PER", "speaks": "O"}
    test = [TaggedSentence(("Hamlet", "Horatio"), ("B-PER", "B-PER"), "b:1")]
    name, scores = TokenClassificationTask().baseline(train, test, ("O", "B-PER"))
    assert scores.metrics["precision"] == 1.0 and scores.metrics["recall"] == 0.5


def test_label_all_pieces_labels_later_pieces_inside(finetuned):
    _, tokenizer = bertjax.from_pretrained(finetuned / "model", model_cls=BertForTokenClassification)
    config = types.SimpleNamespace(id2label=("O", "B-PER", "I-PER"))  # what batch() reads
    sentence = TaggedSentence(("Rosencrantz", "speaks"), ("B-PER", "O"), "x:1")
    pieces = len(tokenizer.encode_batch(["Rosencrantz"])[0])
    assert pieces > 2
    first = TokenClassificationTask().batch(tokenizer, [sentence], 32, config)["labels"][0]
    every = TokenClassificationTask(label_all_pieces=True).batch(tokenizer, [sentence], 32,
                                                                 config)["labels"][0]
    assert first[1:pieces + 2].tolist() == [1] + [-100] * (pieces - 1) + [0]
    assert every[1:pieces + 2].tolist() == [1] + [2] * (pieces - 1) + [0]


def test_a_model_of_another_head_is_refused(tmp_path):
    from bertjax.jobs.finetune.job import finetune

    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())  # BertForPreTraining
    sentence = TaggedSentence(("a",), ("O",), "x:1")
    with pytest.raises(ValueError, match="token-classification fine-tunes a "
                                         "BertForTokenClassification, got BertForPreTraining"):
        finetune(model, tokenizer, [sentence], [sentence], tmp_path / "out",
                 task=TokenClassificationTask())
    assert not (tmp_path / "out").exists()


def test_bad_records_are_named_with_file_and_line(data, tmp_path, capsys):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"tokens": ["a", "b"], "tags": ["O", "B-PER"]}) + "\n"
                   + json.dumps({"tokens": ["a", "b"], "tags": ["O"]}) + "\n")
    argv = ["finetune", str(tiny_checkpoint()), "--task", "token-classification", "--train",
            str(bad), "--output-dir", str(tmp_path / "out")]
    assert main(argv) == 2
    assert f"{bad}:2" in capsys.readouterr().err
    unseen = _write(tmp_path / "val.jsonl", [{"tokens": ["Rome"], "tags": ["B-CITY"]}])
    argv = ["finetune", str(tiny_checkpoint()), "--task", "token-classification", "--train",
            str(data[0]), "--validation", str(unseen), "--output-dir", str(tmp_path / "out")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"{unseen}:1: tags the model was not given: B-CITY" in err
    assert sorted(os.listdir(tmp_path)) == ["bad.jsonl", "val.jsonl"]  # nothing written
