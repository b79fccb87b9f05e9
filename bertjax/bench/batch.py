"""The pre-training batch every benchmark row sees: numpy arrays from one seed, no framework.

Random token ids within the vocabulary, rows of random length (padding after them), two
segments, `predictions` masked slots per row of which the first min(predictions, round(rate *
length)) are real (weight 1) and the rest padding (position 0, weight 0), and random
next-sentence labels. The rate is BERT's 15% (`mask_rate`), or predictions / seq_len where more
slots are asked for than BERT's 15% of the sequence: ModernBERT's 30% is 154 of 512, and its rows
then mask 30% of their tokens as a run at that rate does. bertjax and bert_torch read
`masked_positions` / `masked_ids` / `masked_weights`; transformers reads `labels`, the same
targets spread over the sequence (-100 everywhere else).
"""

from __future__ import annotations

import numpy as np

from bertjax.config import BertConfig
from bertjax.errors import InputError

MASK_RATE = 0.15  # BERT's share of masked tokens
MIN_SEQ_LEN = 2  # the shortest row: [CLS] and one token to mask


def default_predictions(seq_len: int) -> int:
    """BERT's masked positions per sequence: round(0.15 * seq_len), at least 1."""
    return max(1, round(MASK_RATE * seq_len))


def mask_rate(seq_len: int, predictions: int) -> float:
    """The share of each row's tokens masked: BERT's 15%, or predictions / seq_len when that is
    more than BERT's slots (`default_predictions`)."""
    return MASK_RATE if predictions <= default_predictions(seq_len) else predictions / seq_len


def pretraining_batch(
    config: BertConfig, batch_size: int, seq_len: int, predictions: int, seed: int = 0
) -> dict[str, np.ndarray]:
    """A random pre-training batch (int32 arrays, float32 weights) and transformers' `labels`."""
    if seq_len < MIN_SEQ_LEN:
        raise InputError(f"seq_len must be at least {MIN_SEQ_LEN} ([CLS] and a token to mask)")
    if not 1 <= predictions <= seq_len:
        raise InputError(f"predictions must be in [1, seq_len={seq_len}], got {predictions}")
    rng = np.random.default_rng(seed)
    B, S, P = batch_size, seq_len, predictions
    lengths = rng.integers(max(2, S // 2), S + 1, size=B)  # (B,) real tokens per row
    lengths[0] = S  # one full row, so the longest sequence is always there
    positions = np.arange(S)[None, :]  # (1, S)
    attention_mask = (positions < lengths[:, None]).astype(np.int32)  # (B, S)
    input_ids = rng.integers(0, config.vocab_size, size=(B, S)).astype(np.int32)
    input_ids = np.where(attention_mask == 1, input_ids, config.pad_token_id).astype(np.int32)
    split = rng.integers(1, lengths)  # (B,) first position of segment B
    token_type_ids = ((positions >= split[:, None]) & (attention_mask == 1)).astype(np.int32)
    if config.type_vocab_size < 2 or not config.family.second_segment_type:  # RoBERTa: one type
        token_type_ids = np.zeros_like(token_type_ids)

    rate = mask_rate(S, P)
    masked_positions = np.zeros((B, P), np.int32)
    masked_weights = np.zeros((B, P), np.float32)
    for b, n in enumerate(lengths):
        real = min(P, max(1, round(rate * int(n))), int(n) - 1)  # never [CLS] at position 0
        masked_positions[b, :real] = np.sort(rng.choice(np.arange(1, n), size=real, replace=False))
        masked_weights[b, :real] = 1.0
    masked_ids = np.take_along_axis(input_ids, masked_positions, axis=1)  # (B, P)
    masked_ids = np.where(masked_weights > 0, masked_ids, 0).astype(np.int32)

    labels = np.full((B, S), -100, np.int64)  # transformers: -100 is "no prediction here"
    rows, slots = np.nonzero(masked_weights)
    labels[rows, masked_positions[rows, slots]] = masked_ids[rows, slots]
    return {
        "input_ids": input_ids,
        "token_type_ids": token_type_ids,
        "attention_mask": attention_mask,
        "masked_positions": masked_positions,
        "masked_ids": masked_ids,
        "masked_weights": masked_weights,
        "next_sentence_label": rng.integers(0, 2, size=B).astype(np.int32),
        "labels": labels,
    }


# The keys bertjax's train step and bert_torch's read (transformers reads `labels` instead).
MODEL_KEYS = ("input_ids", "token_type_ids", "attention_mask", "masked_positions", "masked_ids",
              "masked_weights", "next_sentence_label")
