"""What a train step optimises: the forward pass, the sums it adds up, the loss made from them.

An objective's sums add up across micro-batches and devices; its loss divides them by counts of
the whole global batch (`counts`, taken before any forward pass), so gradient accumulation and
data parallelism give the gradient of the whole batch's mean loss. Pre-training and fine-tuning
share the one train step of `bertjax.train.step` through this.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.inputs import packing_options
from bertjax.losses import (
    IGNORE_INDEX,
    classification_sums,
    loss_from_sums,
    masked_lm_sums,
    metrics_from_sums,
    nsp_count,
    packed_question_answering_sums,
    pretraining_sums,
    question_answering_loss_from_sums,
    question_answering_sums,
    token_classification_sums,
)

Batch = dict[str, jax.Array]
Sums = dict[str, jax.Array]


@dataclasses.dataclass(frozen=True)
class Objective:
    """forward_sums(model, batch, dropout_rng) -> sums; counts(batch) -> the normalisers;
    loss(sums, global counts) -> scalar; metrics(sums) -> means to log (a `loss` among them).
    An objective that `draws` random numbers of its own (ELECTRA's samples) is handed the
    step's key even when the model has no dropout."""

    forward_sums: Callable[[Any, Batch, jax.Array | None], Sums]
    counts: Callable[[Batch], dict[str, jax.Array]]
    loss: Callable[[Sums, dict[str, jax.Array]], jax.Array]
    metrics: Callable[[Sums], dict[str, jax.Array]]
    draws: bool = False


def _pretraining_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"], deterministic=rng is None, dropout_rng=rng,
                **packing_options(batch))
    return pretraining_sums(out.mlm_logits, out.nsp_logits, batch)


def pretraining(mlm_weight: float = 1.0, nsp_weight: float = 1.0) -> Objective:
    """Masked LM + next-sentence prediction, each mean loss times its weight (BERT's: 1 and 1;
    a weight of 0 leaves that part out of the gradient, though it is still computed and
    logged). The logged `loss` is the weighted sum the step minimises."""

    def loss(sums: Sums, counts: dict[str, jax.Array]) -> jax.Array:
        return loss_from_sums(sums, counts["predictions"], counts["sequences"],
                              mlm_weight=mlm_weight, nsp_weight=nsp_weight)

    def metrics(sums: Sums) -> dict[str, jax.Array]:
        means = metrics_from_sums(sums)
        del means["perplexity"]
        return {"loss": mlm_weight * means["mlm_loss"] + nsp_weight * means["nsp_loss"], **means}

    return Objective(
        forward_sums=_pretraining_sums,
        counts=lambda batch: {"predictions": jnp.sum(batch["masked_weights"].astype(jnp.float32)),
                              "sequences": nsp_count(batch)},
        loss=loss, metrics=metrics)


PRETRAINING = pretraining()

# The next-sentence sums a masked LM alone does not have, as nothing: the pre-training loss and
# means (`bertjax.losses`) then read the masked-LM part alone.
_NO_NEXT_SENTENCE: dict[str, Any] = {"nsp_loss_sum": 0.0, "nsp_count": 0.0, "nsp_correct": 0.0}


def pretraining_means(sums: dict[str, Any]) -> dict[str, Any]:
    """Means from summed pre-training counts (JAX or host numbers): MLM loss, accuracy and
    perplexity, and NSP loss and accuracy where the sums have them (not for masked LM alone)."""
    if "nsp_count" in sums:
        return metrics_from_sums(sums)
    means = metrics_from_sums({**sums, **_NO_NEXT_SENTENCE})
    return {k: v for k, v in means.items() if not k.startswith("nsp_")}


def _masked_lm_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                batch["masked_positions"], deterministic=rng is None, dropout_rng=rng,
                **packing_options(batch))
    return masked_lm_sums(out.mlm_logits, batch)


def _masked_lm_metrics(sums: Sums) -> dict[str, jax.Array]:
    means = pretraining_means(sums)
    del means["perplexity"]
    return {"loss": means["mlm_loss"], **means}


# Masked LM alone (RoBERTa's pre-training; `bertjax pretrain --train.objective mlm`): a model with
# the MLM head (BertForMaskedLM) on batches without next-sentence labels; the mean MLM loss over
# the global batch's predictions, as `pretraining` with no NSP part.
MASKED_LM = Objective(
    forward_sums=_masked_lm_sums,
    counts=lambda batch: {"predictions": jnp.sum(batch["masked_weights"].astype(jnp.float32))},
    loss=lambda sums, counts: loss_from_sums({**sums, **_NO_NEXT_SENTENCE},
                                             counts["predictions"], jnp.float32(1.0),
                                             nsp_weight=0.0),
    metrics=_masked_lm_metrics)


def _forward(model: Any, batch: Batch, rng: jax.Array | None) -> Any:
    """A fine-tuning head's output on a batch (of packed rows, where it holds `sequence_ids`);
    dropout on when a key is given."""
    return model(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                 deterministic=rng is None, dropout_rng=rng, **packing_options(batch))


def _labelled(labels: jax.Array) -> jax.Array:
    """How many labels are not `IGNORE_INDEX` (an empty slot of packed rows), float32."""
    return jnp.sum(labels != IGNORE_INDEX).astype(jnp.float32)


def _classification_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = _forward(model, batch, rng)
    return classification_sums(out.logits, batch["labels"])


def classification_metrics(sums: Sums) -> dict[str, Any]:
    """Mean loss and accuracy from `classification_sums` (JAX or host numbers)."""
    count = sums["count"]
    return {"loss": sums["loss_sum"] / count, "accuracy": sums["correct"] / count}


CLASSIFICATION = Objective(
    forward_sums=_classification_sums,
    counts=lambda batch: {"sequences": _labelled(batch["labels"])},
    loss=lambda sums, counts: sums["loss_sum"] / counts["sequences"],
    metrics=classification_metrics,
)


def _token_classification_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = _forward(model, batch, rng)
    return token_classification_sums(out.logits, batch["labels"])


TOKEN_CLASSIFICATION = Objective(
    forward_sums=_token_classification_sums,
    counts=lambda batch: {"labelled": jnp.sum(batch["labels"] != IGNORE_INDEX).astype(jnp.float32)},
    loss=lambda sums, counts: sums["loss_sum"] / jnp.maximum(counts["labelled"], 1.0),
    metrics=classification_metrics,
)


def _question_answering_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = _forward(model, batch, rng)
    if "sequence_ids" in batch:  # packed windows: positions (B, K) in the row, each its own
        return packed_question_answering_sums(out.start_logits, out.end_logits,
                                              batch["sequence_ids"], batch["start_positions"],
                                              batch["end_positions"])
    return question_answering_sums(out.start_logits, out.end_logits, batch["start_positions"],
                                   batch["end_positions"])


def _labelled_positions(positions: jax.Array, length: int, packed: bool) -> jax.Array:
    """Answer positions that are labels: inside the window (unpacked, transformers' clamp to
    [0, S] with S ignored) or not `IGNORE_INDEX` (packed)."""
    if packed:
        return _labelled(positions)
    return jnp.sum(jnp.clip(positions, 0, length) != length).astype(jnp.float32)


def _question_answering_metrics(sums: Sums) -> dict[str, Any]:
    xp = jnp if isinstance(sums["correct"], jax.Array) else np
    start, end = (xp.maximum(sums[f"{n}_count"], 1.0) for n in ("start", "end"))
    return {"loss": (sums["start_loss_sum"] / start + sums["end_loss_sum"] / end) / 2,
            "accuracy": sums["correct"] / start}  # windows with start and end both right


QUESTION_ANSWERING = Objective(
    forward_sums=_question_answering_sums,
    counts=lambda batch: {
        f"{n}_count": _labelled_positions(batch[f"{n}_positions"], batch["input_ids"].shape[-1],
                                          "sequence_ids" in batch)
        for n in ("start", "end")},
    loss=lambda sums, counts: question_answering_loss_from_sums(sums, counts["start_count"],
                                                                counts["end_count"]),
    metrics=_question_answering_metrics,
)


def masked_choice_logits(logits: jax.Array, choice_mask: jax.Array) -> jax.Array:
    """(B, C) choice logits in float32 with the padding choices (mask 0) at -1e9: no
    probability, no gradient."""
    return jnp.where(choice_mask > 0, logits.astype(jnp.float32), -1e9)


def _multiple_choice_sums(model: Any, batch: Batch, rng: jax.Array | None) -> Sums:
    out = _forward(model, batch, rng)
    if "sequence_ids" in batch:  # packed: (B, K * C) choice slots, K examples of C choices a row
        labels = batch["labels"]  # (B, K), IGNORE_INDEX in an empty example slot
        logits = out.logits.reshape(*labels.shape, -1)  # (B, K, C): empty choices lowest
        return classification_sums(logits, labels)
    return classification_sums(masked_choice_logits(out.logits, batch["choice_mask"]),
                               batch["labels"])


MULTIPLE_CHOICE = dataclasses.replace(CLASSIFICATION, forward_sums=_multiple_choice_sums)
