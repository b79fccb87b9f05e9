"""Packed pre-training rows: several [CLS] A [SEP] B [SEP] pairs per row of `seq_len` tokens (or
several [CLS] segment [SEP] segments of masked LM alone, `bertjax.data.segments`: the same table
with an empty B, `specials=2`).

Every pair is masked exactly as it would be alone in its own row (`masking.mask_tokens` keyed by
its pair index), then moved into its packed row: the same tokens, masks, labels and so the same
losses and metrics, whether packed or not. What packing changes is how many pairs one step sees.

`max_predictions` stays the width of a row's prediction slots (a static shape, and the MLM head's
cost): each pair keeps its own `min(max_predictions, round(15% of its tokens))`, and the packer
never puts more predictions into a row than fit. A pair's count is bounded from its length alone
(`prediction_bound`), so rows are planned before any masking.

Rows are planned per epoch from the epoch's pair order, in chunks of `CHUNK` pairs, each packed by
best-fit decreasing (rows stay bounded, the work linear in the corpus), and the rows shuffled
with the epoch's generator, so a batch mixes rows of long and short pairs. numpy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from bertjax.data.packing import RowLayout, best_fit_decreasing
from bertjax.data.pairs import SPECIAL_PER_PAIR
from bertjax.errors import InputError

PACKINGS = ("auto", "none", "best-fit")
CHUNK = 8192  # pairs packed together: rows planned within a chunk
# "auto" packs when the pairs fill less than this share of their unpacked rows' tokens, i.e.
# when packing needs at most 80% of the rows (1.25x the real tokens per step). The bundled plays
# (long scenes) fill more than that at seq_len 128, so they train unpacked; the plays cut into
# speeches fill far less (docs/packing.md has the measurements).
AUTO_MAX_FILL = 0.8
# Rows hold at most one pair per this many tokens (K = seq_len // 16: 8 at 128): the plays as
# speeches never put more than 8 pairs in a row of 128 (a pair's prediction bounds them first),
# and each slot of K costs the last layer a row, so a larger K only costs.
PAIR_TOKENS = 16


def pair_lengths(pairs: np.ndarray, specials: int = SPECIAL_PER_PAIR) -> np.ndarray:
    """(N,) tokens of each pair's row: [CLS] A [SEP] B [SEP] (`specials` special tokens; 2 for
    a segment's [CLS] A [SEP])."""
    pairs = np.asarray(pairs)
    return (pairs[:, 1] - pairs[:, 0] + pairs[:, 3] - pairs[:, 2] + specials).astype(np.int64)


def prediction_bound(lengths: np.ndarray, max_predictions: int, mask_prob: float,
                     specials: int = SPECIAL_PER_PAIR) -> np.ndarray:
    """(N,) the most predictions `mask_tokens` can give each pair: its rule applied to every
    token of A and B as a candidate (special tokens in the text only lower the count)."""
    candidates = np.asarray(lengths) - specials
    return np.minimum(max_predictions, np.maximum(1, np.rint(candidates * mask_prob))).astype(
        np.int64)


def real_token_share(lengths: np.ndarray, seq_len: int) -> float:
    """The share of an unpacked batch's tokens that are text (pairs), not padding."""
    return float(np.sum(lengths)) / max(len(lengths) * seq_len, 1)


def resolve_packing(packing: str, lengths: np.ndarray, seq_len: int) -> str:
    """"none" or "best-fit": "auto" packs where the pairs fill under `AUTO_MAX_FILL` of their
    unpacked rows."""
    if packing not in PACKINGS:
        raise InputError(f"packing must be one of {', '.join(PACKINGS)}, got {packing!r}")
    if packing != "auto":
        return packing
    return "best-fit" if real_token_share(lengths, seq_len) < AUTO_MAX_FILL else "none"


def max_pairs_per_row(seq_len: int, max_predictions: int) -> int:
    """K, the static width of a packed row's per-pair arrays and the most pairs the packer puts
    in a row: one per `PAIR_TOKENS` tokens (each pair also takes a prediction). Every slot costs
    a row of the last layer ([CLS] for the pooler), so K is not the 5-token pair's bound."""
    return max(1, min(seq_len // PAIR_TOKENS, max_predictions))


@dataclasses.dataclass(frozen=True)
class PlannedRows:
    """Pairs placed in rows, row by row: rows [a, b) hold `pairs[first[a]:first[b]]`."""

    pairs: np.ndarray  # (N,) pair indices in row order, slot order within a row
    layout: RowLayout  # member i is pairs[i]
    first: np.ndarray  # (R + 1,) each row's first member

    @property
    def num_rows(self) -> int:
        return self.layout.num_rows

    def rows(self, a: int, b: int, num_rows: int) -> tuple[np.ndarray, RowLayout]:
        """The pairs of rows [a, b) and their layout in `num_rows` rows (the rest empty)."""
        a, b = min(a, self.num_rows), min(b, self.num_rows)
        lo, hi = int(self.first[a]), int(self.first[b])
        members = np.arange(lo, hi)
        return self.pairs[lo:hi], self.layout.subset(members, self.layout.row[lo:hi] - a, num_rows)


def plan_rows(index: np.ndarray, lengths: np.ndarray, *, seq_len: int, max_predictions: int,
              mask_prob: float, rng: np.random.Generator | None = None, chunk: int = CHUNK,
              specials: int = SPECIAL_PER_PAIR) -> PlannedRows:
    """The pairs `index` (in this order; `lengths` indexed by pair, each holding `specials`
    special tokens) packed into rows, chunk by chunk; the rows shuffled by `rng` (None: kept in
    order)."""
    index = np.asarray(index, np.int64)
    K = max_pairs_per_row(seq_len, max_predictions)
    rows: list[np.ndarray] = []
    for first in range(0, len(index), chunk):
        part = index[first:first + chunk]
        n = lengths[part]
        costs = prediction_bound(n, max_predictions, mask_prob, specials)
        rows += [part[r] for r in best_fit_decreasing(n.tolist(), seq_len, K, costs.tolist(),
                                                      max_predictions)]
    if rng is not None:
        rows = [rows[i] for i in rng.permutation(len(rows))]
    pairs = np.concatenate(rows) if rows else np.zeros(0, np.int64)
    counts = np.array([len(r) for r in rows], np.int64)
    layout = RowLayout.contiguous(counts, lengths[pairs], seq_len, K)
    return PlannedRows(pairs, layout, np.concatenate([[0], np.cumsum(counts)]))


def pack_pair_batch(batch: dict[str, np.ndarray], layout: RowLayout, pad_id: int
                    ) -> dict[str, np.ndarray]:
    """Unpacked pair rows (`PretrainingBatches.make_batch`, one pair each) moved into packed
    rows: the token arrays placed at each pair's offset, its predictions after those of the
    pairs before it in its row, its NSP label in its slot with `next_sentence_weights` 1 (0 for
    an empty slot; segments of masked LM alone have no NSP label, and get none)."""
    P = batch["masked_positions"].shape[1]
    out = layout.inputs()
    out["input_ids"] = layout.tokens(batch["input_ids"], pad_id)
    out["token_type_ids"] = layout.tokens(batch["token_type_ids"])
    member, slot = np.nonzero(batch["masked_weights"] > 0)  # each pair's, in order
    rows = layout.row[member]
    order = np.lexsort((slot, layout.slot[member], rows))  # row, then pair, then its order
    member, slot, rows = member[order], slot[order], rows[order]
    rank = np.arange(len(rows)) - np.searchsorted(rows, rows)  # place among the row's
    if len(rank) and rank.max() >= P:
        raise InputError(f"a packed row got {rank.max() + 1} predictions, more than "
                         f"max_predictions={P}: the rows were planned for another mask_prob")
    R = layout.num_rows
    out["masked_positions"] = np.zeros((R, P), np.int32)
    out["masked_ids"] = np.zeros((R, P), np.int32)
    out["masked_weights"] = np.zeros((R, P), np.float32)
    out["masked_positions"][rows, rank] = batch["masked_positions"][member, slot] + layout.start[
        member]
    out["masked_ids"][rows, rank] = batch["masked_ids"][member, slot]
    out["masked_weights"][rows, rank] = batch["masked_weights"][member, slot]
    if "next_sentence_label" in batch:
        out["next_sentence_label"] = layout.per_sequence(batch["next_sentence_label"])
        out["next_sentence_weights"] = layout.per_sequence(
            np.ones(layout.count, np.float32), 0.0)
    return out
