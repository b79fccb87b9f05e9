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


def test_a_swap_that_fails_or_is_killed_between_its_renames_keeps_the_old_directory(
        tmp_path, monkeypatch):
    import os

    out = tmp_path / "out"
    with atomic_directory(out) as tmp:
        (tmp / "x").write_text("old")
    real_replace, calls = os.replace, []

    def second_rename_fails(src, dst):
        calls.append((src, dst))
        if len(calls) == 2:
            raise OSError("device busy")
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", second_rename_fails)
    with pytest.raises(OSError, match="device busy"):
        with atomic_directory(out, replace=True) as tmp:
            (tmp / "x").write_text("new")
    monkeypatch.undo()
    assert (out / "x").read_text() == "old" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]
    # killed between the renames: the old directory is aside and `out` is missing
    os.replace(out, tmp_path / ".out.old-12345")
    with atomic_directory(out, replace=True) as tmp:  # puts it back first, then swaps
        assert (out / "x").read_text() == "old"
        (tmp / "x").write_text("new")
    assert (out / "x").read_text() == "new" and sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_tokenizer_save_is_complete_and_leaves_no_temporary(tmp_path):
    tok = WordPieceTokenizer.train(["to be or not to be", "that is the question"] * 5,
                                   vocab_size=40)
    tok.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "vocab.txt"]
    again = WordPieceTokenizer.load(tmp_path / "tokenizer.json")
    assert again.encode_batch(["to be"]) == tok.encode_batch(["to be"])
    assert (tmp_path / "vocab.txt").read_text().splitlines() == tok.id_to_token_list()
