"""Dynamic 80/10/10 masking, vectorised across a batch with numpy.

Randomness is counter-based: every number is a hash (splitmix64) of (seed, epoch, pair index,
position). A sequence therefore gets the same mask whatever batch, shard or process serves it,
a new mask every epoch (RoBERTa's dynamic masking), and a resumed run needs no generator state.

Rules (google-research/bert, with the deviations noted):

* candidates are the sequence's non-special tokens ([CLS], [SEP], [PAD], and also [UNK] and
  [MASK] if they occur in the text, are never predicted);
* `n = min(max_predictions, max(1, round(n_candidates * mask_prob)))`, `round` half-to-even like
  Python's. The original rounds `len(tokens) * 0.15` with [CLS]/[SEP] counted; counting only
  candidates keeps the masked fraction at 15% of what can be masked;
* the n candidates with the smallest hash are chosen (a uniform sample without replacement); of
  those 80% become [MASK], 10% a random token from `replacement_ids` (never a special token; the
  original may pick any id), 10% stay unchanged;
* whole-word masking ranks words instead of tokens: a "##" continuation piece shares the hash of
  the word it continues; words are taken in hash order while they fit in n tokens (the original
  also skips a word that does not fit and tries shorter ones; here the first word that does not
  fit ends the selection, except that the first word is always taken, cut to n tokens).
"""

from __future__ import annotations

import numpy as np

from bertjax.errors import InputError

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_S30, _S27, _S31 = np.uint64(30), np.uint64(27), np.uint64(31)
_TOP = np.uint64(11)


def mix64(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser: a bijective, well-mixed hash of uint64 values (wraps mod 2**64)."""
    x = x ^ (x >> _S30)
    x = x * _M1
    x = x ^ (x >> _S27)
    x = x * _M2
    return x ^ (x >> _S31)


def row_keys(seed: int, epoch: int, index: np.ndarray) -> np.ndarray:
    """One uint64 key per sequence from (seed, epoch, pair index)."""
    with np.errstate(over="ignore"):
        base = mix64(np.array([seed], np.uint64) * _GOLDEN + np.uint64(epoch & (2**64 - 1)))
        base = mix64(base + np.uint64(0x632BE59BD9B4E019))
        return mix64(base ^ (np.asarray(index, np.uint64) * _GOLDEN))


def _uniform(h: np.ndarray) -> np.ndarray:
    return (h >> _TOP).astype(np.float64) * (1.0 / (1 << 53))


def mask_tokens(
    input_ids: np.ndarray,
    candidates: np.ndarray,
    keys: np.ndarray,
    *,
    max_predictions: int,
    mask_id: int,
    replacement_ids: np.ndarray,
    mask_prob: float = 0.15,
    continuation: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Mask a batch in place of a copy.

    input_ids (B, S) int, candidates (B, S) bool (maskable positions), keys (B,) uint64;
    `continuation` (vocab,) bool marks "##" pieces and turns on whole-word masking.
    Returns (masked input_ids (B,S) int32, masked_positions (B,P) int32, masked_ids (B,P) int32,
    masked_weights (B,P) float32); padding slots hold position 0, id 0 and weight 0.
    """
    B, S = input_ids.shape
    P = max_predictions
    if not 0 < P <= S:
        raise InputError(f"max_predictions must be in [1, seq_len={S}], got {P}")
    n_cand = candidates.sum(axis=1)
    n_pred = np.minimum(P, np.maximum(1, np.rint(n_cand * mask_prob))).astype(np.int64)
    n_pred = np.where(n_cand > 0, np.minimum(n_pred, n_cand), 0)
    pos = np.arange(S, dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = mix64(keys[:, None] ^ ((pos + np.uint64(1)) * _GOLDEN)[None, :])  # (B, S)
    rows = np.arange(B)[:, None]
    never = np.uint64(2**64 - 1)
    if continuation is None:
        score = np.where(candidates, h >> _TOP, never)  # (B, S)
        if P < S:
            chosen = np.argpartition(score, P - 1, axis=1)[:, :P]
            chosen = np.take_along_axis(chosen, np.argsort(score[rows, chosen], axis=1), axis=1)
        else:
            chosen = np.argsort(score, axis=1)
        take = np.arange(P)[None, :] < n_pred[:, None]  # the n smallest scores of each row
        positions = np.sort(np.where(take, chosen, S), axis=1)
    else:
        positions = _whole_word_positions(input_ids, candidates, h, n_pred, P, continuation)
        take = positions < S
    valid = np.arange(P)[None, :] < take.sum(axis=1)[:, None]
    positions = np.where(valid, positions, 0)
    masked_ids = np.where(valid, input_ids[rows, positions], 0)

    with np.errstate(over="ignore"):
        h2 = mix64(h[rows, positions] ^ np.uint64(0xD6E8FEB86659FD93))  # (B, P)
    u = _uniform(h2)
    random_tok = replacement_ids[(mix64(h2) % np.uint64(len(replacement_ids))).astype(np.int64)]
    new = np.where(u < 0.8, mask_id, np.where(u < 0.9, random_tok, masked_ids))
    out = input_ids.astype(np.int32, copy=True)
    # padding slots point at position 0 and write its own value back
    np.put_along_axis(out, positions, np.where(valid, new, out[:, :1]).astype(np.int32), axis=1)
    return (out, positions.astype(np.int32), masked_ids.astype(np.int32),
            valid.astype(np.float32))


def _whole_word_positions(
    input_ids: np.ndarray, candidates: np.ndarray, h: np.ndarray, n_pred: np.ndarray, P: int,  # noqa: N803
    continuation: np.ndarray,
) -> np.ndarray:
    """(B, P) sorted positions of whole words chosen in hash order; S marks empty slots."""
    B, S = input_ids.shape
    if S > 1024:
        raise InputError(f"whole-word masking supports seq_len <= 1024, got {S}")
    cont = continuation[input_ids] & candidates
    cont[:, 0] = False
    cont &= np.concatenate([np.zeros((B, 1), bool), candidates[:, :-1]], axis=1)
    starts = candidates & ~cont
    word = np.maximum.accumulate(np.where(starts, np.arange(S)[None, :], 0), axis=1)  # (B, S)
    rows = np.arange(B)[:, None]
    word_score = (h[rows, word] >> np.uint64(21)) << np.uint64(10)  # low 10 bits: position
    word = np.where(candidates, word, -1 - np.arange(S)[None, :])  # non-candidates: no word
    key = np.where(candidates, word_score | np.arange(S, dtype=np.uint64)[None, :],
                   np.uint64(2**64 - 1))
    order = np.argsort(key, axis=1)  # tokens in word-hash order, a word's pieces together
    ordered_word = word[rows, order]
    ordered_cand = candidates[rows, order]
    # rank (1-based) of each ordered token's word end = cumulative count at its word's last piece
    rank = np.arange(1, S + 1)[None, :]
    last = np.ones((B, S), bool)
    last[:, :-1] = ordered_word[:, 1:] != ordered_word[:, :-1]
    end_rank = np.where(last, rank, S + 1)
    end_rank = np.minimum.accumulate(end_rank[:, ::-1], axis=1)[:, ::-1]
    first_word = ordered_word == ordered_word[:, :1]
    keep = ordered_cand & ((end_rank <= n_pred[:, None]) | (first_word & (rank <= n_pred[:, None])))
    positions = np.sort(np.where(keep, order, S), axis=1)[:, :P]
    return positions
