"""Question answering data and metric: SQuAD files read with every bad record named, windows over
long contexts equal to a Hugging Face fast tokenizer's overflowing windows (ids, types, mask and
character offsets, exactly), answer positions as transformers' run_qa labels them, and exact
match / F1 as the official SQuAD scripts normalise answers."""

from __future__ import annotations

import json

import numpy as np
import pytest
import transformers
from use_helpers import sentences, tiny_checkpoint

from bertjax.data.squad import NO_OFFSET, QAExample, encode_squad, read_squad, window_count
from bertjax.data.tokenizer import Tokenizer
from bertjax.tasks.squad_metric import exact_match, f1, normalize_answer, squad_scores


@pytest.fixture(scope="module")
def tokenizers():
    path = tiny_checkpoint()
    return Tokenizer.load(path / "vocab.txt"), transformers.AutoTokenizer.from_pretrained(
        path)


def _examples(n: int = 6) -> list[QAExample]:
    """Contexts of one to many windows; each answer a word inside them."""
    lines = sentences(200)
    out = []
    for i in range(n):
        context = " ".join(lines[i * 20:i * 20 + 2 + 6 * i])
        word = context.split()[len(context.split()) * 2 // 3].strip(",.;:!?'")
        start = context.index(word, len(context) // 2 - 10 if i else 0)
        out.append(QAExample(f"q{i}", f"Who says line {i} of {lines[i].split()[0]}?", context,
                             ((word, start),),
                             f"test: q{i}"))
    return out


@pytest.mark.parametrize(("max_length", "stride"), [(48, 8), (64, 20), (128, 0)])
def test_windows_equal_the_fast_tokenizers_overflow(tokenizers, max_length, stride):
    ours_tok, theirs_tok = tokenizers
    examples = _examples()
    ours = encode_squad(ours_tok, examples, max_length, stride, max_query_length=16)  # no cut
    theirs = theirs_tok([e.question for e in examples], [e.context for e in examples],
                        truncation="only_second", max_length=max_length, stride=stride,
                        return_overflowing_tokens=True, return_offsets_mapping=True,
                        padding="max_length")
    assert len(theirs["input_ids"]) == len(ours.example) > len(examples)  # some have several
    assert ours.example.tolist() == theirs["overflow_to_sample_mapping"]
    for key in ("input_ids", "token_type_ids", "attention_mask"):
        np.testing.assert_array_equal(getattr(ours, key), np.array(theirs[key]), err_msg=key)
    for r in range(len(ours.example)):
        context = [i for i, s in enumerate(theirs.sequence_ids(r)) if s == 1]
        expected = np.full((max_length, 2), NO_OFFSET)
        expected[context] = np.array(theirs["offset_mapping"][r])[context]
        np.testing.assert_array_equal(ours.offsets[r], expected)
        words = [w if s == 1 else NO_OFFSET
                 for w, s in zip(theirs.word_ids(r), theirs.sequence_ids(r), strict=True)]
        np.testing.assert_array_equal(ours.words[r], words)
        s, t = _run_qa_positions(examples[ours.example[r]], theirs, r)
        assert (ours.start_positions[r], ours.end_positions[r]) == (s, t), r
    assert window_count(ours_tok, examples, max_length, stride, 16).tolist() == \
        np.bincount(ours.example).tolist()


def _run_qa_positions(example: QAExample, encoded, r: int) -> tuple[int, int]:
    """transformers' examples/pytorch/question-answering/run_qa.py `prepare_train_features`,
    transcribed: the answer's first and last token in window `r`, or the [CLS] index. One fix:
    run_qa's forward walk goes on past the context into [SEP] and padding (their offsets start at
    0), so an answer starting on a window's last context piece gets start = end + 1; the walk
    here stops at the context's end, as bertjax does."""
    offsets, sequence_ids = encoded["offset_mapping"][r], encoded.sequence_ids(r)
    text, start_char = example.answers[0]
    end_char = start_char + len(text)
    token_start = 0
    while sequence_ids[token_start] != 1:
        token_start += 1
    token_end = len(encoded["input_ids"][r]) - 1
    while sequence_ids[token_end] != 1:
        token_end -= 1
    if not (offsets[token_start][0] <= start_char and offsets[token_end][1] >= end_char):
        return 0, 0
    context_end = token_end
    while token_start <= context_end and offsets[token_start][0] <= start_char:
        token_start += 1
    while offsets[token_end][1] >= end_char:
        token_end -= 1
    return token_start - 1, token_end + 1


def test_unanswerable_questions_point_at_cls_and_long_questions_are_cut(tokenizers):
    tok, _ = tokenizers
    example = QAExample("x", "who " * 40 + "?", "To be, or not to be.", (), "t: x")
    windows = encode_squad(tok, [example], 64, 8, max_query_length=10)
    assert windows.start_positions.tolist() == windows.end_positions.tolist() == [0]
    assert int(windows.token_type_ids[0].argmax()) == 12  # [CLS] + 10 question pieces + [SEP]
    with pytest.raises(ValueError, match="doc_stride 60 must be below the 51 context pieces"):
        encode_squad(tok, [example], 64, 60, max_query_length=10)
    with pytest.raises(ValueError, match="max_length 12 leaves no room for context"):
        encode_squad(tok, [example], 12, 0, max_query_length=10)


def _squad(tmp_path, qas, context="Hamlet is the Prince of Denmark."):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "v2.0", "data": [
        {"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]}))
    return path


def test_squad_files_are_read_and_bad_records_named(tmp_path):
    good = _squad(tmp_path, [
        {"id": "a", "question": "Who?", "answers": [{"text": "Hamlet", "answer_start": 0}]},
        {"id": "b", "question": "What?", "answers": [], "is_impossible": True}])
    a, b = read_squad(good)
    assert a.answers == (("Hamlet", 0),) and a.answerable and not b.answerable
    cases = [
        ([{"id": "c", "question": "Q", "answers": [{"text": "Prince", "answer_start": 3}]}],
         "question 'c': the answer 'Prince' is not at answer_start 3 of its context (the text "
         "is at 14)"),
        ([{"id": "d", "question": "Q", "answers": [{"text": "Rome", "answer_start": 0}]}],
         "the text is not in the context"),
        ([{"id": "e", "question": "Q", "answers": []}], "question 'e': no answers and not marked"),
        ([{"id": "f", "question": "Q", "is_impossible": True}] * 2, "the id 'f' is used twice"),
        ([{"id": "g", "question": " ", "is_impossible": True}], "question 'g': no text in 'question'"),
    ]
    for qas, message in cases:
        with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
            read_squad(_squad(tmp_path, qas))
    (tmp_path / "x.json").write_text('{"rows": []}')
    with pytest.raises(ValueError, match="has no 'data' list: not SQuAD's layout"):
        read_squad(tmp_path / "x.json")


# The official scripts' normalisation and scores, worked by hand from their definitions.
def test_answers_are_normalised_as_the_official_script():
    assert normalize_answer("The  Prince, of DENMARK!") == "prince of denmark"
    assert normalize_answer("an apple a day") == "apple day"
    assert normalize_answer("theatre") == "theatre"  # articles are whole words
    assert exact_match("the Prince", "prince") == 1.0
    assert f1("prince of denmark", "the prince") == pytest.approx(2 * (1 / 3) * 1 / (1 / 3 + 1))
    assert f1("", "") == 1.0 and f1("x", "") == 0.0 and f1("a", "the") == 1.0  # both empty


def test_squad_scores_take_the_best_gold_and_split_unanswerable():
    golds = {"1": ["Hamlet", "Prince Hamlet"], "2": ["Denmark"], "3": []}
    scores = squad_scores({"1": "prince hamlet", "2": "in Denmark", "3": ""}, golds)
    assert scores["exact"] == pytest.approx(2 / 3)
    assert scores["f1"] == pytest.approx((1 + 2 / 3 + 1) / 3)
    assert scores["has_answer_total"] == 2 and scores["no_answer_exact"] == 1.0
    # an answer that normalises to nothing ("The") is answerable, scored against "" (the script)
    scores = squad_scores({"4": ""}, {"4": ["The"]})
    assert scores["has_answer_total"] == 1 and scores["has_answer_exact"] == 1.0
    assert "no_answer_total" not in scores
    with pytest.raises(ValueError, match="1 questions have no prediction"):
        squad_scores({"1": "x", "2": "y"}, golds)
