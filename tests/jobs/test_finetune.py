"""Fine-tuning and classifying: a tiny model learns a task it can learn, the best epoch is exported
where transformers reads it, scores are computed right, and bad input is named."""

from __future__ import annotations

import dataclasses
import json
import random

import matplotlib.image
import numpy as np
import pytest
import torch
import transformers
from use_helpers import sentences, tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.data.corpus import shakespeare_genres
from bertjax.data.labelled import GENRE_HELD_OUT, GENRE_MIN_WORDS, genre_examples, read_examples
from bertjax.heads import BertForSequenceClassification
from bertjax.jobs.finetune.config import FinetuneConfig
from bertjax.jobs.finetune.job import check_inputs
from bertjax.tasks.classification import ClassificationTask, predict, score

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def task(tmp_path_factory):
    """A task a tiny model can learn in a few steps: which of two phrases a sentence starts with
    (at the start: the end of a long line is cut at --max-length)."""
    rng = random.Random(0)
    lines = sentences(300)
    rows = [{"text": f"{'the king and his crown' if i % 2 else 'a fool and his jest'}. {line}",
             "label": "royal" if i % 2 else "folly"} for i, line in enumerate(lines)]
    rng.shuffle(rows)
    tmp = tmp_path_factory.mktemp("task")
    return (_write(tmp / "train.jsonl", rows[:160]), _write(tmp / "validation.jsonl", rows[160:200]),
            _write(tmp / "test.jsonl", rows[200:240]))


@pytest.fixture(scope="module")
def finetuned(task, tmp_path_factory):
    out = tmp_path_factory.mktemp("finetuned")
    train, validation, test = task
    code = main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--validation",
                 str(validation), "--test", str(test), "--output-dir", str(out), "--epochs", "3",
                 "--batch-size", "16", "--optim.learning-rate", "2e-3", "--max-length", "64",
                 "--no-progress"])
    assert code == 0
    return out


def test_the_task_is_learned_and_the_best_epoch_kept(finetuned):
    summary = json.loads((finetuned / "summary.json").read_text())
    evals = [r for r in map(json.loads, (finetuned / "metrics.jsonl").read_text().splitlines())
             if r["kind"] == "eval"]
    assert [e["epoch"] for e in evals] == [1, 2, 3]
    best = max(evals, key=lambda e: (e["accuracy"], e["macro_f1"]))
    assert summary["best_epoch"] == best["epoch"] and summary["validation"]["accuracy"] == best["accuracy"]
    assert summary["labels"] == ["folly", "royal"] and summary["baseline_scores"]["accuracy"] < 0.7
    assert summary["test"]["accuracy"] >= 0.9, summary  # far above the majority baseline
    for name in ("confusion_validation.png", "confusion_test.png"):
        image = matplotlib.image.imread(finetuned / name)
        # 2 labels: (1.2 + 0.7 * 2 + 1.5) x (1.2 + 0.7 * 2) inches at 100 dpi
        assert image.shape[:2] == (260, 410) and image.std() > 0.05


def test_exported_classifier_loads_in_transformers_with_the_same_logits(finetuned, task):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model",
                                               model_cls=BertForSequenceClassification)
    theirs, info = transformers.BertForSequenceClassification.from_pretrained(
        finetuned / "model", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    assert theirs.config.id2label == {0: "folly", 1: "royal"}
    examples = read_examples(task[2])[:8]
    enc = transformers.AutoTokenizer.from_pretrained(finetuned / "model")(
        [e.text for e in examples], padding=True, truncation=True, max_length=64, return_tensors="pt")
    with torch.no_grad():
        ref = torch.softmax(theirs.eval()(**enc).logits, -1).numpy()
    ours = predict(model, tokenizer, examples, max_length=64)
    assert float(np.abs(ours - ref).max()) <= 1e-5


def test_classify_command_scores_and_writes_predictions(finetuned, task, tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    assert main(["classify", str(finetuned / "model"), "--file", str(task[2]), "--out", str(out),
                 "--max-length", "64"]) == 0
    printed = capsys.readouterr().out
    records = [json.loads(line) for line in out.read_text().splitlines()]
    truth = [e.label for e in read_examples(task[2])]
    accuracy = np.mean([r["label"] == t for r, t in zip(records, truth, strict=True)])
    assert len(records) == 40 and f"40 labelled examples: accuracy {accuracy:.4f}" in printed
    summary = json.loads((finetuned.parent / finetuned.name / "summary.json").read_text())
    assert accuracy == pytest.approx(summary["test"]["accuracy"], abs=1e-9)


def test_bad_input_is_named(finetuned, task, tmp_path, capsys):
    unseen = _write(tmp_path / "unseen.jsonl", [{"text": "a line", "label": "royal"},
                                                {"text": "another", "label": "comedy"}])
    assert main(["classify", str(finetuned / "model"), "--file", str(unseen)]) == 2
    assert f"labels the model was not trained on: comedy (e.g. {unseen}:2)" in capsys.readouterr().err
    nolabel = _write(tmp_path / "nolabel.jsonl", [{"text": "a", "label": "x"}, {"text": "b"}])
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(nolabel), "--output-dir",
                 str(tmp_path / "o")]) == 2
    assert f"{nolabel}:2: no label in field 'label'" in capsys.readouterr().err
    empty = _write(tmp_path / "empty.jsonl", [{"text": " ", "label": "x"}])
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(empty), "--output-dir",
                 str(tmp_path / "o")]) == 2
    assert f"{empty}:1: the text in field 'text' is empty; give this example its text" in (
        capsys.readouterr().err)
    one = _write(tmp_path / "one.jsonl", [{"text": "a", "label": "x"}] * 20)
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(one), "--output-dir",
                 str(tmp_path / "o")]) == 2
    assert "has 1 label(s); a classifier needs 2 or more" in capsys.readouterr().err
    assert main(["classify", str(tiny_checkpoint()), "--file", str(unseen)]) == 2
    assert "has no weights for classifier" in capsys.readouterr().err
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(tmp_path / "missing.jsonl"),
                 "--output-dir", str(tmp_path / "o")]) == 2
    assert "missing.jsonl does not exist" in capsys.readouterr().err

    # the API takes lists: none to choose the best epoch on is named before anything runs
    train = read_examples(one)
    with pytest.raises(ValueError, match="the validation data holds no examples"):
        check_inputs(ClassificationTask(), None, train, [], None, FinetuneConfig())
    with pytest.raises(ValueError, match="the training data holds no examples"):  # packed too
        check_inputs(ClassificationTask(), None, [], train, None, FinetuneConfig(max_tokens=256))


def test_csv_and_pairs_are_read(tmp_path):
    path = tmp_path / "pairs.csv"
    path.write_text('text,text_pair,label\n"Hello, there",General Kenobi,greet\nbye,,part\n')
    examples = read_examples(path)
    assert [(e.text, e.text_pair, e.label) for e in examples] == [
        ("Hello, there", "General Kenobi", "greet"), ("bye", None, "part")]
    assert examples[1].where == f"{path}:3"


def test_scores_by_hand():
    probs = np.eye(3)[[0, 0, 1, 2, 2, 2]]  # predictions 0 0 1 2 2 2
    labels = np.array([0, 1, 1, 2, 2, 0])
    s = score(probs.astype(np.float32) * 0.98 + 0.01, labels)
    assert s.accuracy == pytest.approx(4 / 6)
    # per label F1: 0: p 1/2 r 1/2 -> .5; 1: p 1 r 1/2 -> 2/3; 2: p 2/3 r 1 -> .8
    assert s.macro_f1 == pytest.approx((0.5 + 2 / 3 + 0.8) / 3)
    assert s.confusion.tolist() == [[1, 0, 1], [1, 1, 0], [0, 0, 2]]


def test_genre_task_holds_out_whole_plays():
    genres = shakespeare_genres()
    assert sorted(set(genres.values())) == ["comedies", "histories", "problems", "roman", "romances",
                                            "tragedies"]
    for split, plays in GENRE_HELD_OUT.items():
        assert sorted(genres[p] for p in plays) == sorted(set(genres.values())), split
    test = genre_examples("test")
    train = genre_examples("train", per_genre=50)
    assert {e.where.split(" ")[0] for e in test} == set(GENRE_HELD_OUT["test"])
    held = {p for plays in GENRE_HELD_OUT.values() for p in plays}
    assert not {e.where.split(" ")[0] for e in train} & held
    assert all(len(e.text.split()) >= GENRE_MIN_WORDS for e in test + train)
    assert len(train) == 6 * 50 and {e.label for e in train} == set(genres.values())


def test_length_grouped_batches_cover_the_epoch_with_little_padding():
    from bertjax.jobs.finetune.job import length_grouped_batches

    rng = np.random.default_rng(0)
    lengths = rng.integers(5, 200, size=1000)
    batches = length_grouped_batches(lengths, 32, np.random.default_rng(1), group=10)
    rows = np.concatenate(batches)
    assert len(batches) == 1000 // 32 and all(len(b) == 32 for b in batches)
    assert len(set(rows.tolist())) == len(rows)  # no row twice
    grouped_padding = sum(lengths[b].max() * 32 - lengths[b].sum() for b in batches)
    random_batches = np.random.default_rng(2).permutation(1000)[:len(rows)].reshape(-1, 32)
    random_padding = sum(lengths[b].max() * 32 - lengths[b].sum() for b in random_batches)
    assert grouped_padding < 0.25 * random_padding
    again = length_grouped_batches(lengths, 32, np.random.default_rng(1), group=10)
    assert all(np.array_equal(a, b) for a, b in zip(batches, again, strict=True))  # seeded


def test_the_python_job_takes_the_commands_settings_and_gives_its_result(finetuned, task,
                                                                        tmp_path):
    """`run_job` with the FinetuneJob the command's options make is the command: the same
    summary, bit for bit the same scores (same seed, same data, same steps)."""
    from bertjax.jobs.finetune.config import FINETUNE_OPTIM, FinetuneJob
    from bertjax.jobs.finetune.run import run_job

    train, validation, test = task
    job = FinetuneJob(train=str(train), validation=str(validation), test=str(test), epochs=3,
                      batch_size=16, max_length=64,
                      optim=dataclasses.replace(FINETUNE_OPTIM, learning_rate=2e-3))
    result = run_job(tiny_checkpoint(), job, tmp_path / "out", progress=False)
    by_command = json.loads((finetuned / "summary.json").read_text())
    assert (result.validation, result.test, result.best_epoch) == (
        by_command["validation"], by_command["test"], by_command["best_epoch"])


def test_print_config_read_back_with_config_prints_the_same(tmp_path, capsys) -> None:
    """`finetune --print-config` needs no MODEL or --output-dir; its output read back with
    --config prints the same, and options beside --config win over the file."""
    argv = ["finetune", "--print-config", "--task=shakespeare-genres", "--epochs=2",
            "--optim.learning-rate=5e-4", "--dropout=0.2", "--max-tokens=256", "--per-genre=30"]
    assert main(argv) == 0
    first = capsys.readouterr().out
    assert "epochs = 2\n" in first and "max_tokens = 256\n" in first
    assert "[optim]\noptimizer = \"adamw\"\nlearning_rate = 0.0005\n" in first  # pretrain's section
    (tmp_path / "job.toml").write_text(first)
    assert main(["finetune", "--print-config", f"--config={tmp_path / 'job.toml'}"]) == 0
    assert capsys.readouterr().out == first
    assert main(["finetune", "--print-config", f"--config={tmp_path / 'job.toml'}",
                 "--epochs=4"]) == 0
    assert capsys.readouterr().out == first.replace("epochs = 2", "epochs = 4")


def test_finetune_without_model_or_output_dir_names_both(capsys) -> None:
    assert main(["finetune", "--task=shakespeare-genres"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("bertjax finetune: error: the following arguments are required: MODEL, "
                   "--output-dir (only --print-config answers without them)")
