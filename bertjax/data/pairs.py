"""Sentence pairs for masked LM + next-sentence prediction, as google-research/bert's
`create_pretraining_data.py` makes them, over token offsets in a shard directory.

Per document: a target length (`seq_len - 3`, or with probability `short_seq_prob` a random length
in [2, seq_len - 3]); consecutive sentences gather into a chunk until it reaches the target; A is
the chunk's first `a_end` sentences (random), B either the rest of the chunk (IsNext, label 0) or
sentences from a random start in another document (NotNext, label 1), in which case the chunk's
unused sentences are put back; then the longer segment is trimmed one token at a time, from the
front or the back at random, until both fit.

A pair is six int64 numbers (tokens are never copied): `a_start, a_end, b_start, b_end` (token
offsets into `tokens.bin`, after truncation), `label` and `boundary` (the token offset where A ended
before truncation; for IsNext it is also where B began, which makes consecutiveness checkable).

Two documented departures from the original, both to keep NSP labels at 50/50 (the original is
biased towards NotNext whenever a chunk holds a single sentence):

* the IsNext/NotNext coin is tossed for every chunk; if IsNext comes up for a one-sentence chunk,
  the next sentence of the document joins the chunk and becomes B;
* when IsNext is impossible (a one-sentence chunk at the end of a document, or a one-sentence
  document) the pair is NotNext and one IsNext is "owed": the next NotNext toss on a chunk that
  can be IsNext is turned into IsNext. Labels therefore balance to within a few pairs.

The random document for NotNext is drawn among the *other* documents (never the same one; the
original retries 10 times and may still pick the same). Truncation draws how many tokens leave the
front as a Binomial(n, 1/2), which is the distribution of the original's per-token coin.

Where NotNext's B comes from (`not_next`, one of `NOT_NEXT_CHOICES`):

* "any": any other document, as the original. In Wikipedia that is almost always another subject;
  in a corpus of a few long works cut into documents (the held-out split of the bundled plays:
  two plays cut into scenes) it is often the same work, whose names and words A shares.
* "far": a document of the other half of the corpus (the documents in corpus order, cut where
  half the tokens are behind): a distant part, so that NotNext is another subject as in BERT's
  pairs. With the bundled plays (in name order) B is then far more often from another play than
  with "any" (docs/research.md has the shares).
"""

from __future__ import annotations

import contextlib
import random
from array import array
from collections.abc import Callable
from pathlib import Path

import numpy as np

from bertjax.common.files import write_npy_atomic
from bertjax.data.shards import Shards
from bertjax.errors import InputError

COLUMNS = ("a_start", "a_end", "b_start", "b_end", "label", "boundary")
IS_NEXT, NOT_NEXT = 0, 1
SPECIAL_PER_PAIR = 3  # [CLS] A [SEP] B [SEP]
MIN_SEQ_LEN = SPECIAL_PER_PAIR + 2  # the shortest sequence that holds a pair: a token of A and of B
NOT_NEXT_CHOICES = ("any", "far")  # where NotNext's B comes from (the module docstring)


def check_pair_options(seq_len: int, short_seq_prob: float = 0.1, dupe_factor: int = 1,
                       not_next: str = "any") -> None:
    """Raise ValueError for options no pair can be made with (the command line checks the same
    ranges when it parses its options, before any work)."""
    if not_next not in NOT_NEXT_CHOICES:
        raise InputError(f"not_next must be one of {', '.join(NOT_NEXT_CHOICES)}, got {not_next!r}")
    if seq_len < MIN_SEQ_LEN:
        raise InputError(f"seq_len must be at least {MIN_SEQ_LEN} ([CLS] a [SEP] b [SEP]), "
                         f"got {seq_len}")
    if not 0.0 <= short_seq_prob <= 1.0:
        raise InputError(f"short_seq_prob must be in [0, 1], got {short_seq_prob}")
    if dupe_factor < 1:
        raise InputError(f"dupe_factor must be at least 1, got {dupe_factor}")


def _truncate(a0: int, a1: int, b0: int, b1: int, max_tokens: int, rng: random.Random):
    """Trim the longer of A=[a0,a1), B=[b0,b1) until both fit in max_tokens (ties trim B)."""
    la, lb = a1 - a0, b1 - b0
    excess = la + lb - max_tokens
    if excess <= 0:
        return a0, a1, b0, b1
    first = min(excess, abs(la - lb))
    cut_a = first if la > lb else 0
    cut_b = first - cut_a
    rest = excess - first
    cut_b += (rest + 1) // 2
    cut_a += rest // 2
    front_a = rng.getrandbits(cut_a).bit_count() if cut_a else 0
    front_b = rng.getrandbits(cut_b).bit_count() if cut_b else 0
    return a0 + front_a, a1 - (cut_a - front_a), b0 + front_b, b1 - (cut_b - front_b)


def create_pairs(
    shards: Shards,
    seq_len: int,
    *,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
    seed: int = 0,
    not_next: str = "any",
) -> np.ndarray:
    """All pairs of a shard directory: an (N, 6) int64 array with columns `COLUMNS`.

    `dupe_factor` passes over the corpus with different random choices, as the original does;
    `not_next` says where NotNext's B comes from (the module docstring).
    """
    check_pair_options(seq_len, short_seq_prob, dupe_factor, not_next)
    n_docs = shards.num_documents
    if n_docs < 2:
        raise InputError(
            f"corpus in {shards.directory} has {n_docs} document(s); next-sentence prediction "
            "needs at least two: add documents (a blank line separates documents in text files)"
        )
    max_tokens = seq_len - SPECIAL_PER_PAIR
    sent = np.asarray(shards.sentence_offsets)
    docs = np.asarray(shards.document_offsets).tolist()
    rng = random.Random(seed)
    other_document = _other_document(not_next, sent[docs], rng)
    out = array("q")
    owed = 0
    for _ in range(dupe_factor):
        for d in range(n_docs):
            s0, s1 = docs[d], docs[d + 1]
            starts = sent[s0:s1 + 1].tolist()  # token offset of each sentence start, + the end
            n = s1 - s0
            target = max_tokens
            if rng.random() < short_seq_prob:
                target = rng.randint(2, max_tokens)
            chunk0, i = 0, 0  # the chunk is sentences chunk0..i of this document
            while i < n:
                if i == n - 1 or starts[i + 1] - starts[chunk0] >= target:
                    want_next = rng.random() >= 0.5
                    can_next = i > chunk0 or i + 1 < n
                    if not want_next and owed and can_next:
                        want_next, owed = True, owed - 1
                    elif want_next and not can_next:
                        want_next, owed = False, owed + 1
                    if want_next and i == chunk0:  # one-sentence chunk: its successor is B
                        i += 1
                    size = i - chunk0 + 1
                    a_end = rng.randint(1, size - 1) if size >= 2 else 1
                    a0, a1 = starts[chunk0], starts[chunk0 + a_end]
                    if want_next:
                        b0, b1 = a1, starts[i + 1]
                        label = IS_NEXT
                    else:
                        target_b = target - (a1 - a0)
                        r = other_document(d)
                        r0, r1 = docs[r], docs[r + 1]
                        j = rng.randint(r0, r1 - 1)
                        b0 = int(sent[j])
                        # extend B sentence by sentence until it reaches target_b (at least one)
                        k = int(np.searchsorted(sent[j + 1:r1 + 1], b0 + max(target_b, 1)))
                        b1 = int(sent[min(j + 1 + k, r1)])
                        label = NOT_NEXT
                        i = chunk0 + a_end - 1  # put the unused sentences back
                    a0, a1, b0, b1 = _truncate(a0, a1, b0, b1, max_tokens, rng)
                    out.extend((a0, a1, b0, b1, label, starts[chunk0 + a_end]))
                    chunk0 = i + 1
                i += 1
    return np.frombuffer(out, dtype=np.int64).reshape(-1, len(COLUMNS)).copy()


def _other_document(not_next: str, starts: np.ndarray, rng: random.Random
                    ) -> Callable[[int], int]:
    """`pick(d)`: the document NotNext's B comes from for A in document `d` (`starts`: each
    document's first token, and the end)."""
    n_docs = len(starts) - 1
    if not_next == "any":
        def pick(d: int) -> int:
            r = rng.randint(0, n_docs - 2)
            return r + (r >= d)
        return pick
    # "far": the other half, cut at the first document that starts past half the tokens (each
    # half keeps at least one document)
    cut = min(max(int(np.searchsorted(starts[:-1], starts[-1] / 2, side="right")), 1), n_docs - 1)

    def pick_far(d: int) -> int:
        return rng.randint(cut, n_docs - 1) if d < cut else rng.randint(0, cut - 1)
    return pick_far


def pairs_path(shards: Shards, seq_len: int, short_seq_prob: float, dupe_factor: int,
               seed: int, not_next: str = "any") -> Path:
    """The cache file of these pairs (named so that `shards.PAIRS_PATTERNS` recognises it)."""
    far = "" if not_next == "any" else f"-n{not_next}"  # "any": the name pairs always had
    return (shards.directory
            / f"pairs-s{seq_len}-p{short_seq_prob:g}-d{dupe_factor}-r{seed}{far}.npy")


def load_or_create_pairs(
    shards: Shards,
    seq_len: int,
    *,
    short_seq_prob: float = 0.1,
    dupe_factor: int = 1,
    seed: int = 0,
    cache: bool = False,
    not_next: str = "any",
) -> np.ndarray:
    """Pairs from the shard directory's cache file (memory-mapped) if there is one, else made;
    with `cache`, written there (atomically; a read-only shard directory just skips caching).
    Writing is opt-in: a reader of shards it does not own leaves their directory as it was."""
    return cached_table(
        pairs_path(shards, seq_len, short_seq_prob, dupe_factor, seed, not_next),
        lambda: create_pairs(shards, seq_len, short_seq_prob=short_seq_prob,
                             dupe_factor=dupe_factor, seed=seed, not_next=not_next), cache=cache)


def cached_table(path: Path, make: Callable[[], np.ndarray], *, cache: bool) -> np.ndarray:
    """The table cached at `path` (memory-mapped) if there is one, else `make()`; with `cache`,
    written there (atomically; a read-only shard directory just skips caching)."""
    if path.is_file():
        return np.load(path, mmap_mode="r")
    table = make()
    if cache:
        with contextlib.suppress(OSError):  # a read-only shard directory: no cache
            write_npy_atomic(path, table)
    return table
