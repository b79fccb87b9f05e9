"""Corpora as people have them: Parquet, Arrow (`datasets`' save_to_disk), `datasets` objects,
Python iterables and compressed text, each read as the same documents as plain JSON lines; the
text column chosen; globs and directories; bad files named with the fix; optional packages."""

from __future__ import annotations

import bz2
import gzip
import json
import subprocess
import sys
from pathlib import Path

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import zstandard

from bertjax.data import Tokenizer, corpus_documents, write_shards
from bertjax.data.corpus import MissingDependencyError, iterable_documents, resolve_corpus_files

RECORDS = [
    {"text": "First document. It has two sentences!", "title": "one", "id": 0},
    {"text": "Second; with a semicolon\nand a line break?", "title": "two", "id": 1},
    {"text": "", "title": "blank: skipped", "id": 2},
    {"text": "Caf\u00e9 \u00e0 la cr\u00e8me. \u201cQuoted.\u201d", "title": "three", "id": 3},
    {"text": "Fifth.", "title": "four", "id": 4},
]
EXPECTED = [["First document.", "It has two sentences!"],
            ["Second;", "with a semicolon", "and a line break?"],
            ["Caf\u00e9 \u00e0 la cr\u00e8me.", "\u201cQuoted.\u201d"], ["Fifth."]]


def _jsonl(records: list[dict]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records).encode()


def _zstd(data: bytes) -> bytes:
    return zstandard.ZstdCompressor().compress(data)


def _write(path: Path, records: list[dict]) -> Path:
    """`records` in the format `path`'s name says (a directory name ending in "saved": a dataset
    saved by `datasets`)."""
    name = path.name
    if name.endswith(".parquet"):
        pq.write_table(pa.Table.from_pylist(records), path, row_group_size=2)
    elif name.endswith(".arrow"):  # the IPC file format (Feather v2), not datasets' stream
        table = pa.Table.from_pylist(records)
        with pa.ipc.new_file(str(path), table.schema) as writer:
            writer.write_table(table, max_chunksize=2)
    elif name.endswith("saved"):
        datasets.Dataset.from_list(records).save_to_disk(str(path), num_shards=2)
    else:
        data = _jsonl(records)
        packed = {".gz": gzip.compress, ".bz2": bz2.compress, ".zst": _zstd}.get(path.suffix)
        path.write_bytes(packed(data) if packed else data)
    return path


@pytest.mark.parametrize("name", ["c.parquet", "c.arrow", "c_saved", "c.jsonl.gz", "c.jsonl.bz2",
                                  "c.jsonl.zst"])
def test_each_format_reads_the_documents_json_lines_gives(tmp_path, name):
    reference = list(corpus_documents(_write(tmp_path / "c.jsonl", RECORDS)))
    assert reference == EXPECTED
    assert list(corpus_documents(_write(tmp_path / name, RECORDS))) == reference


def test_compressed_bert_text_and_json_read_as_uncompressed(tmp_path):
    text = "s1\ns2\n\ns3\n"
    (tmp_path / "a.txt").write_text(text)
    (tmp_path / "a.txt.gz").write_bytes(gzip.compress(text.encode()))
    (tmp_path / "b.json").write_text(json.dumps(RECORDS))
    (tmp_path / "b.json.zst").write_bytes(_zstd(json.dumps(RECORDS).encode()))
    assert list(corpus_documents(tmp_path / "a.txt.gz")) == [["s1", "s2"], ["s3"]]
    assert list(corpus_documents(tmp_path / "b.json.zst")) == EXPECTED
    # zstd files of several frames (pzstd, concatenated files) are read whole
    (tmp_path / "two.jsonl.zst").write_bytes(_zstd(_jsonl(RECORDS[:2])) + _zstd(_jsonl(RECORDS[2:])))
    assert list(corpus_documents(tmp_path / "two.jsonl.zst")) == EXPECTED


def test_text_field_chooses_the_column_and_names_the_ones_there_are(tmp_path):
    for name in ("c.parquet", "c.arrow", "c_saved"):
        path = _write(tmp_path / name, RECORDS)
        assert list(corpus_documents(path, text_field="title")) == [
            ["one"], ["two"], ["blank: skipped"], ["three"], ["four"]]
        with pytest.raises(ValueError, match=r"c\S* has no column 'body' \(its columns: text, title, "
                                             r"id; text columns: text, title\); pass --text-field "
                                             r"NAME"):
            corpus_documents(path, text_field="body")
        with pytest.raises(ValueError, match=r"column 'id' holds int64, not text \(text columns: "
                                             r"text, title\); pass --text-field NAME"):
            corpus_documents(path, text_field="id")
    with pytest.raises(ValueError, match=r"c\.jsonl\.gz:1: record has no string field 'body'"):
        list(corpus_documents(_write(tmp_path / "c.jsonl.gz", RECORDS), text_field="body"))


def test_nulls_in_a_text_column_are_skipped(tmp_path):
    records = [{"text": "A."}, {"text": None}, {"text": "B."}]
    assert list(corpus_documents(_write(tmp_path / "n.parquet", records))) == [["A."], ["B."]]


def test_globs_and_directories_over_many_files(tmp_path):
    shards = [RECORDS[i:i + 2] for i in range(0, len(RECORDS), 2)]
    (tmp_path / "pq").mkdir()
    for i, shard in enumerate(shards):
        _write(tmp_path / "pq" / f"shard-{i:03d}.parquet", shard)
    assert list(corpus_documents(str(tmp_path / "pq" / "shard-*.parquet"))) == EXPECTED
    assert list(corpus_documents(tmp_path / "pq")) == EXPECTED
    # a directory of mixed formats, a saved dataset inside it read whole in its own order
    mixed = tmp_path / "mixed"
    (mixed / "sub").mkdir(parents=True)
    _write(mixed / "a.jsonl.zst", RECORDS[:1])
    _write(mixed / "b_saved", RECORDS[1:3])  # its state.json and dataset_info.json are not read
    _write(mixed / "sub" / "c.parquet", RECORDS[3:])
    (mixed / "notes.md").write_text("not a corpus file")
    (mixed / "model.gz").write_bytes(gzip.compress(b"no text suffix: not read"))
    assert list(corpus_documents(mixed)) == EXPECTED
    # a glob over a saved dataset's files reads its data, not its metadata
    assert list(corpus_documents(str(mixed / "b_saved" / "*"))) == EXPECTED[1:2]
    assert [p.name for p in resolve_corpus_files(mixed)] == [
        "a.jsonl.zst", "data-00000-of-00002.arrow", "data-00001-of-00002.arrow", "c.parquet"]


def test_a_dataset_dict_directory_names_its_splits(tmp_path):
    split = datasets.Dataset.from_list(RECORDS)
    datasets.DatasetDict({"train": split, "test": split}).save_to_disk(str(tmp_path / "dd"))
    with pytest.raises(ValueError, match=r"dd holds a DatasetDict saved by datasets \(splits: test, "
                                         r"train\); name one split's directory, e.g. .*dd/test"):
        corpus_documents(tmp_path / "dd")
    assert list(corpus_documents(tmp_path / "dd" / "train")) == EXPECTED


def test_datasets_objects_in_python(tmp_path):
    dataset = datasets.Dataset.from_list(RECORDS)
    assert list(corpus_documents(dataset)) == EXPECTED
    assert list(corpus_documents(dataset.to_iterable_dataset())) == EXPECTED
    # what a Dataset's indices say (select, shuffle), not its table's order
    assert list(corpus_documents(dataset.select([4, 0]))) == [EXPECTED[3], EXPECTED[0]]
    streamed = datasets.IterableDataset.from_generator(lambda: iter(RECORDS))  # columns unknown
    assert list(corpus_documents(streamed)) == EXPECTED
    saved = _write(tmp_path / "c_saved", RECORDS)
    assert list(corpus_documents(datasets.load_from_disk(str(saved)))) == EXPECTED
    # several corpora: paths and datasets in one list
    assert list(corpus_documents([dataset, saved])) == EXPECTED * 2
    with pytest.raises(ValueError, match=r"the datasets.Dataset has no column 'body' \(its columns: "
                                         r"text, title, id.*pass text_field=NAME"):
        corpus_documents(dataset, text_field="body")
    with pytest.raises(ValueError, match=r"a datasets.DatasetDict \(splits: train\) holds several "
                                         r"datasets; pass one split, e.g. dataset\['train'\]"):
        corpus_documents(datasets.DatasetDict({"train": dataset}))
    with pytest.raises(ValueError, match=r"row 1 of the datasets.IterableDataset: record has no "
                                         r"string field 'text'"):
        list(corpus_documents(datasets.IterableDataset.from_generator(
            lambda: iter([{"text": "a"}, {"text": 3}]))))


def test_python_iterables_of_texts_documents_and_records():
    texts = (r["text"] for r in RECORDS)  # a generator: read once, item by item
    assert list(corpus_documents(texts)) == EXPECTED
    assert list(corpus_documents(iter(RECORDS))) == EXPECTED
    documents = [["  kept as given  ", "", "two"], ("a tuple",)]
    assert list(corpus_documents(documents)) == [["kept as given", "two"], ["a tuple"]]
    assert list(corpus_documents(iterable_documents(["One. Two."]))) == [["One.", "Two."]]
    # a list of strings is a list of specs (as on the command line), named if it is not one
    with pytest.raises(FileNotFoundError, match=r"corpus 'One text. Two.' does not exist.*pass "
                                                r"iter\(texts\)"):
        corpus_documents(["One text. Two."])
    with pytest.raises(ValueError, match=r"item 1 of the iterable is a int; give texts \(str\), "
                                         r"documents"):
        list(corpus_documents(iter(["fine", 3])))
    with pytest.raises(ValueError, match="item 0 of the iterable is a document with a int among"):
        corpus_documents(iter([["a", 1]]))  # the first item is checked at the call
    with pytest.raises(ValueError, match="the corpus iterable is empty"):
        corpus_documents(iter([]))


def test_an_iterable_of_paths_is_not_read_as_texts(tmp_path):
    path = _write(tmp_path / "c.jsonl", RECORDS)
    assert list(corpus_documents(p for p in [path])) == EXPECTED  # Path objects: specs, as before
    with pytest.raises(ValueError, match=r"its first text '.*c\.jsonl' names a corpus; .* pass a "
                                         r"list of them"):
        corpus_documents(str(p) for p in [path])


def test_write_shards_refuses_strings_for_documents(tmp_path):
    with pytest.raises(ValueError, match=r"a document is a list of sentences, not a string "
                                         r"\(got 'Some text.'\); pass corpus_documents"):
        write_shards(iter(["Some text."]), Tokenizer.train(["Some text."], vocab_size=30),
                     tmp_path / "out")
    assert not (tmp_path / "out").exists()


# --- bad files: one ValueError naming the file and the fix, at the call where it can be ---------


def _truncated_parquet(path: Path) -> bytes:
    data = _write(path.with_name("whole.parquet"), RECORDS).read_bytes()
    return data[: len(data) // 2] + data[-16:]


BAD_AT_CALL = {
    "not.parquet": (lambda p: b"PAR1 not really parquet PAR1",
                    r"not\.parquet is not a valid Parquet file \(.*\); write it again"),
    "cut.parquet": (_truncated_parquet, r"cut\.parquet is not a valid Parquet file"),
    "not.arrow": (lambda p: b"definitely not arrow data",
                  r"not\.arrow is not a valid Arrow file \(.*\); save it again"),
    "not.jsonl.gz": (lambda p: b"plain text named .gz",
                     r"not\.jsonl\.gz is not valid gzip data \(.*\); check it with `gzip -t "
                     r"not\.jsonl\.gz`, or, if it is not compressed, drop the \.gz suffix"),
    "cut.jsonl.gz": (lambda p: gzip.compress(_jsonl(RECORDS))[:40],
                     r"cut\.jsonl\.gz is not valid gzip data \(Compressed file ended"),
    "not.txt.bz2": (lambda p: b"plain", r"not\.txt\.bz2 is not valid bzip2 data"),
    "not.jsonl.zst": (lambda p: b"plain text",
                      r"not\.jsonl\.zst is not valid zstd data \(.*\); check it with `zstd -t"),
    "cut.jsonl.zst": (lambda p: _zstd(_jsonl(RECORDS))[:-3],
                      r"cut\.jsonl\.zst is not valid zstd data \(compressed file ended before"),
    "latin1.txt.gz": (lambda p: gzip.compress("caf\u00e9\n".encode("latin-1")),
                      r"latin1\.txt\.gz: invalid UTF-8 at byte offset 3 of its decompressed text "
                      r"\(byte 0xe9\); re-encode .* `gzip -dc latin1\.txt\.gz \| iconv -f latin1 -t "
                      r"utf-8 \| gzip > fixed\.txt\.gz`"),
    "image.txt.zst": (lambda p: _zstd(b"\x89PNG\r\n\x1a\n\x00\x00"), r"image\.txt\.zst is binary"),
    "packed.txt": (lambda p: gzip.compress(b"text\n"),
                   r"packed\.txt is binary, not text \(a NUL byte at offset \d+\); it starts like a "
                   r"gzip file: name it packed\.txt\.gz to read it"),
    "empty.jsonl.gz": (lambda p: b"", r"corpus file .*empty\.jsonl\.gz is empty: no document"),
    "empty.txt.bz2": (lambda p: b"", r"empty\.txt\.bz2 is empty"),
    "empty.jsonl.zst": (lambda p: b"", r"empty\.jsonl\.zst is empty"),
    "empty.parquet": (lambda p: b"", r"empty\.parquet is empty"),
    "blank.txt.gz": (lambda p: gzip.compress(b"\n \n"), r"blank\.txt\.gz is empty"),
}


@pytest.mark.parametrize("name", sorted(BAD_AT_CALL))
def test_bad_files_are_named_with_the_fix_at_the_call(tmp_path, name):
    make, expected = BAD_AT_CALL[name]
    path = tmp_path / name
    path.write_bytes(make(path))
    with pytest.raises(ValueError, match=expected):
        corpus_documents(path)


def test_a_parquet_file_without_rows_is_empty_and_skipped_among_others(tmp_path):
    pq.write_table(pa.table({"text": pa.array([], pa.string())}), tmp_path / "none.parquet")
    with pytest.raises(ValueError, match=r"none\.parquet is empty: no document \(no rows"):
        corpus_documents(tmp_path / "none.parquet")
    _write(tmp_path / "rows.parquet", RECORDS)
    assert list(corpus_documents(tmp_path)) == EXPECTED


def test_a_compressed_file_corrupt_after_its_start_is_named_when_read(tmp_path):
    good = gzip.compress(_jsonl(RECORDS * 4000))  # longer than the 64 KiB checked at the call
    path = tmp_path / "late.jsonl.gz"
    path.write_bytes(good[:len(good) // 2])
    documents = corpus_documents(path)  # the start is fine
    with pytest.raises(ValueError, match=r"late\.jsonl\.gz is not valid gzip data \(Compressed file "
                                         r"ended before the end-of-stream marker"):
        list(documents)


@pytest.mark.parametrize("module, name, make", [
    ("pyarrow", "c.parquet", lambda p: _write(p, RECORDS)),
    ("pyarrow", "c_saved", lambda p: _write(p, RECORDS)),
    ("zstandard", "c.jsonl.zst", lambda p: _write(p, RECORDS)),
])
def test_a_missing_optional_package_says_how_to_install_it(tmp_path, monkeypatch, module, name,
                                                           make):
    path = make(tmp_path / name)
    for loaded in [m for m in sys.modules if m == module or m.startswith(module + ".")]:
        monkeypatch.setitem(sys.modules, loaded, None)  # `import module` now fails
    with pytest.raises(MissingDependencyError, match=rf"corpus file .*{name}.* needs the {module!r} "
                                                     rf"package, which is not installed: pip install "
                                                     rf"'bertjax\[corpora\]' \(or pip install "
                                                     rf"{module}\)"):
        corpus_documents(path)


def test_importing_bertjax_data_loads_no_optional_package_or_framework():
    code = ("import sys, bertjax.data, bertjax.data.corpus\n"
            "print(sorted(m for m in ('pyarrow', 'datasets', 'zstandard', 'pandas', 'jax', 'torch') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
