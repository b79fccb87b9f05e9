"""The corpus benchmark (`bertjax bench corpus`): the generated corpus, each child's own peak
memory, and one small run end to end. Its rates are not checked: timings are not tests."""

from __future__ import annotations

import sys

import pytest

from bertjax.bench.corpus import run_child, run_corpus_benchmark, write_corpus
from bertjax.data import Tokenizer, corpus_documents
from bertjax.errors import InputError


def test_the_generated_corpus_is_shakespeare_reshuffled_to_size(tmp_path):
    made = {kind: write_corpus(tmp_path / f"c.{kind}", 0.3, kind, row_group_rows=16)
            for kind in ("parquet", "jsonl", "jsonl.zst")}
    assert made["parquet"]["text_mb"] >= 0.3 and made["parquet"]["rows"] > 16
    assert made["jsonl"]["text_mb"] == made["parquet"]["text_mb"]  # the same texts (one seed)
    documents = list(corpus_documents(tmp_path / "c.parquet"))
    assert documents == list(corpus_documents(tmp_path / "c.jsonl.zst"))
    texts = [" ".join(d) for d in documents]
    assert len(set(texts)) == len(texts)  # no two documents equal
    other = write_corpus(tmp_path / "other.parquet", 0.3, "parquet", seed=1)
    assert other["rows"] > 0 and list(corpus_documents(tmp_path / "other.parquet")) != documents


def test_each_child_reports_its_own_peak_memory():
    """Not the size of the process that started it: a forked child's ru_maxrss counts its
    parent's image, which grows as the benchmark writes its corpora."""
    parent = b"x" * (300 << 20)  # this process is large
    small = run_child([sys.executable, "-c", "pass"])
    big = run_child([sys.executable, "-c", "x = b'x' * (300 << 20)"])
    del parent
    assert big["returncode"] == small["returncode"] == 0
    assert small["max_rss_bytes"] < (100 << 20) < (300 << 20) < big["max_rss_bytes"]
    failed = run_child([sys.executable, "-c", "import sys; print('out'); sys.exit(3)"])
    assert failed["returncode"] == 3 and failed["output"].strip() == "out"


@pytest.mark.slow
def test_a_small_run_end_to_end(tmp_path):
    vocab = tmp_path / "vocab"
    sentences = (s for d in corpus_documents("shakespeare", split="eval") for s in d)
    Tokenizer.train(sentences, vocab_size=300).save(vocab)
    printed: list[str] = []
    result = run_corpus_benchmark([0.2, 0.4], ["parquet", "jsonl.zst"], vocab=str(vocab),
                                  workdir=str(tmp_path), print_fn=printed.append)
    rows = result["rows"]
    assert [(r["format"], r["text_mb"] >= size) for r, size in zip(rows, [0.2, 0.4] * 2,
                                                                      strict=True)] == [
        ("parquet", True), ("parquet", True), ("jsonl.zst", True), ("jsonl.zst", True)]
    for row in rows:
        assert row["documents"] == row["rows"] and row["tokens"] > row["text_mb"] * 1e5
        assert row["max_rss_mb"] > 0 and row["input_mb_per_s"] > 0
    assert rows[0]["tokens"] == rows[2]["tokens"]  # Parquet and zstd JSON lines: the same text
    assert "parquet: corpus x2.0 (0.2 -> 0.4 MB of text), peak RSS" in printed[-1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["vocab"]  # the corpora are removed


@pytest.mark.parametrize("size", [float("nan"), float("inf"), 0.0, -5.0, 0.01, 1e9])
def test_a_size_out_of_range_is_refused_before_anything_is_written(tmp_path, size):
    """From Python as from the command line (issue 45): NaN or inf MB never ended (the corpus
    grew without limit), 0 or less made no corpus to read."""
    with pytest.raises(InputError, match=r"out of range: give sizes from 0\.1 to 100000 MB"):
        run_corpus_benchmark([1.0, size], workdir=str(tmp_path))
    assert list(tmp_path.iterdir()) == []
