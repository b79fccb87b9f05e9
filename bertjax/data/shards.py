"""Tokenise a corpus once into memory-mapped arrays, so training never re-tokenises.

A shard directory holds:

    tokens.bin      every sentence's token ids back to back (uint16 if the vocabulary fits, else
                    int32), no special tokens
    sentences.bin   int64 offsets into tokens: sentence i is tokens[s[i]:s[i+1]]   (n_sentences+1)
    documents.bin   int64 offsets into sentences: document d is sentences d[d]..d[d+1]  (n_docs+1)
    meta.json       format, dtypes, counts, unknown-token rate, vocabulary hash and special ids
    tokenizer.json, vocab.txt   the vocabulary that made the tokens

Raw `.bin` files (not `.npy`) let the writer stream: lengths are unknown until the corpus ends, and
memory stays bounded by one encode batch. Sentences of a document are contiguous in `tokens.bin`,
so any run of consecutive sentences is one slice. The directory is written under a temporary name
and renamed into place at the end, so a crash never leaves a half-written shard directory.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.data.corpus import Document
from bertjax.data.tokenizer import SpecialTokens, WordPieceTokenizer
from bertjax.io.files import atomic_directory

FORMAT = "bertjax-shards-1"
META = "meta.json"


def write_shards(
    documents: Iterable[Document],
    tokenizer: WordPieceTokenizer,
    out_dir: str | os.PathLike,
    *,
    corpus: str = "",
    overwrite: bool = False,
    min_documents: int = 1,
    encode_chars: int = 1 << 20,
    progress: bool = False,
) -> dict[str, Any]:
    """Tokenise `documents` into `out_dir` (atomically); returns the metadata written.

    Sentences that tokenise to nothing and documents left without sentences are dropped.
    Fewer than `min_documents` documents is an error (next-sentence prediction needs 2).
    `encode_chars` bounds the text handed to one `encode_batch` call (and so the memory used).
    """
    out = Path(out_dir)
    if out.exists() and not overwrite:
        raise FileExistsError(f"{out} already exists; remove it or pass overwrite=True (--force)")
    dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.int32)
    unk = tokenizer.special.unk
    counts = {"documents": 0, "sentences": 0, "tokens": 0, "unknown_tokens": 0, "bytes": 0}
    started = time.perf_counter()

    with atomic_directory(out, replace=True) as tmp:  # a crash never leaves a half-written out
        from tqdm import tqdm

        bar = tqdm(total=None, unit="doc", disable=not progress, desc="tokenising", smoothing=0.1)
        with (open(tmp / "tokens.bin", "wb") as f_tok, open(tmp / "sentences.bin", "wb") as f_sent,
              open(tmp / "documents.bin", "wb") as f_doc):
            f_sent.write(np.zeros(1, np.int64).tobytes())
            f_doc.write(np.zeros(1, np.int64).tobytes())
            pending: list[Document] = []
            pending_chars = 0

            def flush() -> None:
                nonlocal pending_chars
                texts = [s for doc in pending for s in doc]
                encoded = tokenizer.encode_batch(texts) if texts else []
                k = 0
                doc_ends, sent_ends, arrays = [], [], []
                for doc in pending:
                    kept = 0
                    for ids in encoded[k:k + len(doc)]:
                        if ids:
                            arrays.append(ids)
                            counts["tokens"] += len(ids)
                            sent_ends.append(counts["tokens"])
                            kept += 1
                    k += len(doc)
                    if kept:
                        counts["sentences"] += kept
                        counts["documents"] += 1
                        doc_ends.append(counts["sentences"])
                if arrays:
                    flat = np.fromiter(itertools.chain.from_iterable(arrays), dtype=np.int64,
                                       count=sum(map(len, arrays)))
                    counts["unknown_tokens"] += int(np.count_nonzero(flat == unk))
                    f_tok.write(flat.astype(dtype).tobytes())
                    f_sent.write(np.asarray(sent_ends, np.int64).tobytes())
                    f_doc.write(np.asarray(doc_ends, np.int64).tobytes())
                bar.update(len(pending))
                bar.set_postfix(MB=f"{counts['bytes'] / 1e6:.1f}", tokens=counts["tokens"],
                                refresh=False)
                pending.clear()
                pending_chars = 0

            for doc in documents:
                pending.append(doc)
                chars = sum(len(s) for s in doc)
                pending_chars += chars
                counts["bytes"] += sum(len(s.encode("utf-8", "surrogatepass")) for s in doc)
                if pending_chars >= encode_chars:
                    flush()
            flush()
        bar.close()

        if counts["documents"] == 0:
            raise ValueError(
                f"corpus {corpus or '<documents>'} is empty: no document has a sentence with "
                "tokens; check the path, the file format (one sentence per line, blank line "
                "between documents) or --text-field"
            )
        if counts["documents"] < min_documents:
            raise ValueError(
                f"corpus {corpus or '<documents>'} has {counts['documents']} document(s); "
                f"at least {min_documents} are needed (next-sentence prediction draws B from "
                "another document): add documents, separated by a blank line in text files"
            )
        seconds = time.perf_counter() - started
        meta = {
            "format": FORMAT,
            "corpus": corpus,
            "token_dtype": dtype.name,
            "vocab_size": tokenizer.vocab_size,
            "vocab_sha256": tokenizer.vocab_hash,
            "special_tokens": dataclasses.asdict(tokenizer.special),
            **counts,
            "unknown_rate": counts["unknown_tokens"] / max(counts["tokens"], 1),
            "seconds": round(seconds, 3),
            "mb_per_s": round(counts["bytes"] / 1e6 / max(seconds, 1e-9), 3),
        }
        tokenizer.save(tmp)
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
    return meta


def _memmap(path: Path, dtype: Any, count: int) -> np.ndarray:
    if count == 0:
        return np.zeros(0, dtype)
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,))


class Shards:
    """A shard directory opened read-only: arrays are memory maps, nothing is loaded eagerly."""

    def __init__(self, directory: str | os.PathLike):
        self.directory = Path(directory)
        meta_path = self.directory / META
        if not meta_path.is_file():
            raise FileNotFoundError(
                f"{self.directory} is not a shard directory (no {META}); make one with "
                "`bertjax data --corpus ... --vocab ... --out DIR`"
            )
        self.meta = json.loads(meta_path.read_text())
        if self.meta.get("format") != FORMAT:
            raise ValueError(
                f"{meta_path}: format {self.meta.get('format')!r}, expected {FORMAT!r}"
            )
        n_tok, n_sent, n_doc = (self.meta[k] for k in ("tokens", "sentences", "documents"))
        self.tokens = _memmap(self.directory / "tokens.bin", self.meta["token_dtype"], n_tok)
        self.sentence_offsets = _memmap(self.directory / "sentences.bin", np.int64, n_sent + 1)
        self.document_offsets = _memmap(self.directory / "documents.bin", np.int64, n_doc + 1)
        self.special = SpecialTokens(**self.meta["special_tokens"])
        self.vocab_size: int = self.meta["vocab_size"]

    @property
    def num_documents(self) -> int:
        return len(self.document_offsets) - 1

    @property
    def num_sentences(self) -> int:
        return len(self.sentence_offsets) - 1

    @property
    def num_tokens(self) -> int:
        return len(self.tokens)

    def tokenizer(self) -> WordPieceTokenizer:
        return WordPieceTokenizer.load(self.directory / "tokenizer.json")

    def document_token_offsets(self) -> np.ndarray:
        """Token offset of each document start (n_docs+1): document d is tokens[o[d]:o[d+1]]."""
        return np.asarray(self.sentence_offsets)[np.asarray(self.document_offsets)]

    def check_vocabulary(self, tokenizer: WordPieceTokenizer) -> None:
        if tokenizer.vocab_hash != self.meta["vocab_sha256"]:
            raise ValueError(
                f"{self.directory} was tokenised with another vocabulary (sha256 "
                f"{self.meta['vocab_sha256'][:12]}, given {tokenizer.vocab_hash[:12]}); "
                "re-run `bertjax data` with this vocabulary"
            )
