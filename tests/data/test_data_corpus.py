"""Corpora: Shakespeare scenes and splits, BERT text, JSON lines, paths, and bad input."""

from __future__ import annotations

import json
import re

import pytest

from bertjax.data import (
    EVAL_PLAYS,
    corpus_documents,
    jsonl_documents,
    shakespeare_documents,
    shakespeare_plays,
    split_sentences,
    text_documents,
)
from bertjax.data.corpus import parse_play, shakespeare_play_files


def test_shakespeare_has_38_plays_and_a_disjoint_held_out_split():
    assert len(shakespeare_play_files()) == 38
    train, held = shakespeare_plays("train"), shakespeare_plays("eval")
    assert sorted(held) == sorted(EVAL_PLAYS) and len(train) == 36
    assert not set(train) & set(held)
    assert sorted(train + held) == shakespeare_plays("all")
    assert shakespeare_plays("eval", eval_plays=["macbeth"]) == ["macbeth"]
    with pytest.raises(ValueError, match="unknown eval plays.*'no-such-play'"):
        shakespeare_plays("train", eval_plays=["no-such-play"])


def test_shakespeare_documents_are_scenes_without_markup():
    eval_docs = list(shakespeare_documents("eval"))
    train_docs = list(shakespeare_documents("train"))
    # Hamlet has 20 scenes and Twelfth Night 18 in this edition
    assert len(eval_docs) == 38 and len(train_docs) > 700
    sentences = [s for d in eval_docs for s in d]
    assert len(sentences) > 4000
    assert not [s for s in sentences if re.search(r"[#*_\[\]\\]", s)]
    assert not [s for s in sentences if s != s.strip() or not s]
    assert "To be, or not to be: that is the question:" in " ".join(sentences)
    assert not set(sentences[:2000]) & {"HAMLET", "Enter HAMLET"}
    assert eval_docs == list(shakespeare_documents("eval"))  # deterministic
    # whole plays are held out: no long (play-specific) held-out sentence is in the training split
    long_eval = {x for x in sentences if len(x) > 60}
    long_train = {x for d in train_docs for x in d if len(x) > 60}
    assert len(long_eval) > 1000 and len(long_train) > 20000
    assert not long_eval & long_train
    assert set(shakespeare_plays("eval")) == {"twelfth-night", "hamlet"}
    assert not set(shakespeare_plays("eval")) & set(shakespeare_plays("train"))


def test_play_parser_rules():
    play = "\n".join([
        "# A Play", "", "## ACT I", "", "### SCENE I. A room.", "",
        "_Enter A and", "B, talking_", "", "**A**  ", "Hello there. How are you?  ",
        "I am well;  indeed", "", "**B**  ", "[Aside]_  ", "No end mark", "*Exit.*", "",
        "### SCENE II. Elsewhere.", "", "**C**  ", "_Dies_", "Farewell!",
    ])
    assert list(parse_play(play)) == [
        ["Hello there.", "How are you?", "I am well;", "indeed", "No end mark"],
        ["Farewell!"],
    ]


def test_split_sentences():
    assert split_sentences("One. Two! Three? Four; five\nsix  seven.") == [
        "One.", "Two!", "Three?", "Four;", "five", "six  seven."]
    assert split_sentences(" \n \n") == []
    assert split_sentences("e.g.no space") == ["e.g.no space"]


def test_text_format_documents_and_sources(tmp_path):
    (tmp_path / "a.txt").write_text("s1\ns2\n\n\n s3 \n\r\ns4\n", encoding="utf-8")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.jsonl").write_text(
        json.dumps({"body": "Hi there. Bye!"}) + "\n\n" + json.dumps({"body": "Solo"}) + "\n")
    (tmp_path / "skip.md").write_text("not a corpus file")
    assert list(text_documents(tmp_path / "a.txt")) == [["s1", "s2"], ["s3"], ["s4"]]
    assert list(jsonl_documents(tmp_path / "sub" / "b.jsonl", "body")) == [
        ["Hi there.", "Bye!"], ["Solo"]]
    everything = [["s1", "s2"], ["s3"], ["s4"], ["Hi there.", "Bye!"], ["Solo"]]
    assert list(corpus_documents(tmp_path, text_field="body")) == everything
    globbed = corpus_documents(str(tmp_path / "**" / "*.*l"), text_field="body")
    assert list(globbed) == everything[3:]
    assert list(corpus_documents([tmp_path / "a.txt", tmp_path / "a.txt"])) == everything[:3] * 2


# --- bad input -----------------------------------------------------------------------------------


def test_missing_path_names_it_and_the_fix(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"nope\.txt' does not exist; pass an existing"):
        corpus_documents(tmp_path / "nope.txt")
    with pytest.raises(ValueError, match="matches no files; check the pattern"):
        corpus_documents(str(tmp_path / "*.txt"))
    with pytest.raises(ValueError, match=r"holds no \.txt/\.jsonl/\.json \(or compressed: "
                                         r"\.gz/\.bz2/\.zst\), \.parquet/\.arrow files and no "
                                         r"dataset saved by datasets; put the corpus"):
        corpus_documents(tmp_path)
    # a bad path among good ones fails at the call, before any document is produced
    (tmp_path / "ok.txt").write_text("x\n")
    with pytest.raises(FileNotFoundError, match="missing"):
        corpus_documents([tmp_path / "ok.txt", tmp_path / "missing"])


def test_non_utf8_names_file_and_byte_offset(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("first line\n\ncaf\u00e9 ok\n".encode() + b"na\xefve\n")
    with pytest.raises(ValueError) as err:
        list(text_documents(path))
    message = str(err.value)
    offset = len("first line\n\ncaf\u00e9 ok\n".encode()) + 2
    assert str(path) in message and f"byte offset {offset}" in message and "0xef" in message
    assert "re-encode the file as UTF-8" in message


def test_bad_json_lines_name_the_line_and_field(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "fine"}\n{"body": "x"}\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2: record has no string field 'text'.*"
                                         r"--text-field"):
        list(jsonl_documents(path))
    path.write_text('{"text": "fine"}\nnot json\n')
    with pytest.raises(ValueError, match=r"c\.jsonl:2: not valid JSON"):
        list(jsonl_documents(path))


def test_empty_binary_and_non_utf8_files_fail_at_the_call_naming_the_file(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "blank.txt").write_text("\n  \n\n")
    (tmp_path / "image.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (tmp_path / "latin1.txt").write_bytes("na\u00efve\n".encode("latin-1"))
    for name in ("empty.txt", "blank.txt"):
        with pytest.raises(ValueError, match=rf"corpus file .*{name} is empty: no document"):
            corpus_documents(tmp_path / name)
    with pytest.raises(ValueError, match=r"image\.txt is binary, not text \(a NUL byte at offset "
                                         r"8\); give UTF-8 text files"):
        corpus_documents(tmp_path / "image.txt")
    with pytest.raises(ValueError, match=r"latin1\.txt: invalid UTF-8 at byte offset 2 .*iconv"):
        corpus_documents(tmp_path / "latin1.txt")
    # a binary file in a directory is named too; empty files among others are skipped
    with pytest.raises(ValueError, match=r"image\.txt is binary"):
        corpus_documents(tmp_path)
    (tmp_path / "image.txt").unlink()
    (tmp_path / "latin1.txt").unlink()
    with pytest.raises(ValueError, match=r"every corpus file in corpus directory .* is empty"):
        corpus_documents(tmp_path)
    with pytest.raises(ValueError, match=r"every file corpus glob .* matches is empty"):
        corpus_documents(str(tmp_path / "*.txt"))
    (tmp_path / "z.jsonl").write_text('\ufeff{"text": "one. two."}\n', encoding="utf-8")
    assert list(corpus_documents(tmp_path)) == [["one.", "two."]]  # a byte-order mark is dropped


def test_json_files_are_one_document_not_json_lines(tmp_path):
    records = [{"text": "First one. Still first!"}, {"text": "Second."}, {"text": ""}]
    (tmp_path / "list.json").write_text(json.dumps(records, indent=2))
    (tmp_path / "one.json").write_text(json.dumps({"text": "Only; one", "id": 1}, indent=2))
    expected = [["First one.", "Still first!"], ["Second."]]
    assert list(corpus_documents(tmp_path / "list.json")) == expected
    assert list(corpus_documents(tmp_path / "one.json")) == [["Only;", "one"]]
    assert list(corpus_documents(tmp_path)) == [*expected, ["Only;", "one"]]  # in a directory too
    # JSON lines named .json (as `datasets` writes them) are still read
    (tmp_path / "lines.json").write_text("".join(json.dumps(r) + "\n" for r in records))
    assert list(corpus_documents(tmp_path / "lines.json")) == expected
    (tmp_path / "bad.json").write_text('[{"text": "a"},\n {"text": }]')
    with pytest.raises(ValueError, match=r"bad\.json:2:11: not valid JSON .* name the file "
                                         r"\.jsonl"):
        list(corpus_documents(tmp_path / "bad.json"))
    (tmp_path / "field.json").write_text(json.dumps([{"text": "a"}, {"body": "b"}]))
    with pytest.raises(ValueError, match=r"field\.json: record 1: record has no string field "
                                         r"'text' \(its fields: body\); pass --text-field"):
        list(corpus_documents(tmp_path / "field.json"))
