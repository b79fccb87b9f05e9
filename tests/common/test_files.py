"""Files are written aside and renamed: a crash leaves the old file or directory, never half."""

from __future__ import annotations

import pytest

from bertjax.common.files import (
    atomic_directory,
    check_creatable,
    check_output_directory,
    write_text_atomic,
)
from bertjax.data import Tokenizer


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
    tok = Tokenizer.train(["to be or not to be", "that is the question"] * 5,
                                   vocab_size=40)
    tok.save(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tokenizer.json", "vocab.txt"]
    again = Tokenizer.load(tmp_path / "tokenizer.json")
    assert again.encode_batch(["to be"]) == tok.encode_batch(["to be"])
    assert (tmp_path / "vocab.txt").read_text().splitlines() == tok.id_to_token_list()


# --- refusing what must not be replaced -----------------------------------------------------------


def test_atomic_directory_never_replaces_or_hides_a_file(tmp_path):
    target = tmp_path / "thesis.txt"
    target.write_text("years of work")
    with pytest.raises(FileExistsError, match="is a file, not a directory"):
        with atomic_directory(target, replace=True) as tmp:
            (tmp / "x").write_text("new")
    assert target.read_text() == "years of work"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["thesis.txt"]  # no .thesis.txt.old-N


def test_check_creatable_names_a_file_in_the_way_and_an_unwritable_directory(tmp_path,
                                                                            unwritable_dir,
                                                                            monkeypatch):
    (tmp_path / "notes").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"--out .*notes/a/b: .*notes is a file, not a "
                                                 r"directory; choose another --out"):
        check_creatable(tmp_path / "notes" / "a" / "b", "--out")
    with pytest.raises(PermissionError, match=r"--out .*locked/new: cannot write in .*locked "
                                              r"\(permission denied\); check its permissions"):
        check_creatable(unwritable_dir / "new", "--out")
    monkeypatch.undo()
    check_creatable(tmp_path / "new" / "deeper", "--out")  # creatable: passes, leaves nothing
    assert sorted(p.name for p in tmp_path.iterdir()) == ["locked", "notes"]


def test_check_output_directory_replaces_only_what_the_command_wrote(tmp_path):
    def ours(path):
        return all(p.name == "ours.txt" for p in path.iterdir())

    def check(path, replace):
        check_output_directory(path, is_ours=ours, made_by="`tool`", replace=replace)

    check(tmp_path / "new", replace=False)  # new: fine
    (tmp_path / "empty").mkdir()
    check(tmp_path / "empty", replace=False)  # empty: nothing to lose
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "ours.txt").write_text("1")
    with pytest.raises(FileExistsError, match=r"--out .*mine already exists \(written by `tool`\); "
                                              "pass --force to replace it"):
        check(mine, replace=False)
    check(mine, replace=True)
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    for i in range(7):
        (theirs / f"chapter{i}.tex").write_text("work")
    with pytest.raises(FileExistsError, match=r"did not write \(chapter0.tex, chapter1.tex, "
                                              r"chapter2.tex, chapter3.tex, chapter4.tex and 2 "
                                              r"more\); choose another --out"):
        check(theirs, replace=True)
    with pytest.raises(FileExistsError, match="is a file, not a directory"):
        check(theirs / "chapter0.tex", replace=True)


def test_a_killed_writer_s_temporary_directory_is_removed_by_the_next_call(tmp_path):
    import os
    import subprocess
    import sys

    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True, check=True).stdout.strip()
    leftover = tmp_path / f".out.tmp-{dead}"  # what `kill -9` during atomic_directory leaves
    leftover.mkdir()
    (leftover / "half.bin").write_bytes(b"x")
    live = tmp_path / f".out.tmp-{os.getppid()}"  # another process still writing: kept
    live.mkdir()
    with atomic_directory(tmp_path / "out") as tmp:
        (tmp / "done.txt").write_text("ok")
    assert not leftover.exists() and live.is_dir()
    assert (tmp_path / "out" / "done.txt").read_text() == "ok"
