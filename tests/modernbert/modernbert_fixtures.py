"""What the ModernBERT tests share: the fixtures transformers 5 wrote
(scripts/dev/make_modernbert_fixtures.py -> tests/fixtures/modernbert/<a|b>/<Class>/), a compiled
forward, outputs by transformers' field names compared at real tokens, a ModernBERT shape for
models made here, and packed rows made from a padded batch.

Padded positions are left out of every comparison: a padded query with no key inside its window
attends uniformly in transformers' eager attention and not in its sdpa (the float64 reference),
so the two references disagree there (the fixture script prints their distance at real tokens).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.config.families import FAMILIES
from bertjax.config.heads import MODELS

TOL = 1e-5  # the parity rule: or 3 x transformers' own float32 distance from float64
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "modernbert"
CONFIGS = ("a", "b")  # transformers' defaults; every switch turned (the script's docstring)
CLASSES = ("BertModel", "BertForMaskedLM", "BertForSequenceClassification",
           "BertForTokenClassification", "BertForQuestionAnswering", "BertForMultipleChoice")
CASES = [(config, name) for config in CONFIGS for name in CLASSES]
INPUTS = ("input_ids", "token_type_ids", "attention_mask")


def hf_class(name: str) -> str:
    """transformers' name of bertjax's class `name` for a ModernBERT."""
    return FAMILIES["modernbert"].class_name(name)


def directory(config: str, name: str) -> Path:
    return FIXTURES / config / hf_class(name)


def saved(config: str, name: str) -> dict[str, np.ndarray]:
    return dict(np.load(directory(config, name) / "outputs.npz"))


def fields(name: str) -> dict[str, str]:
    """Our output field -> transformers', for class `name` (the bare encoder: no pooled output)."""
    return {ours: theirs for ours, theirs in MODELS[name].hf_outputs.items()
            if not (name == "BertModel" and ours == "pooled_output")}


@nnx.jit
def forward(model: Any, *inputs: Any) -> Any:
    """`model` on `inputs`, compiled whole (op by op, every operation compiles apart)."""
    return model(*inputs)


def ours(model: Any, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`model`'s outputs on a fixture's inputs, by transformers' field name."""
    with jax.default_matmul_precision("highest"):
        out = forward(model, *(jnp.asarray(arrays[k]) if k in arrays else None for k in INPUTS))
    return {theirs: np.asarray(getattr(out, o)) for o, theirs in fields(type(model).spec.name).items()}


def real_tokens(arrays: dict[str, np.ndarray], outputs: dict[str, np.ndarray]
                ) -> dict[str, np.ndarray]:
    """Each output at the real tokens only (per-token fields; pooled ones whole), flattened."""
    mask = arrays["attention_mask"].astype(bool)
    picked = {}
    for name, value in outputs.items():
        value = np.asarray(value)
        per_token = tuple(value.shape[:mask.ndim]) == mask.shape
        picked[name] = value[mask] if per_token else value
    return picked


def config(**overrides: Any) -> BertConfig:
    """A small ModernBERT (odd sizes, a window shorter than the 16-token test rows, every switch
    at transformers' default unless overridden) for models made here."""
    fields = dict(model_type="modernbert", vocab_size=97, hidden_size=30, num_attention_heads=3,
                  intermediate_size=17, num_hidden_layers=4, max_position_embeddings=64,
                  local_attention=6, pad_token_id=0, type_vocab_size=1, hidden_dropout_prob=0.0,
                  attention_probs_dropout_prob=0.0, classifier_dropout=0.0,
                  initializer_range=0.2)
    return BertConfig(**{**fields, **overrides})


def packed_rows(ids: np.ndarray, mask: np.ndarray, rows: list[list[int]], length: int
                ) -> dict[str, np.ndarray]:
    """The real tokens of a right-padded batch (B, S) packed into rows of `length` tokens:
    `rows[r]` lists the sequences (rows of the batch) row r holds, one after another. Gives
    input_ids, attention_mask, sequence_ids (1, 2, ... per row), cls_positions (R, K; -1 for an
    empty slot) and `spans`: each sequence's (row, start, length)."""
    K = max(len(r) for r in rows)
    out = {"input_ids": np.zeros((len(rows), length), ids.dtype),
           "attention_mask": np.zeros((len(rows), length), mask.dtype),
           "sequence_ids": np.zeros((len(rows), length), np.int32),
           "cls_positions": np.full((len(rows), K), -1, np.int32)}
    spans = {}
    for r, members in enumerate(rows):
        start = 0
        for k, i in enumerate(members):
            n = int(mask[i].sum())
            out["input_ids"][r, start:start + n] = ids[i, :n]
            out["attention_mask"][r, start:start + n] = 1
            out["sequence_ids"][r, start:start + n] = k + 1
            out["cls_positions"][r, k] = start
            spans[i] = (r, start, n)
            start += n
        assert start <= length, (members, start, length)
    return {**out, "spans": spans}
