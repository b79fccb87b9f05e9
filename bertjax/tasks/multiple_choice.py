"""Multiple choice (SWAG-style) for the fine-tuning job: each choice is read as `[CLS] context
[SEP] choice [SEP]`, the inputs of a batch are (B, C, S) with C its largest number of choices,
and an example with fewer has padding choices that `choice_mask` keeps out of its softmax.

Packed (`max_tokens`), a row holds whole examples, each as C consecutive sequences (its
choices, back to back: no padding between them), their [CLS] at `cls_positions` (R, K * C); the
head's logits (R, K * C) read as (R, K, C), K examples of C choices, a missing choice the lowest.

The baseline picks the choice sharing the most words with the context (ties: the first).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jax
import numpy as np
from flax import nnx

from bertjax.data.choices import ChoiceExample
from bertjax.data.packing import RowLayout
from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.heads import BertForMultipleChoice
from bertjax.losses import IGNORE_INDEX
from bertjax.tasks.task import TaskScores, write_report
from bertjax.train.objectives import MULTIPLE_CHOICE, masked_choice_logits
from bertjax.use.encode import check_max_length, encode, model_max_length
from bertjax.use.packed import pack_arrays, packed_layouts, packing_options, row_limit
from bertjax.use.truncation import warn_cut

_WORD = re.compile(r"\w+")


class MultipleChoiceTask:
    """Choose the right continuation: ranked by accuracy; no labels beyond choice indices."""

    kind = "multiple-choice"
    objective = MULTIPLE_CHOICE
    model_class = BertForMultipleChoice

    def check(self, examples: Sequence[ChoiceExample], labels: Sequence[str], what: str) -> None:
        pass  # read_choices checked every record

    def check_length(self, max_length: int) -> None:
        if max_length < 5:
            raise InputError(f"--max-length {max_length} leaves no room for a context and a "
                             "choice ([CLS] A [SEP] B [SEP]); pass 5 or more")

    def units(self, tokenizer: Tokenizer, examples: Sequence[ChoiceExample],
              max_length: int) -> Sequence[ChoiceExample]:
        return examples

    def lengths(self, tokenizer: Tokenizer, examples: Sequence[ChoiceExample]
                ) -> np.ndarray:
        """The longest choice's [CLS] context [SEP] choice [SEP] of each example."""
        contexts = tokenizer.encode_batch([e.context for e in examples])
        choices = tokenizer.encode_batch([c for e in examples for c in e.choices])
        out, i = [], 0
        for e, context in zip(examples, contexts, strict=True):
            out.append(len(context) + 3 + max(len(c) for c in choices[i:i + len(e.choices)]))
            i += len(e.choices)
        return np.array(out, np.int64)

    def batch(self, tokenizer: Tokenizer, examples: Sequence[ChoiceExample],
              max_length: int, model_config: Any) -> dict[str, np.ndarray]:
        return {**choice_inputs(tokenizer, examples, max_length, model_config),
                "labels": np.array([e.label for e in examples], np.int32)}

    def pack_lengths(self, arrays: dict[str, np.ndarray]) -> np.ndarray:
        return choice_lengths(arrays).sum(1)

    def pack(self, arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
             ) -> dict[str, np.ndarray]:
        return pack_choices(arrays, layout, pad_id)

    def evaluate(self, model: Any, tokenizer: Tokenizer,
                 examples: Sequence[ChoiceExample], max_length: int,
                 max_tokens: int | None = None) -> TaskScores:
        probs = predict_choices(model, tokenizer, examples, max_length=max_length,
                                max_tokens=max_tokens)
        return _task_scores(examples, probs.argmax(-1), probs)

    def baseline(self, train: Sequence[ChoiceExample], test: Sequence[ChoiceExample],
                 labels: Sequence[str]) -> tuple[str, TaskScores]:
        return ("the choice sharing the most words with the context",
                _task_scores(test, np.array([overlap_choice(e) for e in test]), None))

    def report(self, scores: TaskScores, labels: Sequence[str], path_stem: Path,
               title: str) -> None:
        write_report(path_stem.with_name(f"choices_{path_stem.name}.json"), title, scores.detail)


def choice_inputs(tokenizer: Tokenizer, examples: Sequence[ChoiceExample],
                  max_length: int, model_config: Any = None, *, warn: bool = False,
                  option: str = "max_length") -> dict[str, np.ndarray]:
    """(B, C, S) inputs and the (B, C) `choice_mask` of a batch (C: its most choices); a padding
    choice is [CLS] context [SEP] with mask 0. Long pairs are cut, the longer segment first;
    with `warn`, with a warning naming each ("<where> + choice 2") and what raises the limit
    (`option`; the model's positions need `model_config`)."""
    C = max(len(e.choices) for e in examples)
    texts = [e.context for e in examples for _ in range(C)]
    pairs = [e.choices[c] if c < len(e.choices) else None for e in examples for c in range(C)]
    encoded = encode(tokenizer, texts, pairs, max_length=max_length, warn=False)
    if warn:
        names = [f"{e.where} + choice {c + 1}" for e in examples for c in range(C)]
        real = [c < len(e.choices) for e in examples for c in range(C)]
        encoded.cut = [cut if keep else 0 for cut, keep in zip(encoded.cut, real, strict=True)]
        limit = model_config.max_sequence_length if model_config is not None else max_length
        warn_cut(encoded, names, max_length, limit, option, stacklevel=4)
    arrays = encoded.arrays(model_config)
    B = len(examples)
    out = {k: v.reshape(B, C, -1) for k, v in arrays.items()}  # (B * C, S) -> (B, C, S)
    out["choice_mask"] = np.array([[c < len(e.choices) for c in range(C)] for e in examples],
                                  np.int32)  # (B, C)
    return out


def choice_lengths(arrays: dict[str, np.ndarray]) -> np.ndarray:
    """(N, C) tokens of each choice's sequence; 0 for a padding choice."""
    return arrays["attention_mask"].sum(2) * (arrays["choice_mask"] > 0)


def pack_choices(arrays: dict[str, np.ndarray], layout: RowLayout, pad_id: int
                 ) -> dict[str, np.ndarray]:
    """`choice_inputs` (B, C, S) of the layout's examples moved into its rows: example k of a
    row takes choice slots k * C ... k * C + C - 1 (a missing choice's empty), its choices back
    to back from its start; `labels` (R, K), `IGNORE_INDEX` in an empty example slot."""
    C = arrays["input_ids"].shape[1]
    lengths = choice_lengths(arrays)  # (N, C)
    n, c = np.nonzero(lengths)  # the real choices, example by example
    before = np.cumsum(lengths, axis=1) - lengths  # (N, C) tokens of the example's earlier ones
    choices = RowLayout(row=layout.row[n], slot=layout.slot[n] * C + c,
                        start=layout.start[n] + before[n, c], length=lengths[n, c],
                        num_rows=layout.num_rows, seq_len=layout.seq_len,
                        max_per_row=layout.max_per_row * C)
    out = pack_arrays({k: arrays[k][n, c] for k in ("input_ids", "token_type_ids")}, choices,
                      pad_id=pad_id)
    if "labels" in arrays:
        out["labels"] = layout.per_sequence(arrays["labels"], IGNORE_INDEX)
    return out


def predict_choices(model: Any, tokenizer: Tokenizer,
                    examples: Sequence[ChoiceExample], *, max_length: int = 128,
                    batch_size: int = 16, max_tokens: int | None = None, warn: bool = False,
                    option: str = "max_length") -> np.ndarray:
    """(N, most choices) probabilities of each choice (0 for choices an example lacks); in
    batches of `batch_size` examples, or packed into batches of `max_tokens` token slots.
    With `warn`, a context + choice longer than `max_length` tokens is cut with a warning
    naming it and what raises the limit (`option`), as every command warns."""
    check_max_length(max_length, model_max_length(model), option)
    most = max(len(e.choices) for e in examples)
    probs = np.zeros((len(examples), most), np.float32)
    said: dict[str, Any] = {"warn": warn, "option": option}
    if max_tokens is not None:
        arrays = choice_inputs(tokenizer, examples, max_length, model.config, **said)
        for members, layout in packed_layouts(choice_lengths(arrays).sum(1),
                                              max_tokens=max_tokens,
                                              limit=row_limit(arrays["input_ids"],
                                                              model_max_length(model)),
                                              config=model.config):
            packed = pack_choices({k: v[members] for k, v in arrays.items()}, layout,
                                  tokenizer.special.pad)
            logits = _packed_logits(model, packed).reshape(
                layout.num_rows, layout.max_per_row, most)  # (R, K * C) -> (R, K, C)
            probs[members] = layout.from_slots(np.asarray(jax.nn.softmax(logits, axis=-1)))
        return probs
    for start in range(0, len(examples), batch_size):
        chunk = examples[start:start + batch_size]
        p = np.asarray(_probabilities(model, choice_inputs(tokenizer, chunk, max_length,
                                                           model.config, **said)))
        probs[start:start + len(chunk), :p.shape[1]] = p
    return probs


@nnx.jit
def _probabilities(model: Any, arrays: dict[str, Any]) -> jax.Array:
    logits = model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"]).logits
    return jax.nn.softmax(masked_choice_logits(logits, arrays["choice_mask"]), axis=-1)  # (B, C)


@nnx.jit
def _packed_logits(model: Any, arrays: dict[str, Any]) -> jax.Array:
    """(R, K * C) choice logits of packed rows, a missing choice's the lowest float32."""
    return model(arrays["input_ids"], arrays["token_type_ids"], arrays["attention_mask"],
                 **packing_options(arrays)).logits


def overlap_choice(example: ChoiceExample) -> int:
    """The index of the choice sharing the most distinct words (lower case) with the context."""
    context = set(_WORD.findall(example.context.lower()))
    shared = [len(context & set(_WORD.findall(c.lower()))) for c in example.choices]
    return int(np.argmax(shared))


def _task_scores(examples: Sequence[ChoiceExample], predicted: np.ndarray,
                 probs: np.ndarray | None) -> TaskScores:
    labels = np.array([e.label for e in examples])
    accuracy = float(np.mean(predicted == labels))
    metrics = {"accuracy": accuracy}
    line = f"accuracy {accuracy:.4f}"
    if probs is not None:
        loss = float(-np.mean(np.log(np.maximum(probs[np.arange(len(labels)), labels], 1e-12))))
        metrics["loss"] = loss
        line += f", loss {loss:.4f}"
    chance = float(np.mean([1 / len(e.choices) for e in examples]))
    detail = {"accuracy": accuracy, "chance": chance, "examples": len(examples),
              "by_right_choice": {str(c): float(np.mean(predicted[labels == c] == c))
                                  for c in sorted(set(labels.tolist()))}}
    return TaskScores(metrics=metrics, rank=(accuracy,), line=line + f" (chance {chance:.4f})",
                      detail=detail)
