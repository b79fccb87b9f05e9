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
and renamed into place at the end, so a crash never leaves a half-written shard directory; what else
belongs in it (the NSP pairs) can be made before that rename (`write_shards(then=...)`).

Only a shard directory is ever replaced (`check_shard_output`): a directory holding anything but the
files above and cached pairs or segments (`pairs-*.npy`, `segments-*.npy`) is refused, so a
mistyped `--out` loses nothing.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fnmatch
import itertools
import json
import os
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from bertjax.common.files import atomic_directory, check_output_directory, temporary_name
from bertjax.common.input_overlap import Inputs
from bertjax.data.corpus import Document
from bertjax.data.tokenizer import SAVED_FILES, SpecialTokens, Tokenizer
from bertjax.errors import InputError

FORMAT = "bertjax-shards-1"
META = "meta.json"
BIN_FILES = ("tokens.bin", "sentences.bin", "documents.bin")
# cached NSP pairs (bertjax.data.pairs.pairs_path) and masked-LM segments
# (bertjax.data.segments.segments_path), and the temporary file of one being written
PAIRS_PATTERNS = tuple(name for pattern in ("pairs-*.npy", "segments-*.npy")
                       for name in (pattern, temporary_name(pattern)))


def is_shard_directory(path: str | os.PathLike) -> bool:
    """Whether `path` is a directory `write_shards` wrote: a meta.json of this format and nothing
    but shard files (so replacing it loses nothing a user made)."""
    path = Path(path)
    try:
        meta = json.loads((path / META).read_text(encoding="utf-8"))
        entries = list(path.iterdir())
    except (OSError, ValueError):
        return False
    known = {META, *BIN_FILES, *SAVED_FILES}
    return (isinstance(meta, dict) and meta.get("format") == FORMAT
            and all(p.is_file() and (p.name in known or any(fnmatch.fnmatchcase(p.name, pattern)
                                                            for pattern in PAIRS_PATTERNS))
                    for p in entries))


def check_shard_output(out_dir: str | os.PathLike, overwrite: bool = False, *,
                       what: str = "--out", force: str = "--force",
                       inputs: Inputs | None = None) -> None:
    """Raise (naming `what`, the path and the fix) unless `out_dir` may receive shards: new,
    empty, or - with `overwrite` (`force`) - a shard directory, and none of `inputs` (the
    corpus, the vocabulary: `bertjax.common.input_overlap`). Call it before any work."""
    check_output_directory(out_dir, is_ours=is_shard_directory, made_by="`bertjax data`",
                           replace=overwrite, what=what,
                           replace_hint=f"pass {force} to replace it", inputs=inputs)


def write_shards(
    documents: Iterable[Document],
    tokenizer: Tokenizer,
    out_dir: str | os.PathLike,
    *,
    corpus: str = "",
    overwrite: bool = False,
    min_documents: int = 1,
    encode_chars: int = 1 << 20,
    progress: bool = False,
    then: Callable[[Path], None] | None = None,
) -> dict[str, Any]:
    """Tokenise `documents` into `out_dir` (atomically); returns the metadata written.

    Sentences that tokenise to nothing and documents left without sentences are dropped.
    Fewer than `min_documents` documents is an error (next-sentence prediction needs 2).
    `encode_chars` bounds the text handed to one `encode_batch` call (and so the memory used).
    `overwrite` replaces an existing shard directory, never anything else (`check_shard_output`).
    `then(directory)` runs on the complete shards before they are renamed into place (to add
    the NSP pairs): if it fails, nothing is left at `out_dir`.
    """
    out = Path(out_dir)
    check_shard_output(out, overwrite, what="shard directory", force="overwrite=True (--force)")
    started = time.perf_counter()
    with atomic_directory(out, replace=True) as tmp:  # a crash never leaves a half-written out
        with (ShardWriter(tmp, tokenizer) as writer,
              tqdm(total=None, unit="doc", disable=not progress, desc="tokenising",
                   smoothing=0.1) as bar):
            for batch in _encode_batches(documents, encode_chars):
                writer.write(batch)
                bar.update(len(batch))
                bar.set_postfix(MB=f"{writer.counts['bytes'] / 1e6:.1f}",
                                tokens=writer.counts["tokens"], refresh=False)
        _check_documents(writer.counts["documents"], corpus, min_documents)
        meta = _meta(writer, tokenizer, corpus, time.perf_counter() - started)
        tokenizer.save(tmp)
        (tmp / META).write_text(json.dumps(meta, indent=2) + "\n")
        if then is not None:
            then(tmp)
    return meta


class ShardWriter:
    """Appends documents to the three `.bin` files of a shard directory, counting what it keeps.

    Use as a context manager: the files are open between `__enter__` and `__exit__`.
    """

    def __init__(self, directory: Path, tokenizer: Tokenizer) -> None:
        self.directory = directory
        self.tokenizer = tokenizer
        self.dtype = np.dtype(np.uint16 if tokenizer.vocab_size <= 1 << 16 else np.int32)
        self.counts = {"documents": 0, "sentences": 0, "tokens": 0, "unknown_tokens": 0,
                       "bytes": 0}
        self._files = contextlib.ExitStack()

    def __enter__(self) -> ShardWriter:
        opened = [self._files.enter_context(open(self.directory / name, "wb"))
                  for name in ("tokens.bin", "sentences.bin", "documents.bin")]
        self._tokens, self._sentence_ends, self._document_ends = opened
        self._sentence_ends.write(np.zeros(1, np.int64).tobytes())  # offsets start at 0
        self._document_ends.write(np.zeros(1, np.int64).tobytes())
        return self

    def __exit__(self, *exc: object) -> None:
        self._files.close()

    def write(self, documents: list[Document]) -> None:
        """Encode `documents` in one `encode_batch` call and append the sentences with tokens."""
        self.counts["bytes"] += sum(len(s.encode("utf-8", "surrogatepass"))
                                    for doc in documents for s in doc)
        texts = [s for doc in documents for s in doc]
        encoded = iter(self.tokenizer.encode_batch(texts) if texts else [])
        kept, sentence_ends, document_ends = [], [], []
        for doc in documents:
            ids_of_doc = [ids for ids in itertools.islice(encoded, len(doc)) if ids]
            for ids in ids_of_doc:
                kept.append(ids)
                self.counts["tokens"] += len(ids)
                sentence_ends.append(self.counts["tokens"])
            if ids_of_doc:
                self.counts["sentences"] += len(ids_of_doc)
                self.counts["documents"] += 1
                document_ends.append(self.counts["sentences"])
        if kept:
            flat = np.fromiter(itertools.chain.from_iterable(kept), dtype=np.int64,
                               count=sum(map(len, kept)))
            self.counts["unknown_tokens"] += int(np.count_nonzero(flat == self.tokenizer.special.unk))
            self._tokens.write(flat.astype(self.dtype).tobytes())
            self._sentence_ends.write(np.asarray(sentence_ends, np.int64).tobytes())
            self._document_ends.write(np.asarray(document_ends, np.int64).tobytes())


def _encode_batches(documents: Iterable[Document], encode_chars: int) -> Iterator[list[Document]]:
    """`documents` in runs of at least `encode_chars` characters (the last run may be shorter)."""
    pending: list[Document] = []
    chars = 0
    for doc in documents:
        if isinstance(doc, str):  # its characters would become sentences
            raise InputError(
                f"a document is a list of sentences, not a string (got {doc[:40]!r}); pass "
                "corpus_documents(texts) to split texts into documents"
            )
        pending.append(doc)
        chars += sum(len(s) for s in doc)
        if chars >= encode_chars:
            yield pending
            pending, chars = [], 0
    if pending:
        yield pending


def _check_documents(documents: int, corpus: str, min_documents: int) -> None:
    """Raise ValueError for a corpus with no, or too few, documents that kept a sentence."""
    if documents == 0:
        raise InputError(
            f"corpus {corpus or '<documents>'} is empty: no document has a sentence with "
            "tokens; check the path, the file format (one sentence per line, blank line "
            "between documents) or --text-field"
        )
    if documents < min_documents:
        raise InputError(
            f"corpus {corpus or '<documents>'} has {documents} document(s); "
            f"at least {min_documents} are needed (next-sentence prediction draws B from "
            "another document): add documents, separated by a blank line in text files"
        )


def _meta(writer: ShardWriter, tokenizer: Tokenizer, corpus: str,
          seconds: float) -> dict[str, Any]:
    """meta.json's contents: format, dtypes, counts, rates and the vocabulary's identity."""
    counts = writer.counts
    return {
        "format": FORMAT,
        "corpus": corpus,
        "token_dtype": writer.dtype.name,
        "vocab_size": tokenizer.vocab_size,
        "vocab_sha256": tokenizer.vocab_hash,
        "special_tokens": dataclasses.asdict(tokenizer.special),
        **counts,
        "unknown_rate": counts["unknown_tokens"] / max(counts["tokens"], 1),
        "seconds": round(seconds, 3),
        "mb_per_s": round(counts["bytes"] / 1e6 / max(seconds, 1e-9), 3),
    }


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
            raise InputError(
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

    def tokenizer(self) -> Tokenizer:
        return Tokenizer.load(self.directory / "tokenizer.json")

    def document_token_offsets(self) -> np.ndarray:
        """Token offset of each document start (n_docs+1): document d is tokens[o[d]:o[d+1]]."""
        return np.asarray(self.sentence_offsets)[np.asarray(self.document_offsets)]

    def check_vocabulary(self, tokenizer: Tokenizer) -> None:
        if tokenizer.vocab_hash != self.meta["vocab_sha256"]:
            raise InputError(
                f"{self.directory} was tokenised with another vocabulary (sha256 "
                f"{self.meta['vocab_sha256'][:12]}, given {tokenizer.vocab_hash[:12]}); "
                "re-run `bertjax data` with this vocabulary"
            )
