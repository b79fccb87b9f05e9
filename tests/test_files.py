"""Files are written aside and renamed: a crash leaves the old file or directory, never half."""

from __future__ import annotations

import pytest

from bertjax.data import WordPieceTokenizer
from bertjax.files import atomic_directory, write_text_atomic


def test_write_text_atomic_replaces_or_keeps(tmp_path, monkeypatch):
    target = tmp_path / "a.txt"
    write_text_atomic(target, "first")
    write_text_atomic(target, "second")
    assert target.read_text() == "second"

    def crash(self, *args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(target), "write_text", crash)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "third")
    monkeypatch.undo()
    assert target.read_text() == "second"
    assert [p.name for p in tmp_path.iterdir()] == ["a.txt"]


def test_atomic_directory_swaps_in_whole_or_not_at_all(tmp_path):
    out = tmp_path / "out"
    with atomic_directory(out) as tmp:
        (tmp / "x").write_text("1")
    with pytest.raises(FileExistsError, match="already exists"):
        with atomic_directory(out):
            pass
    with pytest.raises(RuntimeError, match="boom"):
        with atomic_directory(out, replace=True) as tmp:
            (tmp / "x").write_text("2")
            raise RuntimeError("boom")
    assert (out / "x").read_text() == "1" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    with atomic_directory(out, replace=True) as tmp:
        (tmp / "y").write_text("3")
    assert sorted(p.name for p in out.iterdir()) == ["y"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_tokenizer_save_is_complete_and_leaves_no_temporary(tmp_path):
    tok = WordPieceTokenizer.train(["to be or not to be", "that is the question"] * 5,
                                   vocab_size=40)
    tok.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "vocab.txt"]
    again = WordPieceTokenizer.load(tmp_path / "tokenizer.json")
    assert again.encode_batch(["to be"]) == tok.encode_batch(["to be"])
    assert (tmp_path / "vocab.txt").read_text().splitlines() == tok.id_to_token_list()
