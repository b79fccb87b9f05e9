"""Full-sentence segments for masked LM alone (RoBERTa's pre-training input, no NSP), over token
offsets in a shard directory.

Each document's sentences are taken in order and gathered into segments of at most
`seq_len - 2` tokens ([CLS] segment [SEP], or <s> segment </s>): a sentence that no longer fits
starts the next segment, so every segment is whole sentences (RoBERTa's "DOC-SENTENCES"); a
sentence longer than a segment on its own is cut into full-length pieces, its rest starting the
next segment. Nothing is random (no short sequences, no pairs, no NotNext): masks are drawn anew
each epoch (`masking`), and the batches shuffle the segments. A segment never crosses a document;
the short ones a document ends with are packed several to a row where that helps
(`pair_packing`, `data.packing=auto`), which fills rows as RoBERTa's "FULL-SENTENCES" does
while each segment keeps its own attention and positions.

A segment is a row of the pair table (`pairs.COLUMNS`) whose B is empty: `a_start, a_end` its
tokens, `b_start = b_end = boundary = a_end`, `label` 0; so batching, packing and masking read
pairs and segments alike (`SPECIAL_PER_SEGMENT` tokens around it instead of a pair's three).
"""

from __future__ import annotations

from array import array
from pathlib import Path

import numpy as np

from bertjax.data.pairs import COLUMNS, cached_table
from bertjax.data.shards import Shards
from bertjax.errors import InputError

SPECIAL_PER_SEGMENT = 2  # [CLS] segment [SEP]
MIN_SEQ_LEN = SPECIAL_PER_SEGMENT + 1  # the shortest sequence that holds a token of text


def create_segments(shards: Shards, seq_len: int) -> np.ndarray:
    """Every document's sentences as segments of at most `seq_len - 2` tokens: an (N, 6) int64
    pair table (`pairs.COLUMNS`) with an empty B, in corpus order."""
    if seq_len < MIN_SEQ_LEN:
        raise InputError(f"seq_len must be at least {MIN_SEQ_LEN} ([CLS] text [SEP]), got "
                         f"{seq_len}")
    max_tokens = seq_len - SPECIAL_PER_SEGMENT
    sent = np.asarray(shards.sentence_offsets).tolist()
    docs = np.asarray(shards.document_offsets).tolist()
    out = array("q")

    def emit(a0: int, a1: int) -> None:
        out.extend((a0, a1, a1, a1, 0, a1))

    for d in range(shards.num_documents):
        start = end = sent[docs[d]]  # the open segment: whole sentences [start, end)
        for s1 in sent[docs[d] + 1:docs[d + 1] + 1]:  # each sentence's end
            if s1 - start > max_tokens:
                if end > start:  # the sentence starts the next segment
                    emit(start, end)
                    start = end
                while s1 - start > max_tokens:  # a sentence longer than a segment: cut
                    emit(start, start + max_tokens)
                    start += max_tokens
            end = s1
        if end > start:
            emit(start, end)
    return np.frombuffer(out, dtype=np.int64).reshape(-1, len(COLUMNS)).copy()


def segments_path(shards: Shards, seq_len: int) -> Path:
    """The cache file of these segments (named so that `shards.PAIRS_PATTERNS` recognises it)."""
    return shards.directory / f"segments-s{seq_len}.npy"


def load_or_create_segments(shards: Shards, seq_len: int, *, cache: bool = False) -> np.ndarray:
    """Segments from the shard directory's cache file if there is one, else made; with `cache`,
    written there (`pairs.cached_table`: opt-in, as for pairs)."""
    return cached_table(segments_path(shards, seq_len), lambda: create_segments(shards, seq_len),
                        cache=cache)
