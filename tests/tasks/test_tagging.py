"""Token classification foundations: tagged-sentence readers, WordPiece label alignment and the
entity metric.

The metric is checked against seqeval 1.2.2 itself: tests/fixtures/seqeval/cases.json holds its
outputs on 38 tricky sequences (made by scripts/dev/make_seqeval_fixtures.py in a side environment;
seqeval is no dependency). Tolerances: entity and token counts exactly, scores within 1e-12.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bertjax.data.tagging import (
    IGNORE,
    TaggedSentence,
    align_labels,
    b_to_i_ids,
    encode_tagged,
    label_list,
    read_tagged,
    words_cut,
)
from bertjax.data.tokenizer import Tokenizer
from bertjax.tasks.entities import entity_scores, get_entities

TOL = 1e-12
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "seqeval" / "cases.json"
SEQEVAL = json.loads(FIXTURES.read_text())
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "eu", "reject", "##s", "german", "call",
         "to", "boycott", "british", "lamb", ".", "un", "##believ", "##able", "u", "s", "peter"]


def _write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory) -> Tokenizer:
    vocab = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in VOCAB))
    return Tokenizer.load(vocab)


def _id(token: str) -> int:
    return VOCAB.index(token)


# --- readers ---------------------------------------------------------------------------------------

CONLL = """-DOCSTART- -X- -X- O

EU NNP B-NP B-ORG
rejects VBZ B-VP O
German JJ B-NP B-MISC


Peter NNP B-NP B-PER
Blackburn NNP I-NP I-PER
"""


def test_conll_sentences_token_first_tag_last(tmp_path):
    path = _write(tmp_path, "train.txt", CONLL)
    assert read_tagged(path) == [
        TaggedSentence(("EU", "rejects", "German"), ("B-ORG", "O", "B-MISC"), f"{path}:3"),
        TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), f"{path}:8"),
    ]


def test_two_column_conll_without_final_blank_line(tmp_path):
    path = _write(tmp_path, "dev.conll", "Peter\tB-PER\nsaid O")
    assert read_tagged(path) == [
        TaggedSentence(("Peter", "said"), ("B-PER", "O"), f"{path}:1")]


def test_json_lines_with_renamed_fields(tmp_path):
    path = _write(tmp_path, "train.jsonl",
                  '{"words": ["EU", "rejects"], "ner": ["B-ORG", "O"]}\n\n'
                  '{"words": ["Peter", "Blackburn"], "ner": ["B-PER", "I-PER"], "id": 7}\n')
    assert read_tagged(path, tokens_field="words", tags_field="ner") == [
        TaggedSentence(("EU", "rejects"), ("B-ORG", "O"), f"{path}:1"),
        TaggedSentence(("Peter", "Blackburn"), ("B-PER", "I-PER"), f"{path}:3"),
    ]


# (file name, content, line named, words the message must hold)
BAD_RECORDS = [
    ("one column", "a.txt", "EU B-ORG\nrejects\n", 2, ["one column", "'rejects'"]),
    ("IOB1 after O", "a.txt", "EU O\nPeter I-PER\n", 2, ["'I-PER'", "IOB1", "BIO/IOB2"]),
    ("IOB1 at start", "a.txt", "EU O\n\nPeter I-PER\n", 3, ["starts the sentence", "BIO/IOB2"]),
    ("I- of another type", "a.txt", "Peter B-PER\nEU I-ORG\n", 2, ["'I-ORG' follows 'B-PER'"]),
    ("IOBES tag", "a.txt", "EU O\nPeter S-PER\n", 2, ["'S-PER'", "IOBES", "BIO/IOB2"]),
    ("empty type", "a.txt", "EU B-\n", 1, ["'B-'", "not a BIO tag"]),
    ("lower case", "a.txt", "EU b-org\n", 1, ["'b-org'", "not a BIO tag"]),
    ("json lengths", "a.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n'
     '{"tokens": ["a", "b"], "tags": ["O"]}\n', 2, ["2 tokens but 1 tags"]),
    ("json empty token", "a.jsonl", '{"tokens": ["a", ""], "tags": ["O", "O"]}\n', 1,
     ['token 2 is ""', "non-empty"]),
    ("json blank token", "a.jsonl", '{"tokens": [" "], "tags": ["O"]}\n', 1, ["token 1"]),
    ("json tag ids", "a.jsonl", '{"tokens": ["a"], "tags": [3]}\n', 1, ["integer 3", "names"]),
    ("json IOB1", "a.jsonl", '\n{"tokens": ["a", "b"], "tags": ["O", "I-LOC"]}\n', 2,
     ["tag 2", "'I-LOC'", "IOB1"]),
    ("json missing field", "a.jsonl", '{"tokens": ["a"], "labels": ["O"]}\n', 1,
     ["no field 'tags'", "labels", "--tags-field"]),
    ("json not a list", "a.jsonl", '{"tokens": "a b", "tags": ["O", "O"]}\n', 1,
     ["'tokens' is not a list"]),
    ("json no tokens", "a.jsonl", '{"tokens": [], "tags": []}\n', 1, ["no tokens"]),
    ("not json", "a.jsonl", '{"tokens": ["a"], "tags": ["O"]}\n{"tokens": [\n', 2,
     ["not a JSON object"]),
]


@pytest.mark.parametrize("name,content,line,words", [c[1:] for c in BAD_RECORDS],
                         ids=[c[0] for c in BAD_RECORDS])
def test_every_bad_record_names_file_and_line(tmp_path, name, content, line, words):
    path = _write(tmp_path, name, content)
    with pytest.raises(ValueError) as err:
        read_tagged(path)
    message = str(err.value)
    assert message.startswith(f"{path}:{line}"), message
    for word in words:
        assert word in message, message


@pytest.mark.parametrize("name,content", [("a.txt", ""), ("a.txt", "-DOCSTART- O\n\n\n"),
                                          ("a.jsonl", "\n\n")])
def test_a_file_without_sentences_is_refused(tmp_path, name, content):
    path = _write(tmp_path, name, content)
    with pytest.raises(ValueError, match=rf"--train {path} holds no sentences"):
        read_tagged(path, what="--train")


def test_missing_file_names_the_option(tmp_path):
    with pytest.raises(ValueError, match=r"--dev .*nope.txt does not exist"):
        read_tagged(tmp_path / "nope.txt", what="--dev")


def test_label_list_o_first_then_b_and_i_of_every_type_sorted():
    sentences = [TaggedSentence(("a", "b"), ("B-PER", "O"), "x:1"),
                 TaggedSentence(("c", "d"), ("B-LOC", "I-LOC"), "x:4")]
    labels = label_list(sentences)
    assert labels == ("O", "B-LOC", "B-PER", "I-LOC", "I-PER")
    ids = {t: i for i, t in enumerate(labels)}
    assert b_to_i_ids(ids) == {0: 0, 1: 3, 2: 4, 3: 3, 4: 4}
    assert b_to_i_ids({"O": 0, "B-X": 1}) == {0: 0, 1: 1}  # no I-X known: B-X stays


# --- alignment -------------------------------------------------------------------------------------

WORD_IDS = [None, 0, 0, 1, 2, 2, 2, None, None]  # [CLS] w0 w0 w1 w2 w2 w2 [SEP] [PAD]
TAGS = [1, 0, 2]  # B-PER, O, B-LOC with labels O=0 B-PER=1 B-LOC=2 I-PER=3 I-LOC=4
B_TO_I = {0: 0, 1: 3, 2: 4, 3: 3, 4: 4}


def test_first_piece_of_each_word_is_labelled():
    assert align_labels(WORD_IDS, TAGS) == [IGNORE, 1, IGNORE, 0, 2, IGNORE, IGNORE, IGNORE,
                                            IGNORE]
    assert align_labels(WORD_IDS, TAGS, ignore=-1) == [-1, 1, -1, 0, 2, -1, -1, -1, -1]


def test_all_pieces_labelled_with_b_turned_into_i():
    assert align_labels(WORD_IDS, TAGS, label_all_pieces=True, b_to_i=B_TO_I) == [
        IGNORE, 1, 3, 0, 2, 4, 4, IGNORE, IGNORE]
    with pytest.raises(ValueError, match="b_to_i"):
        align_labels(WORD_IDS, TAGS, label_all_pieces=True)


def test_truncated_words_lose_their_labels_and_are_reported():
    cut = [None, 0, 0, 1, 2, None]  # w2's first piece kept, w3 and w4 gone
    assert align_labels(cut, [1, 0, 2, 0, 1]) == [IGNORE, 1, IGNORE, 0, 2, IGNORE]
    assert words_cut(cut, 5) == (3, 4)
    assert words_cut(WORD_IDS, 3) == ()
    with pytest.raises(ValueError, match="word id 3 has no tag"):
        align_labels([None, 3, None], TAGS)


# --- encoding with a real WordPiece tokenizer ------------------------------------------------------

SENTENCE = TaggedSentence(("EU", "rejects", "Unbelievable", "lamb", "."),
                          ("B-ORG", "O", "B-MISC", "O", "O"), "t:1")
LABELS = {"O": 0, "B-MISC": 1, "B-ORG": 2, "I-MISC": 3, "I-ORG": 4}


def test_encode_first_piece_labels(tokenizer):
    batch = encode_tagged(tokenizer, [SENTENCE], LABELS, max_length=12)
    pieces = ["[CLS]", "eu", "reject", "##s", "un", "##believ", "##able", "lamb", ".", "[SEP]"]
    assert batch.input_ids.tolist() == [[_id(p) for p in pieces] + [_id("[PAD]")] * 2]
    assert batch.attention_mask.tolist() == [[1] * 10 + [0] * 2]
    assert batch.token_type_ids.tolist() == [[0] * 12]
    assert batch.word_ids.tolist() == [[-1, 0, 1, 1, 2, 2, 2, 3, 4, -1, -1, -1]]
    assert batch.labels.tolist() == [[IGNORE, 2, 0, IGNORE, 1, IGNORE, IGNORE, 0, 0] + [IGNORE] * 3]
    assert batch.cut == [()]
    assert {k: v.dtype for k, v in batch.arrays().items()} == dict.fromkeys(
        ["input_ids", "token_type_ids", "attention_mask", "labels"], np.dtype(np.int32))


def test_encode_all_pieces_labels(tokenizer):
    batch = encode_tagged(tokenizer, [SENTENCE], LABELS, max_length=12, label_all_pieces=True)
    assert batch.labels.tolist() == [[IGNORE, 2, 0, 0, 1, 3, 3, 0, 0] + [IGNORE] * 3]


def test_encode_truncates_pieces_and_reports_cut_words(tokenizer):
    short = TaggedSentence(("EU", "Peter"), ("B-ORG", "O"), "t:9")
    batch = encode_tagged(tokenizer, [SENTENCE, short], LABELS, max_length=6)
    assert batch.input_ids.shape == (2, 6)
    assert batch.input_ids[0].tolist() == [_id(p) for p in
                                           ["[CLS]", "eu", "reject", "##s", "un", "[SEP]"]]
    assert batch.labels[0].tolist() == [IGNORE, 2, 0, IGNORE, 1, IGNORE]  # word 2 keeps B-MISC
    assert batch.cut == [(3, 4), ()]
    assert batch.input_ids[1].tolist() == [_id(p) for p in
                                           ["[CLS]", "eu", "peter", "[SEP]", "[PAD]", "[PAD]"]]


def test_pieces_are_each_words_own_pieces(tokenizer):
    """Pre-split encoding gives each word the pieces the tokenizer gives it alone; a word of
    several pre-tokens ("U.S.") stays one word; a word with no pieces becomes [UNK]."""
    words = ("U.S.", "\u200b", "British", "lamb", "call", "to", "boycott")
    sentence = TaggedSentence(words, ("B-LOC", "O", "B-MISC", "O", "O", "O", "O"), "t:3")
    batch = encode_tagged(tokenizer, [sentence], {"O": 0, "B-LOC": 1, "B-MISC": 2}, 32)
    alone = tokenizer.encode_batch(list(words))
    assert alone[1] == []  # the zero-width space has no pieces of its own
    expected = [p or [tokenizer.special.unk] for p in alone]
    n = sum(map(len, expected))
    assert batch.input_ids[0, 1:n + 1].tolist() == [i for p in expected for i in p]
    assert batch.word_ids[0, 1:n + 1].tolist() == [w for w, p in enumerate(expected) for _ in p]
    assert batch.labels[0, 1:n + 1].tolist() == [1, IGNORE, IGNORE, IGNORE, 0, 2, 0, 0, 0, 0]


def test_encode_refuses_unknown_tags_and_no_room(tokenizer):
    with pytest.raises(ValueError, match=r"t:1: tags the model does not know: B-ORG"):
        encode_tagged(tokenizer, [SENTENCE], {"O": 0, "B-MISC": 1}, 12)
    with pytest.raises(ValueError, match="at least 3"):
        encode_tagged(tokenizer, [SENTENCE], LABELS, 2)


def test_data_and_metric_import_no_framework():
    code = ("import sys, bertjax.data.tagging, bertjax.tasks.entities; "
            "print([m for m in sys.modules if m.split('.')[0] in ('jax', 'flax', 'torch')])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


# --- the metric, against seqeval -------------------------------------------------------------------

def test_seqeval_readme_default_mode():
    """seqeval's README ("default mode"):

        >>> y_true = [['O', 'O', 'O', 'B-MISC', 'I-MISC', 'I-MISC', 'O'], ['B-PER', 'I-PER', 'O']]
        >>> y_pred = [['O', 'O', 'B-MISC', 'I-MISC', 'I-MISC', 'I-MISC', 'O'], ['B-PER', 'I-PER', 'O']]
        >>> f1_score(y_true, y_pred)
        0.50
        >>> classification_report(y_true, y_pred)
                      precision    recall  f1-score   support
                MISC       0.00      0.00      0.00         1
                 PER       1.00      1.00      1.00         1
           micro avg       0.50      0.50      0.50         2
           macro avg       0.50      0.50      0.50         2
        weighted avg       0.50      0.50      0.50         2
    and `accuracy_score` (its docstring) 0.80."""
    y_true = [["O", "O", "O", "B-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    y_pred = [["O", "O", "B-MISC", "I-MISC", "I-MISC", "I-MISC", "O"], ["B-PER", "I-PER", "O"]]
    s = entity_scores(y_true, y_pred)
    assert (s["precision"], s["recall"], s["f1"], s["true"]) == (0.5, 0.5, 0.5, 2)
    assert s["per_type"]["MISC"] == {"precision": 0.0, "recall": 0.0, "f1": 0.0, "support": 1,
                                     "predicted": 1, "correct": 0}
    assert s["per_type"]["PER"] == {"precision": 1.0, "recall": 1.0, "f1": 1.0, "support": 1,
                                    "predicted": 1, "correct": 1}
    assert s["macro"] == s["weighted"] == {"precision": 0.5, "recall": 0.5, "f1": 0.5}
    assert s["accuracy"] == pytest.approx(0.8, abs=TOL)


def test_seqeval_readme_default_is_not_strict():
    """seqeval's README, "a minimum case to explain differences between the default and strict
    mode": y_true [['B-NP', 'I-NP', 'O']], y_pred [['I-NP', 'I-NP', 'O']]; the default report
    says NP 1.00 1.00 1.00 1 (strict mode: 0.00)."""
    s = entity_scores([["B-NP", "I-NP", "O"]], [["I-NP", "I-NP", "O"]])
    assert (s["precision"], s["recall"], s["f1"], s["per_type"]["NP"]["support"]) == (1, 1, 1, 1)


def test_seqeval_get_entities_docstring():
    """>>> get_entities(['B-PER', 'I-PER', 'O', 'B-LOC'])  ->  [('PER', 0, 1), ('LOC', 3, 3)]"""
    assert get_entities(["B-PER", "I-PER", "O", "B-LOC"]) == [("PER", 0, 1), ("LOC", 3, 3)]


CASES = SEQEVAL["cases"]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_entities_match_seqeval(case):
    for key, seqs in (("true_entities", case["true"]), ("pred_entities", case["pred"])):
        assert [get_entities(s) for s in seqs] == [[tuple(e) for e in es] for es in case[key]]


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_scores_match_seqeval(case):
    s, report = entity_scores(case["true"], case["pred"]), case["report"]
    assert set(s["per_type"]) | {"micro avg", "macro avg", "weighted avg"} == set(report)
    assert s["true"] == report["micro avg"]["support"]
    assert s["predicted"] == sum(len(es) for es in case["pred_entities"])
    rows = {**s["per_type"], "micro avg": s, "macro avg": s["macro"],
            "weighted avg": s["weighted"]}
    for name, want in report.items():
        if name in s["per_type"]:
            assert s["per_type"][name]["support"] == want["support"], name
        for ours, theirs in (("precision", "precision"), ("recall", "recall"), ("f1", "f1-score")):
            expected = 0.0 if want[theirs] is None else want[theirs]  # seqeval: NaN, no types
            assert abs(rows[name][ours] - expected) <= TOL, (name, ours)
    for key in ("precision", "recall", "f1", "accuracy"):
        assert abs(s[key] - case[key]) <= TOL, key


def test_fixtures_cover_the_tricky_cases():
    names = {c["name"] for c in CASES}
    assert {"I- opens the sentence", "I- after O", "type switch inside a run", "trailing B-",
            "no entity spans sentences"} <= names
    assert SEQEVAL["seqeval"] == "1.2.2" and len(CASES) >= 30


@pytest.mark.parametrize("true,pred,match", [
    ([["O"]], [["O"], ["O"]], "1 true sentences but 2 predicted"),
    ([["O", "O"]], [["O"]], "sentence 0 has 2 true tags but 1 predicted"),
    ([["O", ""]], [["O", "O"]], r"true sentence 0\[1\] is ''"),
    ([[]], [[]], "no tokens"),
])
def test_metric_refuses_mismatched_input(true, pred, match):
    with pytest.raises(ValueError, match=match):
        entity_scores(true, pred)
    with pytest.raises(ValueError, match="not the string"):
        get_entities("B-PER")
