"""Fixed-shape pre-training batches from a shard directory: shuffled, sharded, resumable.

Why plain numpy rather than Grain: everything a batch needs is a gather from memory maps (pair
table -> token offsets -> tokens) followed by whole-batch array arithmetic for masking, so there is
no per-record Python work for a multi-worker pipeline to hide; Grain's per-record transforms would
add that work back. The iterator state is two integers (epoch, step) because the pair order is a
pure function of (seed, epoch) and every mask a pure function of (seed, epoch, pair index).

Batch (B = global_batch_size // process_count rows, S = seq_len, P = max_predictions):

    input_ids            (B, S) int32   [CLS] A [SEP] B [SEP] [PAD]..., masked
    token_type_ids       (B, S) int32   0 for [CLS] A [SEP], 1 for B [SEP], 0 for padding
    attention_mask       (B, S) int32   1 for real tokens, 0 for padding
    masked_positions     (B, P) int32   positions of the predictions, ascending; 0 in empty slots
    masked_ids           (B, P) int32   original token ids there; 0 in empty slots
    masked_weights       (B, P) float32 1.0 for a real prediction, 0.0 for an empty slot
    next_sentence_label  (B,)   int32   0 = IsNext, 1 = NotNext (as the original)

`masked_weights` is float32 rather than int32 because it multiplies float losses directly.

For masked LM alone (`next_sentence=False`, RoBERTa's recipe) a row holds one full-sentence
segment, [CLS] text [SEP] (`bertjax.data.segments`), instead of a pair: token types are all 0 and
there is no `next_sentence_label`.

Packed (`packing="best-fit"`, `bertjax.data.pair_packing`), a row holds several pairs, each
masked as it would be alone; the B rows of a batch then hold a varying number of pairs, and the
batch has the model's packing arrays besides (K = `pair_packing.max_pairs_per_row`):

    sequence_ids         (B, S) int32   k on the row's k-th pair (1..K), 0 on padding
    position_ids         (B, S) int32   0, 1, ... within each pair
    cls_positions        (B, K) int32   where each pair starts; -1 for an empty slot
    masked_positions     (B, P) int32   every pair's predictions, in row positions
    next_sentence_label  (B, K) int32   each pair's label; 0 in an empty slot
    next_sentence_weights (B, K) float32 1.0 for a pair, 0.0 for an empty slot

Packed segments have no `next_sentence_*` arrays. `position_ids` count from 0 in every family:
the model moves them to its family's first position (RoBERTa's: pad + 1).
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from bertjax.data.masking import mask_tokens, row_keys
from bertjax.data.pair_packing import (
    PlannedRows,
    pack_pair_batch,
    pair_lengths,
    plan_rows,
    resolve_packing,
)
from bertjax.data.pairs import SPECIAL_PER_PAIR, load_or_create_pairs
from bertjax.data.segments import SPECIAL_PER_SEGMENT, load_or_create_segments
from bertjax.data.shards import Shards
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError

STATE_VERSION = 1
_CHECKED = ("seed", "num_pairs", "global_batch_size", "seq_len", "max_predictions", "packing")


class PretrainingBatches:
    """Iterator of pre-training batches (see the module docstring for the arrays).

    Epoch e visits the pairs in the order `permutation(seed, e)`, cut into global batches of
    `global_batch_size` (the remainder is dropped, so shapes never change); process `p` of `n`
    takes rows `[p*B, (p+1)*B)` of each global batch, so processes see disjoint pairs.
    `get_state()` returns a JSON-serialisable dict; `set_state()` on a fresh iterator with the same
    arguments continues with exactly the batches the saved one would have produced.

    `cache_pairs`: keep the NSP pairs made from the shards beside them (`pairs-*.npy`), for the
    next iterator on them; off by default, so that reading someone's shards (a run's held-out
    split) writes nothing there. The pre-training job, which owns its run's shards, turns it on.

    `packing`: "none" (a pair per row), "best-fit" (pairs packed into rows planned per epoch,
    `pair_packing.plan_rows`; a global batch is then `global_batch_size` rows and an epoch as
    many batches as its rows fill) or "auto" (best-fit where the pairs fill under
    `pair_packing.AUTO_MAX_FILL` of their unpacked rows; `self.packing` says which).
    `not_next`: where NotNext's B comes from, "any" other document or "far" (the other half of
    the corpus; `bertjax.data.pairs`).

    `next_sentence=False`: masked LM alone; rows of full-sentence segments
    (`bertjax.data.segments`, cached as `segments-*.npy` with `cache_pairs`) instead of NSP
    pairs, so `short_seq_prob`, `dupe_factor` and `not_next` do not apply. `pairs`, `num_pairs`
    and `lengths` then count segments.
    """

    def __init__(
        self,
        shards: Shards | str | os.PathLike,
        *,
        seq_len: int = 128,
        global_batch_size: int = 256,
        max_predictions: int = 20,
        mask_prob: float = 0.15,
        short_seq_prob: float = 0.1,
        dupe_factor: int = 1,
        whole_word_mask: bool = False,
        seed: int = 0,
        shuffle: bool = True,
        num_epochs: int | None = None,
        process_index: int = 0,
        process_count: int = 1,
        tokenizer: Tokenizer | None = None,
        cache_pairs: bool = False,
        packing: str = "none",
        not_next: str = "any",
        next_sentence: bool = True,
    ):
        self.shards = shards if isinstance(shards, Shards) else Shards(shards)
        if process_count < 1 or not 0 <= process_index < process_count:
            raise InputError(f"process_index {process_index} must be in [0, {process_count})")
        if global_batch_size % process_count:
            raise InputError(f"global_batch_size {global_batch_size} is not divisible by "
                             f"process_count {process_count}")
        if not 0 < max_predictions <= seq_len:
            raise InputError(f"max_predictions must be in [1, seq_len], got {max_predictions}")
        if not 0.0 < mask_prob < 1.0:
            raise InputError(f"mask_prob must be in (0, 1), got {mask_prob}")
        tokenizer = tokenizer or self.shards.tokenizer()
        self.shards.check_vocabulary(tokenizer)
        self.special = tokenizer.special
        self.vocab_size = tokenizer.vocab_size
        self.seq_len, self.max_predictions, self.mask_prob = seq_len, max_predictions, mask_prob
        self.global_batch_size = global_batch_size
        self.batch_size = global_batch_size // process_count
        self.process_index, self.process_count = process_index, process_count
        self.seed, self.shuffle, self.num_epochs = seed, shuffle, num_epochs
        self.next_sentence = next_sentence
        if next_sentence:
            self.pairs = load_or_create_pairs(self.shards, seq_len, short_seq_prob=short_seq_prob,
                                              dupe_factor=dupe_factor, seed=seed,
                                              cache=cache_pairs, not_next=not_next)
        else:
            self.pairs = load_or_create_segments(self.shards, seq_len, cache=cache_pairs)
        self.specials = SPECIAL_PER_PAIR if next_sentence else SPECIAL_PER_SEGMENT
        self.num_pairs = len(self.pairs)
        self.lengths = pair_lengths(self.pairs, self.specials)  # (N,)
        self.packing = resolve_packing(packing, self.lengths, seq_len)
        self._plan: tuple[int, PlannedRows] | None = None
        self._order_epoch: int | None = None
        self._order: np.ndarray | None = None
        self.steps_per_epoch = self.steps_in(0)
        if self.steps_per_epoch == 0:
            rows = "" if self.packing == "none" else f" (packed into {self.plan(0).num_rows} rows)"
            raise InputError(
                f"{self.shards.directory} yields {self.num_pairs} {self.unit}s at seq_len "
                f"{seq_len}{rows}, fewer than one global batch of {global_batch_size}; use a "
                "smaller batch, a larger corpus"
                + (" or a larger dupe_factor" if next_sentence else "")
            )
        self._tokens = self.shards.tokens
        self._is_special = np.zeros(max(self.vocab_size, int(max(self.special.ids)) + 1), bool)
        self._is_special[list(self.special.ids)] = True
        self._replacement = tokenizer.replacement_ids()
        self._continuation = tokenizer.continuation_mask() if whole_word_mask else None
        self.epoch, self.step = 0, 0

    @property
    def unit(self) -> str:
        """What a row holds (unpacked), in words: "pair", or "segment" (masked LM alone)."""
        return "pair" if self.next_sentence else "segment"

    # --- iteration -------------------------------------------------------------------------------

    def __iter__(self) -> PretrainingBatches:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        if self.step >= self.steps_in(self.epoch):
            self.epoch, self.step = self.epoch + 1, 0
        if self.num_epochs is not None and self.epoch >= self.num_epochs:
            raise StopIteration
        batch = self.batch_at(self.epoch, self.step)
        self.step += 1
        return batch

    def __len__(self) -> int:
        """Batches in the first epoch (packed epochs may differ by a batch or so)."""
        return self.steps_per_epoch

    def steps_in(self, epoch: int) -> int:
        """Batches in epoch `epoch`: its pairs, or its packed rows, over the global batch."""
        if self.packing == "none":
            return self.num_pairs // self.global_batch_size
        return self.plan(epoch).num_rows // self.global_batch_size

    def plan(self, epoch: int) -> PlannedRows:
        """The packed rows of epoch `epoch` (its pair order, packed and shuffled)."""
        if self._plan is None or self._plan[0] != epoch:
            rng = np.random.default_rng([self.seed, epoch, 0x9ACC]) if self.shuffle else None
            self._plan = (epoch, plan_rows(self.order(epoch), self.lengths, seq_len=self.seq_len,
                                           max_predictions=self.max_predictions,
                                           mask_prob=self.mask_prob, rng=rng,
                                           specials=self.specials))
        return self._plan[1]

    def order(self, epoch: int) -> np.ndarray:
        """Pair indices in the order epoch `epoch` visits them (all processes)."""
        if self._order_epoch != epoch:
            if self.shuffle:
                rng = np.random.default_rng([self.seed, epoch, 0x5EED])
                self._order = rng.permutation(self.num_pairs)
            else:
                self._order = np.arange(self.num_pairs)
            self._order_epoch = epoch
        assert self._order is not None
        return self._order

    def batch_at(self, epoch: int, step: int) -> dict[str, np.ndarray]:
        """This process's batch `step` of epoch `epoch` (pure: does not move the iterator)."""
        start = step * self.global_batch_size + self.process_index * self.batch_size
        if self.packing != "none":
            index, layout = self.plan(epoch).rows(start, start + self.batch_size, self.batch_size)
            return pack_pair_batch(self.make_batch(index, epoch), layout, self.special.pad)
        index = self.order(epoch)[start:start + self.batch_size]
        return self.make_batch(index, epoch)

    def packed_batches(self, index: np.ndarray, epoch: int) -> list[dict[str, np.ndarray]]:
        """The pairs `index` (all processes') packed into rows (kept in order, not shuffled),
        cut into global batches, the last completed with empty rows: this process's rows of
        each, masked as in epoch `epoch`. The same pairs and masks as their unpacked batches, in
        fewer rows (held-out evaluation)."""
        plan = plan_rows(index, self.lengths, seq_len=self.seq_len,
                         max_predictions=self.max_predictions, mask_prob=self.mask_prob,
                         specials=self.specials)
        out = []
        for first in range(0, plan.num_rows, self.global_batch_size):
            start = first + self.process_index * self.batch_size
            pairs, layout = plan.rows(start, start + self.batch_size, self.batch_size)
            out.append(pack_pair_batch(self.make_batch(pairs, epoch), layout, self.special.pad))
        return out

    def make_batch(self, index: np.ndarray, epoch: int) -> dict[str, np.ndarray]:
        """The batch of the pairs (or segments) `index`, one per row, masked as in epoch
        `epoch`."""
        S = self.seq_len
        pairs = np.asarray(self.pairs[np.asarray(index)])
        a0, a1, b0, b1 = (pairs[:, c:c + 1] for c in range(4))
        la, lb = a1 - a0, b1 - b0
        end = la + lb + self.specials  # (N, 1) the row's tokens: [CLS] A [SEP] (B [SEP])
        pos = np.arange(S)[None, :]
        in_a = (pos >= 1) & (pos <= la)
        in_b = (pos >= la + 2) & (pos < end - 1)  # empty for a segment
        text = in_a | in_b
        src = np.where(in_a, a0 + pos - 1, np.where(in_b, b0 + pos - la - 2, 0))
        ids = np.where(text, self._tokens[src], self.special.pad).astype(np.int32)
        rows = np.arange(len(pairs))
        ids[:, 0] = self.special.cls
        ids[rows, la[:, 0] + 1] = self.special.sep
        ids[rows, end[:, 0] - 1] = self.special.sep  # a segment's one [SEP] again
        candidates = text & ~self._is_special[ids]
        input_ids, positions, masked_ids, weights = mask_tokens(
            ids, candidates, row_keys(self.seed, epoch, index),
            max_predictions=self.max_predictions, mask_id=self.special.mask,
            replacement_ids=self._replacement, mask_prob=self.mask_prob,
            continuation=self._continuation,
        )
        batch = {
            "input_ids": input_ids,
            "token_type_ids": ((pos >= la + 2) & (pos < end)).astype(np.int32),  # B [SEP]
            "attention_mask": (pos < end).astype(np.int32),
            "masked_positions": positions,
            "masked_ids": masked_ids,
            "masked_weights": weights,
        }
        if self.next_sentence:
            batch["next_sentence_label"] = pairs[:, 4].astype(np.int32)
        return batch

    # --- state -----------------------------------------------------------------------------------

    def get_state(self) -> dict[str, Any]:
        """Where the iterator stands, as plain ints (JSON-serialisable)."""
        return {
            "version": STATE_VERSION, "epoch": self.epoch, "step": self.step, "seed": self.seed,
            "num_pairs": self.num_pairs, "global_batch_size": self.global_batch_size,
            "seq_len": self.seq_len, "max_predictions": self.max_predictions,
            "packing": self.packing,
        }

    def set_state(self, state: dict[str, Any]) -> None:
        """Continue from `get_state()` of an iterator over the same data and settings."""
        if state.get("version") != STATE_VERSION:
            raise InputError(f"data state version {state.get('version')!r}, expected "
                             f"{STATE_VERSION}")
        state = {"packing": "none", **state}  # saved before packing existed: unpacked
        mismatched = [k for k in _CHECKED if state.get(k) != getattr(self, k)]
        if mismatched:
            raise InputError(
                "data state does not match this iterator: " + ", ".join(
                    f"{k} saved {state.get(k)!r} vs now {getattr(self, k)!r}" for k in mismatched)
                + "; resume with the same shards and data settings"
            )
        self.epoch, self.step = int(state["epoch"]), int(state["step"])
