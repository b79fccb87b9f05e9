"""The data cache (`bertjax.jobs.pretrain.data_cache`): a run with the same data options as an
earlier one copies that run's vocabulary and shards, byte for byte what it would have made; other
options, another corpus or a changed file make new ones; a damaged entry, a cache that cannot be
written or data over the size limit cost nothing but the time."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

import pytest

from bertjax.common.caches import user_cache_directory
from bertjax.data import corpus_documents
from bertjax.jobs.pretrain import data_cache
from bertjax.jobs.pretrain.data import open_data
from bertjax.jobs.pretrain.data_cache import entry_for
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

FILES = ("vocab.txt", "tokenizer.json", "data/train/tokens.bin", "data/train/meta.json",
         "data/eval/tokens.bin", "data/eval/meta.json")


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    """Forty held-out documents of the plays as a text file (a blank line between documents)."""
    docs = itertools.islice(corpus_documents("shakespeare", split="eval"), 40)
    path = tmp_path / "corpus" / "plays.txt"
    path.parent.mkdir()
    path.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    return path


def _config(corpus: Path | str, **overrides: object) -> rc.RunConfig:
    return rc.load(overrides={"model.preset": "tiny", "data.corpus": str(corpus),
                              "data.vocab_size": 200, "data.seq_len": 32, "data.batch_size": 4,
                              "data.eval_batches": 1, **overrides})


def _prepare(config: rc.RunConfig, run: Path, cache: Path | None) -> Path | None:
    """Open a new run's data as the job does; the cache entry it was copied from."""
    run.mkdir()
    return open_data(config, RunDir(run), rebuild=True, cache=cache).cached_from


def _files(run: Path) -> dict[str, object]:
    """The run's data files' bytes (meta.json's fields, less how long the writing took)."""
    return {name: {k: v for k, v in json.loads((run / name).read_text()).items()
                   if k not in ("seconds", "mb_per_s")} if name.endswith("meta.json")
            else (run / name).read_bytes() for name in FILES}


def test_a_run_with_the_same_data_options_copies_the_first_runs_data(tmp_path, corpus):
    cache = tmp_path / "cache"
    assert _prepare(_config(corpus), tmp_path / "a", cache) is None  # made, then kept
    (entry,) = cache.iterdir()
    assert entry == entry_for(cache, _config(corpus))
    other = _config(corpus, **{"train.seed": 3, "data.seq_len": 64, "data.mask_prob": 0.15})
    assert _prepare(other, tmp_path / "b", cache) == entry  # not data options: copied
    assert _prepare(_config(corpus), tmp_path / "c", None) is None  # no cache: made here
    assert _files(tmp_path / "b") == _files(tmp_path / "a") == _files(tmp_path / "c")


def test_the_entry_follows_the_data_options_the_corpus_and_its_files(tmp_path, corpus):
    cache = tmp_path / "cache"
    first = entry_for(cache, _config(corpus))
    assert entry_for(cache, _config(corpus, **{"train.steps": 7})) == first
    assert entry_for(cache, _config(corpus.parent)) != first  # its directory: another corpus
    for change in ({"data.vocab_size": 300}, {"data.text_field": "body"},
                   {"model.model_type": "roberta", "train.objective": "mlm"}):
        assert entry_for(cache, _config(corpus, **change)) != first, change
    stat = corpus.stat()
    corpus.write_text(corpus.read_text() + "Exeunt.\n")
    assert entry_for(cache, _config(corpus)) != first  # the file changed
    os.utime(corpus, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert entry_for(cache, _config(corpus)) != first  # its size alone tells
    plays = entry_for(cache, _config("shakespeare"))
    assert plays == entry_for(cache, _config("shakespeare")) and plays != first
    assert entry_for(cache, _config(tmp_path / "missing.txt")) is None


def test_a_damaged_entry_is_replaced_by_the_runs_own(tmp_path, corpus):
    cache = tmp_path / "cache"
    _prepare(_config(corpus), tmp_path / "a", cache)
    (entry,) = cache.iterdir()
    (entry / "train" / "tokens.bin").unlink()
    assert _prepare(_config(corpus), tmp_path / "b", cache) is None  # made anew
    assert _files(tmp_path / "b") == _files(tmp_path / "a")
    assert _prepare(_config(corpus), tmp_path / "c", cache) == entry  # and kept whole again
    assert _files(tmp_path / "c") == _files(tmp_path / "a")


def test_what_cannot_be_kept_costs_only_time(tmp_path, corpus, unwritable_dir, monkeypatch):
    cache = unwritable_dir / "cache"
    assert _prepare(_config(corpus), tmp_path / "a", cache) is None
    assert not cache.exists()
    monkeypatch.setattr(data_cache, "MAX_BYTES", 1000)  # the shards are larger
    assert _prepare(_config(corpus), tmp_path / "b", tmp_path / "cache") is None
    assert not (tmp_path / "cache").exists()
    assert _files(tmp_path / "b") == _files(tmp_path / "a")


def test_the_command_line_says_where_the_data_came_from(tmp_path, corpus, monkeypatch, capsys):
    from bertjax.cli.main import main

    monkeypatch.setenv("BERTJAX_DATA_CACHE", str(tmp_path / "cache"))
    tiny = ["pretrain", "--model.preset=tiny", f"--data.corpus={corpus}", "--data.vocab-size=200",
            "--data.seq-len=32", "--data.batch-size=4", "--data.eval-batches=1",
            "--train.steps=1", "--no-progress"]
    assert main([*tiny, "--output-dir", str(tmp_path / "a")]) == 0
    assert "copied from the data cache" not in capsys.readouterr().err
    assert main([*tiny, "--output-dir", str(tmp_path / "b")]) == 0
    (entry,) = (tmp_path / "cache").iterdir()
    assert f"copied from the data cache {entry} (made by an earlier run" in capsys.readouterr().err
    monkeypatch.setenv("BERTJAX_DATA_CACHE", "0")
    assert main([*tiny, "--output-dir", str(tmp_path / "c")]) == 0
    assert "copied from the data cache" not in capsys.readouterr().err
    assert _files(tmp_path / "c") == _files(tmp_path / "b") == _files(tmp_path / "a")


def test_where_the_caches_are() -> None:
    assert user_cache_directory("BERTJAX_DATA_CACHE", "data", {}) == (
        Path.home() / ".cache" / "bertjax" / "data")
    assert user_cache_directory("BERTJAX_DATA_CACHE", "data", {"XDG_CACHE_HOME": "/c"}) == Path(
        "/c/bertjax/data")
    assert user_cache_directory("BERTJAX_DATA_CACHE", "data", {"BERTJAX_DATA_CACHE": "/d"}) == Path(
        "/d")
    for off in ("0", "off", "False", "no"):
        assert user_cache_directory("BERTJAX_DATA_CACHE", "data", {"BERTJAX_DATA_CACHE": off}) is None
