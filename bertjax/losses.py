"""Pre-training losses: masked-LM cross-entropy weighted by `masked_weights`, plus NSP.

Mirrored by `bert_torch/losses.py`. Padding prediction slots carry weight 0, so token id 0 is
never mistaken for "no label".
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax


def mlm_loss(logits: jax.Array, masked_ids: jax.Array, masked_weights: jax.Array) -> jax.Array:
    """Mean cross-entropy over real predictions. logits (B, P, V), ids/weights (B, P)."""
    per_token = optax.softmax_cross_entropy_with_integer_labels(
        logits.astype(jnp.float32), masked_ids
    )  # (B, P)
    weights = masked_weights.astype(jnp.float32)
    return jnp.sum(per_token * weights) / jnp.maximum(jnp.sum(weights), 1e-5)


def nsp_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Mean cross-entropy of next-sentence prediction. logits (B, 2), labels (B,): 0 IsNext."""
    return jnp.mean(
        optax.softmax_cross_entropy_with_integer_labels(logits.astype(jnp.float32), labels)
    )


def pretraining_loss(
    mlm_logits: jax.Array,
    nsp_logits: jax.Array,
    batch: dict[str, jax.Array],
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """MLM + NSP loss and its parts."""
    mlm = mlm_loss(mlm_logits, batch["masked_ids"], batch["masked_weights"])
    nsp = nsp_loss(nsp_logits, batch["next_sentence_label"])
    return mlm + nsp, {"mlm_loss": mlm, "nsp_loss": nsp}


def pretraining_sums(
    mlm_logits: jax.Array, nsp_logits: jax.Array, batch: dict[str, jax.Array]
) -> dict[str, jax.Array]:
    """Sums over a batch that add up across micro-batches and devices (float32 scalars).

    `mlm_loss_sum / mlm_weight` is `mlm_loss` and `nsp_loss_sum / nsp_count` is `nsp_loss` of the
    whole batch; `*_correct` count right argmax predictions (weighted for MLM).
    """
    weights = batch["masked_weights"].astype(jnp.float32)  # (B, P)
    labels = batch["next_sentence_label"]
    mlm_ce = optax.softmax_cross_entropy_with_integer_labels(
        mlm_logits.astype(jnp.float32), batch["masked_ids"])  # (B, P)
    nsp_ce = optax.softmax_cross_entropy_with_integer_labels(nsp_logits.astype(jnp.float32), labels)
    return {
        "mlm_loss_sum": jnp.sum(mlm_ce * weights),
        "mlm_weight": jnp.sum(weights),
        "mlm_correct": jnp.sum((jnp.argmax(mlm_logits, -1) == batch["masked_ids"]) * weights),
        "nsp_loss_sum": jnp.sum(nsp_ce),
        "nsp_count": jnp.float32(labels.shape[0]),
        "nsp_correct": jnp.sum(jnp.argmax(nsp_logits, -1) == labels).astype(jnp.float32),
    }
