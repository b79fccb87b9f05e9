"""Corpus readers stream: a corpus six times larger than a memory bound is read whole while the
reader never holds more than the bound, and the first document arrives when a small part of the
file has been read.

What is held is counted, not timed: Python's allocations (`tracemalloc`'s peak) and Arrow's (the
peak of a proxy memory pool made the default while reading), and the bytes the process has read
from files (`rchar` of /proc/self/io, Linux) when the first document is yielded. A reader that
read a whole file, table or decompressed stream first would hold the corpus and fail.
"""

from __future__ import annotations

import gc
import gzip
import json
import random
import string
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bertjax.data import corpus_documents

BOUND = 4 << 20  # bytes a reader may hold at once (Python objects; Arrow buffers)
TEXT_BYTES = 6 * BOUND  # the generated corpus: several times the bound
SENTENCES_PER_TEXT = 13
_POOLS: list = []  # proxy pools stay alive: Arrow buffers made from one may be freed later


def _texts(total_bytes: int) -> list[str]:
    """Deterministic texts of `SENTENCES_PER_TEXT` sentences each, about `total_bytes` long."""
    rng = random.Random(0)
    words = ["".join(rng.choices(string.ascii_lowercase, k=rng.randint(2, 9))) for _ in range(3000)]
    sentences = [" ".join(rng.choices(words, k=rng.randint(5, 15))).capitalize() + "."
                 for _ in range(2000)]
    texts: list[str] = []
    size = 0
    while size < total_bytes:
        texts.append(" ".join(rng.choices(sentences, k=SENTENCES_PER_TEXT - 1)) + f" Row {len(texts)}.")
        size += len(texts[-1])
    return texts


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> tuple[dict[str, Path], int]:
    """The same generated corpus in every streamed format (Parquet in ONE row group, the worst
    case); and its number of texts."""
    root = tmp_path_factory.mktemp("streamed")
    texts = _texts(TEXT_BYTES)
    table = pa.table({"text": texts})
    pq.write_table(table, root / "one_row_group.parquet", row_group_size=len(texts))
    lines = "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()
    (root / "corpus.jsonl.gz").write_bytes(gzip.compress(lines, compresslevel=1))
    (root / "corpus.jsonl.zst").write_bytes(zstandard.ZstdCompressor(level=1).compress(lines))
    datasets.Dataset(table).save_to_disk(str(root / "saved"))
    return {p.name: p for p in root.iterdir()}, len(texts)


def _read_bytes() -> int:
    """Bytes this process has read from files and pipes so far (Linux)."""
    with open("/proc/self/io") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("rchar:"))


def _held_while_reading(documents: Callable[[], Iterator[list[str]]]) -> tuple[int, int, int]:
    """(sentences read, peak bytes of Python objects, peak bytes of Arrow buffers) of one pass
    over `documents()`, keeping nothing."""
    gc.collect()
    pool = pa.proxy_memory_pool(pa.default_memory_pool())
    _POOLS.append(pool)
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pool)
    tracemalloc.start()
    try:
        sentences = sum(len(document) for document in documents())
        python_peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        pa.set_memory_pool(previous)
    return sentences, python_peak, pool.max_memory()


@pytest.mark.slow
@pytest.mark.parametrize("name", ["one_row_group.parquet", "corpus.jsonl.gz", "corpus.jsonl.zst",
                                  "saved"])
def test_a_corpus_larger_than_the_bound_streams_through_it(corpus, name):
    files, texts = corpus
    sentences, python_peak, arrow_peak = _held_while_reading(lambda: corpus_documents(files[name]))
    assert sentences == texts * SENTENCES_PER_TEXT  # all of it was read
    assert python_peak < BOUND, f"{name}: {python_peak / 2**20:.1f} MiB of Python objects held"
    assert arrow_peak < BOUND, f"{name}: {arrow_peak / 2**20:.1f} MiB of Arrow buffers held"


def test_a_memory_mapped_dataset_streams_through_the_bound(corpus):
    files, texts = corpus
    dataset = datasets.load_from_disk(str(files["saved"]))
    sentences, python_peak, arrow_peak = _held_while_reading(lambda: corpus_documents(dataset))
    assert sentences == texts * SENTENCES_PER_TEXT
    assert python_peak < BOUND and arrow_peak < BOUND, (python_peak, arrow_peak)


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="counts reads through /proc (Linux)")
@pytest.mark.parametrize("name", ["one_row_group.parquet", "corpus.jsonl.gz", "corpus.jsonl.zst",
                                  "saved"])
def test_the_first_document_comes_before_the_file_is_read(corpus, name):
    """Even a Parquet file of one row group (one column chunk: the whole file) is read a buffer at
    a time, not whole, before its first document."""
    files, _ = corpus
    size = sum(p.stat().st_size for p in [files[name], *files[name].glob("*.arrow")])
    before = _read_bytes()
    documents = corpus_documents(files[name])
    next(documents)
    read = _read_bytes() - before
    documents.close()
    assert read < size / 4, f"{name}: {read / 2**20:.1f} of {size / 2**20:.1f} MiB read for the " \
                            "first document"
