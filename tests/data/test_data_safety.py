"""Bad input to `bertjax vocab`, `bertjax data` and `bertjax bench data`: one line naming the problem
and the fix, exit status 2 (130 for Ctrl-C), and nothing lost: what was there is still there, nothing
half-written is left, and a retry works."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bertjax.cli.main import main
from bertjax.data import Shards, Tokenizer
from bertjax.errors import InputError


def _write_corpus(path: Path, documents: int = 12) -> Path:
    docs = [[f"Sentence {s} of document {d} tells of kings and queens." for s in range(5)]
            for d in range(documents)]
    path.write_text("\n\n".join("\n".join(d) for d in docs) + "\n", encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def vocab(tmp_path_factory) -> Path:
    """A tiny vocabulary directory (vocab.txt + tokenizer.json)."""
    root = tmp_path_factory.mktemp("vocab")
    corpus = _write_corpus(root / "corpus.txt")
    sentences = corpus.read_text().split("\n")
    Tokenizer.train([s for s in sentences if s], vocab_size=80).save(root / "vocab")
    return root / "vocab"


@pytest.fixture
def corpus(tmp_path) -> Path:
    return _write_corpus(tmp_path / "corpus.txt")


def _tree(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` (hidden ones too) -> its bytes (None for a directory)."""
    return {str(p.relative_to(root)): None if p.is_dir() else p.read_bytes()
            for p in sorted(root.rglob("*"))}


def _fails(capsys, argv: list[str], code: int = 2) -> str:
    """Run the command, check it failed with `code` and one line, no traceback; its message."""
    assert main(argv) == code
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    command = " ".join(argv[:2]) if argv[0] == "bench" else argv[0]  # `bench data`
    prefix = f"bertjax {command}: " + ("interrupted" if code == 130 else "error: ")
    assert lines[0].startswith(prefix), err
    return lines[0]


def _refused_by_parser(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1, err
    return err


def _data(corpus: Path, vocab: Path, out: Path, *more: str) -> list[str]:
    return ["data", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(out),
            "--no-progress", "--seq-len", "16", *more]


# --- --out: only what the command wrote is ever replaced ------------------------------------------


def test_force_never_replaces_a_directory_the_command_did_not_write(tmp_path, corpus, vocab, capsys):
    thesis = tmp_path / "thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("years of work")
    (thesis / "figures").mkdir()
    run = tmp_path / "run"  # a pre-training run: checkpoints, not shards
    (run / "checkpoints" / "100").mkdir(parents=True)
    (run / "run_config.json").write_text("{}")
    (run / "vocab.txt").write_text("[PAD]\n")
    before = _tree(tmp_path)
    for out, names in ((thesis, "chapter1.tex, figures"), (run, "checkpoints, run_config.json")):
        message = _fails(capsys, _data(corpus, vocab, out, "--force"))
        assert f"--out {out} already holds files that `bertjax data` did not write" in message
        assert names in message and "choose another --out" in message
        message = _fails(capsys, ["vocab", "--corpus", str(corpus), "--vocab-size", "60",
                                  "--out", str(out), "--force"])
        assert "`bertjax vocab` did not write" in message and names in message
    assert _tree(tmp_path) == before


def test_force_never_replaces_or_hides_a_file(tmp_path, corpus, vocab, capsys):
    notes = tmp_path / "notes.txt"
    notes.write_text("keep me")
    before = _tree(tmp_path)
    for argv in (_data(corpus, vocab, notes, "--force"),
                 ["vocab", "--corpus", str(corpus), "--out", str(notes), "--force"]):
        message = _fails(capsys, argv)
        assert f"--out {notes} is a file, not a directory; choose another --out" in message
    message = _fails(capsys, _data(corpus, vocab, notes / "shards"))  # --out under a file
    assert f"{notes} is a file, not a directory; choose another --out" in message
    assert _tree(tmp_path) == before  # no .notes.txt.old-N, no directory


def test_force_replaces_a_shard_directory_and_its_pairs(tmp_path, corpus, vocab, capsys):
    out = tmp_path / "shards"
    assert main(_data(corpus, vocab, out)) == 0
    assert main(["data", "--corpus", str(corpus), "--vocab", str(vocab), "--out", str(out),
                 "--no-progress", "--seq-len", "32"]) == 2  # exists: --force needed
    assert "already exists (written by `bertjax data`); pass --force" in capsys.readouterr().err
    assert main(_data(corpus, vocab, out, "--force", "--seq-len", "32")) == 0
    assert [p.name for p in out.glob("pairs-*")] == ["pairs-s32-p0.1-d1-r0.npy"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "shards"]
    empty = tmp_path / "empty"  # an empty directory loses nothing: no --force needed
    empty.mkdir()
    assert main(_data(corpus, vocab, empty)) == 0 and Shards(empty).num_documents == 12


def test_vocab_force_replaces_only_a_vocabulary(tmp_path, corpus, capsys):
    out = tmp_path / "vocab"
    argv = ["vocab", "--corpus", str(corpus), "--vocab-size", "60", "--out", str(out)]
    assert main(argv) == 0
    first = _tree(out)
    assert sorted(first) == ["tokenizer.json", "vocab.txt"]
    assert "pass --force to replace it" in _fails(capsys, argv)
    assert _tree(out) == first
    assert main([*argv, "--force", "--cased"]) == 0
    assert sorted(_tree(out)) == ["tokenizer.json", "vocab.txt"] and _tree(out) != first


def test_an_unwritable_out_is_named_before_any_work(corpus, vocab, capsys, unwritable_dir):
    locked = unwritable_dir
    for argv in (_data(corpus, vocab, locked / "shards"),
                 ["vocab", "--corpus", str(corpus), "--out", str(locked / "v")]):
        message = _fails(capsys, argv)
        assert f"cannot write in {locked} (permission denied); check its permissions" in message
    assert list(locked.iterdir()) == []


# --- options are checked before anything is written -------------------------------------------


@pytest.mark.parametrize("option, value, expected", [
    ("--seq-len", "3", "expected 0 (no pairs) or an integer >= 5"),
    ("--seq-len", "-1", "expected 0 (no pairs) or an integer >= 5"),
    ("--dupe-factor", "0", "expected a positive integer, got '0'"),
    ("--short-seq-prob", "2", "expected a number in [0, 1], got '2'"),
])
def test_data_options_out_of_range_are_refused_by_the_parser(tmp_path, corpus, vocab, capsys,
                                                             option, value, expected):
    err = _refused_by_parser(capsys, [*_data(corpus, vocab, tmp_path / "out"), option, value])
    assert f"argument {option}: {expected}" in err
    assert not (tmp_path / "out").exists()


def test_vocab_options_out_of_range_are_refused_by_the_parser(tmp_path, corpus, capsys):
    argv = ["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "v")]
    assert "--vocab-size: expected an integer from 6 to 1,000,000, got '5'" in _refused_by_parser(
        capsys, [*argv, "--vocab-size", "5"])
    assert "--min-frequency: expected an integer >= 0" in _refused_by_parser(
        capsys, [*argv, "--min-frequency", "-1"])
    assert not (tmp_path / "v").exists()


def test_the_smallest_seq_len_makes_pairs(tmp_path, corpus, vocab, capsys):
    out = tmp_path / "s"
    assert main(_data(corpus, vocab, out, "--seq-len", "5")) == 0
    p = np.load(next(out.glob("pairs-s5-*.npy")))
    assert len(p) > 0 and ((p[:, 1] - p[:, 0]) + (p[:, 3] - p[:, 2]) <= 2).all()
    assert ((p[:, 1] > p[:, 0]) & (p[:, 3] > p[:, 2])).all()  # a token of A and one of B


# --- failures midway leave nothing half-made --------------------------------------------------


def test_failed_pairs_leave_no_shards_and_a_retry_works(tmp_path, corpus, vocab, capsys,
                                                        monkeypatch):
    import bertjax.data.pairs as pairs

    def fails(*args, **kwargs):
        raise InputError("no pairs today")

    out = tmp_path / "shards"
    monkeypatch.setattr(pairs, "create_pairs", fails)
    assert _fails(capsys, _data(corpus, vocab, out)).endswith("no pairs today")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]  # no half-made --out
    monkeypatch.undo()
    assert main(_data(corpus, vocab, out)) == 0  # the retry needs no --force
    before = _tree(out)
    monkeypatch.setattr(pairs, "create_pairs", fails)
    _fails(capsys, _data(corpus, vocab, out, "--force", "--seq-len", "32"))
    assert _tree(out) == before  # a failed replacement keeps the old shards and pairs
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt", "shards"]


def test_ctrl_c_while_tokenising_leaves_nothing(tmp_path, corpus, vocab, capsys, monkeypatch):
    import bertjax.data.shards as shards

    def interrupted(documents, encode_chars):
        yield [next(iter(documents))]
        raise KeyboardInterrupt

    out = tmp_path / "shards"
    monkeypatch.setattr(shards, "_encode_batches", interrupted)
    assert "interrupted (Ctrl-C)" in _fails(capsys, _data(corpus, vocab, out), code=130)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corpus.txt"]
    monkeypatch.undo()
    assert main(_data(corpus, vocab, out)) == 0


# --- bad corpora and vocabularies: one line naming the file ----------------------------------


@pytest.mark.parametrize("name, content, expected", [
    ("empty.txt", b"", "empty.txt is empty: no document"),
    ("image.txt", b"\x89PNG\r\n\x1a\n\x00\x00", "image.txt is binary, not text"),
    ("latin1.txt", "caf\u00e9\n".encode("latin-1"), "latin1.txt: invalid UTF-8 at byte offset 3"),
    ("records.jsonl", b'{"body": "x"}\n', "records.jsonl:1: record has no string field 'text' "
                                          "(its fields: body); pass --text-field NAME"),
    ("records.json", b'[{"text": "a"}, {"body": "x"}]', "records.json: record 1: record has no "
                                                        "string field 'text'"),
])
def test_bad_corpus_files_are_named_by_every_command(tmp_path, vocab, capsys, name, content,
                                                     expected):
    bad = tmp_path / name
    bad.write_bytes(content)
    out = tmp_path / "out"
    for argv in (_data(bad, vocab, out),
                 ["vocab", "--corpus", str(bad), "--out", str(out)],
                 ["bench", "data", "--corpus", str(bad), "--vocab", str(vocab), "--steps", "1",
                  "--repeats", "1", "--warmup", "0"]):
        assert expected in _fails(capsys, argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_empty_directories_and_globs_matching_nothing_are_named(tmp_path, vocab, capsys):
    (tmp_path / "empty").mkdir()
    out = tmp_path / "out"
    message = _fails(capsys, _data(tmp_path / "empty", vocab, out))
    assert "corpus directory" in message and "holds no .txt/.jsonl/.json (or compressed" in message
    message = _fails(capsys, ["vocab", "--corpus", str(tmp_path / "*.txt"), "--out", str(out)])
    assert "matches no files; check the pattern" in message
    assert not out.exists()


def test_bad_vocab_paths_are_named(tmp_path, corpus, capsys):
    (tmp_path / "novocab").mkdir()
    (tmp_path / "vocab.txt").write_bytes("[PAD]\ncaf\u00e9\n".encode("latin-1"))
    (tmp_path / "tokenizer.json").write_text("{not json")
    out = tmp_path / "out"
    for vocab, expected in (
            (tmp_path / "missing", f"vocabulary {tmp_path / 'missing'} does not exist; pass a "
                                   "vocab.txt"),
            (tmp_path / "novocab", f"vocabulary directory {tmp_path / 'novocab'} holds neither "
                                   "tokenizer.json nor vocab.txt"),
            (tmp_path / "vocab.txt", f"vocabulary {tmp_path / 'vocab.txt'} is not UTF-8"),
            (tmp_path / "tokenizer.json", "is not a valid tokenizer.json"),
            (corpus, "lacks the special tokens [PAD], [UNK], [CLS], [SEP], [MASK]")):
        for argv in (_data(corpus, vocab, out),
                     ["bench", "data", "--corpus", str(corpus), "--vocab", str(vocab)]):
            assert expected in _fails(capsys, argv)
    assert not out.exists()


def test_a_json_corpus_file_is_one_document(tmp_path, vocab, capsys):
    records = [{"text": f"Sentence one of {i}. Sentence two of {i}!"} for i in range(4)]
    corpus = tmp_path / "corpus.json"
    corpus.write_text(json.dumps(records, indent=2))  # pretty-printed: not JSON lines
    assert main(_data(corpus, vocab, tmp_path / "out", "--seq-len", "0")) == 0
    meta = Shards(tmp_path / "out").meta
    assert (meta["documents"], meta["sentences"]) == (4, 8)

