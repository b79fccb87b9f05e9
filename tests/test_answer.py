"""`bertjax answer` against transformers' question-answering pipeline (4.57, its last release:
transformers 5 has none), whose answers on a small model are fixtures made once by
scripts/dev/make_qa_pipeline_fixtures.py: the same answers, character offsets and order exactly,
scores within 1e-5 (float32 softmax products), long contexts cut into windows included."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from use_helpers import count_row_sharing

import bertjax
from bertjax.cli.main import main
from bertjax.heads import BertForQuestionAnswering
from bertjax.use.answer import answer

FIXTURES = Path(__file__).parent / "fixtures" / "qa_pipeline"
CASES = json.loads((FIXTURES / "answers.json").read_text())["cases"]
TOL = 1e-5


@pytest.fixture(scope="module")
def loaded():
    return bertjax.from_pretrained(FIXTURES / "model", model_cls=BertForQuestionAnswering)


def _same(ours: list[dict], theirs: list[dict]) -> None:
    assert [(a["answer"], a["start"], a["end"]) for a in ours] == \
        [(a["answer"], a["start"], a["end"]) for a in theirs]
    for a, b in zip(ours, theirs, strict=True):
        assert abs(a["score"] - b["score"]) <= TOL, (a, b)


# 512: packed. A question's windows fill rows of their own length (only the last is shorter),
# so no two share a row here: the packed path removes padding, and there is no leak to catch
@pytest.mark.parametrize("max_tokens", [None, 512])
@pytest.mark.parametrize("case", CASES, ids=[f"{c['question']} {c['kwargs']}" for c in CASES])
def test_answers_equal_the_transformers_pipeline(loaded, case, max_tokens, monkeypatch):
    import bertjax.use.answer as module

    model, tokenizer = loaded
    sharing = count_row_sharing(monkeypatch, module)
    _same(answer(model, tokenizer, case["question"], case["context"], **case["kwargs"],
                 max_tokens=max_tokens), case["result"])
    assert bool(sharing) == bool(max_tokens)  # the packed path ran when asked, and only then


def test_the_command_prints_the_pipelines_objects(capsys):
    case = next(c for c in CASES if c["kwargs"].get("top_k") == 3 and "max_seq_len" in c["kwargs"])
    argv = ["answer", str(FIXTURES / "model"), "--question", case["question"], "--context",
            case["context"], "--json"]
    for key, value in case["kwargs"].items():
        argv += [f"--{key.replace('_', '-')}", str(value)]
    assert main(argv) == 0
    _same(json.loads(capsys.readouterr().out), case["result"])
    one = CASES[0]
    assert main(["answer", str(FIXTURES / "model"), "--question", one["question"], "--context",
                 one["context"], "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert isinstance(printed, dict)  # one answer: the object itself, as the pipeline returns
    _same([printed], one["result"])


def test_bad_input_is_named(loaded, capsys, tmp_path):
    model, tokenizer = loaded
    with pytest.raises(ValueError, match="give a question and a context"):
        answer(model, tokenizer, "Who?", " ")
    with pytest.raises(ValueError, match="max_seq_len 512 is longer than the model's 128"):
        answer(model, tokenizer, "Who?", "Hamlet.", max_seq_len=512)
    with pytest.raises(ValueError, match=r"with max_seq_len 40 a window holds \d context pieces, "
                                         r"not more than doc_stride 8; lower doc_stride "
                                         r"\(--doc-stride\) to \d or less, or raise max_seq_len "
                                         r"\(--max-seq-len\) to \d+ or more"):
        answer(model, tokenizer, "Who " * 30, "Hamlet.", max_seq_len=40, doc_stride=8)
    assert main(["answer", str(FIXTURES / "model"), "--question", "Who?"]) == 2
    assert "--context" in capsys.readouterr().err
    blank = tmp_path / "blank.txt"
    blank.write_text(" \n")
    assert main(["answer", str(FIXTURES / "model"), "--question", "Who?", "--context-file",
                 str(blank)]) == 2
    assert f"--context-file {blank} is empty" in capsys.readouterr().err
    pretraining = FIXTURES.parent / "flax_v4" / "FlaxBertForMaskedLM"
    assert main(["answer", str(pretraining), "--question", "Who?", "--context", "Hamlet."]) == 2
    assert "qa_outputs" in capsys.readouterr().err
