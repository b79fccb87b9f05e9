"""The shard writer's bytes for a fixed corpus: pinned by a digest taken before `write_shards` was
split into a writer class, so any change to the on-disk format or to what is kept shows here."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from data_helpers import minilm_tokenizer

from bertjax.data import Shards, write_shards

# sha256 of tokens.bin, sentences.bin, documents.bin and meta.json (without its two timings),
# written by the closure-based writer of commit b150fe0 for `_corpus()` and the MiniLM vocabulary.
DIGEST = "a6e92277b02b9123d9f44bfc976e5bb13fe74f4e54cc43a6d2c48bafad63523a"
TIMINGS = ("seconds", "mb_per_s")


def _corpus() -> list[list[str]]:
    """Documents of varied sizes, an all-blank document, an unknown character and a one-sentence
    document: what the writer drops, keeps and counts."""
    docs = [[f"Document {d}, sentence {s}: the {'quick ' * (s % 4)}fox number {d * 7 + s}."
             for s in range(1 + d % 5)] for d in range(30)]
    docs.insert(3, ["", "   "])  # tokenises to nothing: dropped
    docs.insert(7, ["élan ☃ naïve café", "", "ok"])  # the blank sentence is dropped
    docs.append(["only one"])
    return docs


def _digest(out: Path) -> str:
    digest = hashlib.sha256()
    for name in ("tokens.bin", "sentences.bin", "documents.bin"):
        digest.update(name.encode() + (out / name).read_bytes())
    meta = json.loads((out / "meta.json").read_text())
    for key in TIMINGS:
        meta.pop(key)
    digest.update(json.dumps(meta, sort_keys=True).encode())
    return digest.hexdigest()


@pytest.mark.parametrize("encode_chars", [1, 64, 1 << 20])
def test_shard_bytes_are_unchanged_for_a_fixed_corpus(tmp_path, encode_chars):
    out = tmp_path / "s"
    meta = write_shards(_corpus(), minilm_tokenizer(), out, corpus="fixed",
                        encode_chars=encode_chars)
    assert _digest(out) == DIGEST
    shards = Shards(out)
    assert (meta["documents"], meta["sentences"]) == (shards.num_documents, shards.num_sentences)
    assert (meta["documents"], meta["unknown_tokens"]) == (32, 1) and meta["tokens"] == shards.num_tokens
