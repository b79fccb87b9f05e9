"""`bertjax vocab`, `bertjax data` and `bertjax bench data` on Parquet and compressed corpora:
the same vocabulary and shards as from the same corpus in JSON lines; bad files named in one line
(exit status 2) with nothing written."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard
from test_data_safety import _data, _fails

from bertjax.cli.main import main
from bertjax.data import Tokenizer
from bertjax.data.shards import BIN_FILES

RECORDS = [{"id": d, "body": " ".join(f"Sentence {s} of document {d} tells of kings, number {d * s}."
                                      for s in range(6))} for d in range(30)]


@pytest.fixture(scope="module")
def tiny_vocab(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("vocab")
    Tokenizer.train([r["body"] for r in RECORDS], vocab_size=80).save(root)
    return root


def _shards(tmp_path: Path, corpus: str, name: str, *more: str) -> Path:
    vocab_dir, out = tmp_path / f"vocab-{name}", tmp_path / f"shards-{name}"
    assert main(["vocab", "--corpus", corpus, "--vocab-size", "200", "--out", str(vocab_dir),
                 *more]) == 0
    assert main(["data", "--corpus", corpus, "--vocab", str(vocab_dir), "--out", str(out),
                 "--seq-len", "32", "--no-progress", *more]) == 0
    return out


def test_data_on_parquet_shards_makes_what_json_lines_makes(tmp_path, capsys):
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(json.dumps(r) + "\n" for r in RECORDS))
    (tmp_path / "parquet").mkdir()
    for i in range(3):  # a corpus in several files, named by a glob
        pq.write_table(pa.Table.from_pylist(RECORDS[i * 10:(i + 1) * 10]),
                       tmp_path / "parquet" / f"part-{i}.parquet", row_group_size=4)
    expected = _shards(tmp_path, str(jsonl), "jsonl", "--text-field", "body")
    got = _shards(tmp_path, str(tmp_path / "parquet" / "part-*.parquet"), "parquet",
                  "--text-field", "body")
    assert "30 documents, 180 sentences" in capsys.readouterr().out
    assert (got / "vocab.txt").read_bytes() == (expected / "vocab.txt").read_bytes()
    made = sorted(p.name for p in expected.iterdir())
    assert sorted(p.name for p in got.iterdir()) == made and "pairs-s32-p0.1-d1-r0.npy" in made
    for name in [*BIN_FILES, "pairs-s32-p0.1-d1-r0.npy"]:
        assert (got / name).read_bytes() == (expected / name).read_bytes(), name
    meta, reference = (json.loads((d / "meta.json").read_text()) for d in (got, expected))
    for key in ("corpus", "seconds", "mb_per_s"):  # the name given and how fast it went
        del meta[key], reference[key]
    assert meta == reference


def _parquet(path: Path, table: pa.Table) -> bytes:
    pq.write_table(table, path)
    return path.read_bytes()


BAD = {
    "corrupt.parquet": (lambda p: b"PAR1 broken PAR1", "corrupt.parquet is not a valid Parquet file"),
    "body.parquet": (lambda p: _parquet(p, pa.table({"body": ["x"]})),
                     "body.parquet has no column 'text' (its columns: body; text columns: body); "
                     "pass --text-field NAME"),
    "plain.jsonl.gz": (lambda p: b'{"text": "x"}\n', "plain.jsonl.gz is not valid gzip data"),
    "latin1.txt.zst": (lambda p: zstandard.ZstdCompressor().compress("caf\u00e9\n".encode("latin-1")),
                       "latin1.txt.zst: invalid UTF-8 at byte offset 3 of its decompressed text"),
    "empty.jsonl.gz": (lambda p: gzip.compress(b""), "empty.jsonl.gz is empty: no document"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_files_are_one_line_from_every_command_and_nothing_is_written(tmp_path, tiny_vocab,
                                                                         capsys, name):
    make, expected = BAD[name]
    bad = tmp_path / name
    bad.write_bytes(make(bad))
    out = tmp_path / "out"
    for argv in (_data(bad, tiny_vocab, out),
                 ["vocab", "--corpus", str(bad), "--out", str(out)],
                 ["bench", "data", "--corpus", str(bad), "--vocab", str(tiny_vocab), "--steps", "1",
                  "--repeats", "1", "--warmup", "0"]):
        assert expected in _fails(capsys, argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]
