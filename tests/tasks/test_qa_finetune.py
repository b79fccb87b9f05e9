"""Fine-tuning for extractive question answering: a tiny model learns to find a name in contexts
longer than one window, the best epoch is exported as transformers' BertForQuestionAnswering with
the same logits, answers are decoded over windows and scored as SQuAD's script, and bad records
are named."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
import transformers
from use_helpers import qa_records, tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.data.squad import (
    QAExample,
    check_window,
    default_doc_stride,
    encode_squad,
    read_squad,
    write_squad,
)
from bertjax.heads import BertForQuestionAnswering
from bertjax.jobs.finetune.config import FinetuneJob
from bertjax.jobs.finetune.run import task_and_labels
from bertjax.tasks.question_answering import Decoding, QuestionAnsweringTask, decode

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5  # exported logits, max abs difference per unit of the largest logit (float32)
@pytest.fixture(scope="module")
def data(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("squad")
    paths = []
    for name, n, seed in (("train", 160, 0), ("validation", 40, 1), ("test", 40, 2)):
        write_squad(qa_records(n, seed), tmp / f"{name}.json")
        paths.append(tmp / f"{name}.json")
    return paths


@pytest.fixture(scope="module")
def finetuned(data, tmp_path_factory):
    out = tmp_path_factory.mktemp("reader") / "run"
    train, validation, test = data
    code = main(["finetune", str(tiny_checkpoint()), "--task", "question-answering",
                 "--train", str(train), "--validation", str(validation), "--test", str(test),
                 "--output-dir", str(out), "--epochs", "6", "--batch-size", "16",
                 "--optim.learning-rate", "2e-3", "--max-length", "48", "--doc-stride", "12",
                 "--max-query-length", "8", "--no-progress"])
    assert code == 0
    return out


def test_names_are_found_across_windows_and_scored_as_squad(finetuned, data):
    summary = json.loads((finetuned / "summary.json").read_text())
    assert summary["task"] == "question-answering"
    # a random span is almost never exact; names split into several pieces (not in the tiny
    # vocabulary) take a right start and a right end: 0.6-0.8 in 6 epochs
    assert summary["test"]["exact"] >= 0.5, summary
    assert summary["test"]["f1"] >= summary["test"]["exact"]
    answers = json.loads((finetuned / "answers_test.json").read_text())["predictions"]
    assert len(answers) == 40
    right = np.mean([a["predicted"] in a["answers"] for a in answers])
    assert right == pytest.approx(summary["test"]["exact"])


def test_exported_reader_loads_in_transformers_with_the_same_logits(finetuned, data):
    model, tokenizer = bertjax.from_pretrained(finetuned / "model",
                                               model_cls=BertForQuestionAnswering)
    theirs, info = transformers.BertForQuestionAnswering.from_pretrained(
        finetuned / "model", output_loading_info=True, attn_implementation="eager")
    assert not info["missing_keys"] and not info["unexpected_keys"]
    windows = encode_squad(tokenizer, read_squad(data[2])[:4], 48, 12, 8)
    assert len(windows.example) > 4  # long contexts take several windows
    with torch.no_grad():
        ref = theirs.eval()(torch.from_numpy(windows.input_ids).long(),
                            token_type_ids=torch.from_numpy(windows.token_type_ids).long(),
                            attention_mask=torch.from_numpy(windows.attention_mask).long())
    out = model(windows.input_ids, windows.token_type_ids, windows.attention_mask)
    # 1e-5 per unit of logit: trained at 2e-3 this reader's logits reach ~7, where float32
    # round-off alone moves them ~1e-5 (transformers' own float32 run is 5e-6 from float64)
    for ours, theirs_ in ((out.start_logits, ref.start_logits), (out.end_logits, ref.end_logits)):
        theirs_ = theirs_.numpy()
        bound = TOL * max(1.0, float(np.abs(theirs_).max()))
        assert float(np.abs(np.asarray(ours) - theirs_).max()) <= bound


def test_decoding_takes_the_best_span_over_windows_and_the_null_answer():
    examples = [QAExample("a", "Who?", "Hamlet and Horatio", (("Hamlet", 0),), "a")]
    offsets = np.full((2, 6, 2), -1)
    offsets[0, 3:5] = [[0, 6], [7, 10]]  # window 0: "Hamlet", "and"
    offsets[1, 3:5] = [[7, 10], [11, 18]]  # window 1: "and", "Horatio"
    windows = type("W", (), {"example": np.array([0, 0]), "offsets": offsets})()
    start = np.zeros((2, 6))
    end = np.zeros((2, 6))
    start[0, 3], end[0, 3] = 2.0, 2.0  # "Hamlet" scores 4 in window 0
    start[1, 4], end[1, 4] = 3.0, 3.0  # "Horatio" scores 6 in window 1
    assert decode(examples, windows, start, end) == {"a": "Horatio"}
    end[1, 3], start[1, 3] = 9.0, -20.0  # "and" ends best, but only after a later start
    assert decode(examples, windows, start, end) == {"a": "Horatio"}
    start[:, 0], end[:, 0] = 5.0, 5.0  # [CLS] 10 beats every span
    assert decode(examples, windows, start, end, allow_empty=True) == {"a": ""}
    assert decode(examples, windows, start, end, Decoding(null_threshold=5.0),
                  allow_empty=True) == {"a": "Horatio"}


def test_the_baseline_and_badqa_records(data, tmp_path, capsys):
    train = read_squad(data[0])
    name, scores = QuestionAnsweringTask().baseline(train, read_squad(data[2]), ())
    assert name == "the commonest training answer found in the context"
    assert scores.metrics["exact"] > 0.9  # one name per context: the commonest found is it
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"data": [{"paragraphs": [{"context": "Hamlet speaks.", "qas": [
        {"id": "z9", "question": "Who?", "answers": [{"text": "Hamlet", "answer_start": 3}]}]}]}]}))
    assert main(["finetune", str(tiny_checkpoint()), "--task", "question-answering", "--train",
                 str(bad), "--output-dir", str(tmp_path / "out")]) == 2
    assert "question 'z9': the answer 'Hamlet' is not at answer_start 3" in capsys.readouterr().err
    assert main(["finetune", str(tiny_checkpoint()), "--task", "question-answering", "--train",
                 str(data[0]), "--output-dir", str(tmp_path / "out"), "--max-length", "48",
                 "--doc-stride", "40", "--max-query-length", "8"]) == 2
    assert "doc_stride 40 must be below" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_the_default_stride_fits_every_window():
    for query in (8, 64):
        for max_length in range(query + 5, 600):
            check_window(max_length, default_doc_stride(max_length, query), query)
    assert default_doc_stride(384, 64) == 96 and default_doc_stride(1024, 64) == 128
    QuestionAnsweringTask().check_length(128)  # the README's call, FinetuneConfig's max_length


def test_squad_v2_is_what_the_training_data_is(data, tmp_path, capsys):
    v2 = qa_records(20, 3, impossible=0.5)
    assert 0 < sum(not e.answerable for e in v2) < len(v2)
    with pytest.raises(ValueError, match=r"the test data holds questions with no answer \(SQuAD"):
        QuestionAnsweringTask().check(v2, (), "the test data")
    QuestionAnsweringTask(version_2=True).check(v2, (), "the test data")
    write_squad(v2, tmp_path / "v2.json")
    for train, version_2 in ((data[0], False), (tmp_path / "v2.json", True)):
        job = FinetuneJob(task="question-answering", train=str(train))
        task, _ = task_and_labels(job, read_squad(train))
        assert task.version_2 is version_2
    # trained on v1.1, scored on v2.0: refused before anything is written
    out = tmp_path / "out"
    assert main(["finetune", str(tiny_checkpoint()), "--task", "question-answering", "--train",
                 str(data[0]), "--validation", str(tmp_path / "v2.json"), "--output-dir",
                 str(out), "--max-length", "48", "--max-query-length", "8"]) == 2
    assert "the validation data holds questions with no answer" in capsys.readouterr().err
    assert not out.exists()
