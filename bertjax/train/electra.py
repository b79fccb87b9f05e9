"""ELECTRA's pre-training (Clark et al., 2020): a small generator, a masked LM, fills the masked
positions with tokens it samples, and the discriminator learns to tell, for every real token,
whether the generator replaced it; the two share their embeddings and train together on the
generator's masked-LM loss plus lambda times the discriminator's replaced-token loss.

    pair = ElectraPair(discriminator_config, generator_config, rngs=nnx.Rngs(0))
    training = assemble(pair, optim, steps=N, objective=electra(rtd_weight=50.0))

The pair is the discriminator (`BertForReplacedTokenDetection`, what a run loads back and
converts to transformers' ElectraForPreTraining) with its generator (`BertForMaskedLM`) beside
it as `generator`, whose embeddings are the discriminator's own (one set of weights, saved once,
as the paper shares token and position embeddings). The generator's samples are drawn from its
softmax with Gumbel noise from the step's key; no gradient flows through the sampling.
`bert_torch.train.electra_loss` computes the same loss from the same noise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import LOSS_WEIGHT_FLOOR, BertConfig
from bertjax.heads import BertForMaskedLM, BertForReplacedTokenDetection
from bertjax.inputs import packing_options
from bertjax.losses import masked_lm_sums, replaced_token_sums
from bertjax.model import present
from bertjax.train.objectives import Batch, Objective, Sums, pretraining_means

__all__ = ["EVAL_SAMPLING_SEED", "ElectraPair", "electra", "electra_means", "electra_sums",
           "replace_tokens", "sample_replacements"]

# Evaluation draws the generator's samples with a fixed key: the same held-out batches give the
# same replaced tokens at every evaluation of a run
EVAL_SAMPLING_SEED = 0


class ElectraPair(BertForReplacedTokenDetection):
    """The discriminator, with the generator beside it (`generator`), sharing its embeddings.
    The generator's hidden size is its own (`bertjax.runs.config.generator_config`); its
    embeddings are as wide as the discriminator's, each model projecting them where it needs."""

    def __init__(self, config: BertConfig, generator_config: BertConfig, *, rngs: nnx.Rngs):
        super().__init__(config, rngs=rngs)
        self.generator = BertForMaskedLM(generator_config, rngs=rngs)
        self.generator.bert.embeddings = self.bert.embeddings  # one set of weights, two readers


def sample_replacements(logits: jax.Array, noise: jax.Array) -> jax.Array:
    """The generator's samples at its predictions: argmax of the logits (B, P, V) plus Gumbel
    `noise` (B, P, V), a draw from its softmax; no gradient through it. (B, P) int32."""
    return jnp.argmax(jax.lax.stop_gradient(logits.astype(jnp.float32)) + noise,
                      axis=-1).astype(jnp.int32)


def replace_tokens(batch: Batch, sampled: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The discriminator's inputs (B, S): the original tokens with each real prediction's
    position holding the generator's sample; and the labels (B, S), 1 where the token there is
    not the original (a sample equal to the original is no replacement, as in ELECTRA)."""
    positions, weights = batch["masked_positions"], batch["masked_weights"] > 0  # (B, P)
    rows = jnp.arange(positions.shape[0])[:, None]  # (B, 1)
    original = batch["input_ids"].at[rows, positions].set(
        jnp.where(weights, batch["masked_ids"], batch["input_ids"][rows, positions]))  # (B, S)
    replaced = weights & (sampled != batch["masked_ids"])  # (B, P)
    inputs = original.at[rows, positions].set(jnp.where(weights, sampled, original[rows, positions]))
    labels = jnp.zeros_like(original).at[rows, positions].max(replaced.astype(original.dtype))
    return inputs, labels  # (B, S), (B, S)


def real_tokens(batch: Batch) -> jax.Array:
    """(B, S) float32: 1 on a token of the batch (its attention mask; packed rows: in a
    sequence), 0 on padding: where the replaced-token loss is taken."""
    real = batch["attention_mask"] > 0
    if "sequence_ids" in batch:
        real = real & (batch["sequence_ids"] > 0)
    return real.astype(jnp.float32)


def _has_dropout(model: Any) -> bool:
    return any(isinstance(node, nnx.Dropout) and node.rate > 0 for _, node in nnx.iter_graph(model))


def electra_sums(model: ElectraPair, batch: Batch, noise: Callable[[tuple[int, ...]], jax.Array],
                 dropout_rngs: tuple[jax.Array, jax.Array] | None = None) -> Sums:
    """The generator's masked-LM sums and the discriminator's replaced-token sums of a batch,
    the samples drawn with the Gumbel noise `noise(shape)` gives for the generator's logits
    (B, P, V); `dropout_rngs` (the generator's, the discriminator's) where dropout applies."""
    options = packing_options(batch)
    gen_rng, disc_rng = dropout_rngs or (None, None)
    gen = model.generator(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                          batch["masked_positions"], deterministic=gen_rng is None,
                          dropout_rng=gen_rng, **options)
    mlm_logits = present(gen.mlm_logits, "mlm_logits")  # (B, P, V)
    inputs, labels = replace_tokens(batch, sample_replacements(mlm_logits, noise(mlm_logits.shape)))
    disc = model(inputs, batch["token_type_ids"], batch["attention_mask"],
                 deterministic=disc_rng is None, dropout_rng=disc_rng, **options)
    return {**masked_lm_sums(mlm_logits, batch),
            **replaced_token_sums(present(disc.logits, "logits"), labels, real_tokens(batch))}


def _electra_sums(model: ElectraPair, batch: Batch, rng: jax.Array | None) -> Sums:
    """`electra_sums` with the step's key (`rng`) drawing the samples and, where the models have
    dropout, their masks; without one (evaluation) the samples come from a fixed key and no
    dropout is applied."""
    key = jax.random.key(EVAL_SAMPLING_SEED) if rng is None else jax.random.fold_in(rng, 0)
    dropout = None if rng is None or not _has_dropout(model) else (
        jax.random.fold_in(rng, 1), jax.random.fold_in(rng, 2))
    return electra_sums(model, batch, lambda shape: jax.random.gumbel(key, shape, jnp.float32),
                        dropout)


def electra(rtd_weight: float = 50.0) -> Objective:
    """ELECTRA's objective: the generator's mean masked-LM loss plus `rtd_weight` (lambda) times
    the discriminator's mean replaced-token loss over the batch's real tokens. It draws random
    numbers of its own (the samples): the step hands it a key even without dropout."""

    def loss(sums: Sums, counts: dict[str, jax.Array]) -> jax.Array:
        mlm = sums["mlm_loss_sum"] / jnp.maximum(counts["predictions"], LOSS_WEIGHT_FLOOR)
        rtd = sums["rtd_loss_sum"] / jnp.maximum(counts["real_tokens"], LOSS_WEIGHT_FLOOR)
        return mlm + rtd_weight * rtd

    def metrics(sums: Sums) -> dict[str, jax.Array]:
        means = electra_means(sums)
        del means["perplexity"]
        return {"loss": means["mlm_loss"] + rtd_weight * means["rtd_loss"], **means}

    return Objective(
        forward_sums=_electra_sums,
        counts=lambda batch: {
            "predictions": jnp.sum(batch["masked_weights"].astype(jnp.float32)),
            "real_tokens": jnp.sum(real_tokens(batch))},
        loss=loss, metrics=metrics, draws=True)


def electra_means(sums: dict[str, Any]) -> dict[str, Any]:
    """Means from summed ELECTRA counts (JAX or host numbers): the generator's MLM loss,
    accuracy and perplexity; the discriminator's replaced-token loss, accuracy over real tokens,
    precision and recall of "replaced", and the share of real tokens the generator replaced."""
    xp = jnp if any(isinstance(v, jax.Array) for v in sums.values()) else np
    means = pretraining_means({k: v for k, v in sums.items() if not k.startswith("rtd_")})
    tokens = xp.maximum(sums["rtd_count"], 1.0)
    return {**means,
            "rtd_loss": sums["rtd_loss_sum"] / tokens,
            "rtd_accuracy": sums["rtd_correct"] / tokens,
            "rtd_precision": sums["rtd_true_positive"] / xp.maximum(sums["rtd_predicted"], 1.0),
            "rtd_recall": sums["rtd_true_positive"] / xp.maximum(sums["rtd_replaced"], 1.0),
            "replaced_share": sums["rtd_replaced"] / tokens}
