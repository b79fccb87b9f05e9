"""Pre-training losses: masked-LM cross-entropy weighted by `masked_weights`, plus NSP.

Mirrored by `bert_torch/losses.py`. Padding prediction slots carry weight 0, so token id 0 is
never mistaken for "no label".

Everything starts from `pretraining_sums`, sums over a batch that add up across micro-batches
and devices. Training divides them by the whole global batch's counts (`loss_from_sums`);
`pretraining_loss`, what the parity checks compare with PyTorch, is the same two functions with
the batch's own counts, so parity covers the code that training runs.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from bertjax.config import LOSS_WEIGHT_FLOOR
from bertjax.inputs import sequence_mask

# The label a loss skips: PyTorch's and transformers' -100. The data layer, which imports no core
# module, writes the same value as `bertjax.data.tagging.IGNORE` (a test holds them equal).
IGNORE_INDEX = -100


@jax.custom_vjp
def cross_entropy(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """Softmax cross-entropy of float32 `logits` (..., V) at integer `labels` (...): the same
    number as `optax.softmax_cross_entropy_with_integer_labels` (logsumexp minus the label's
    logit, picked exactly), with the gradient written out: `(softmax - one_hot) * g`.

    Autodiff of optax's formula scatters into a buffer the size of the logits (608 x 30522 in
    the CPU bench) that XLA then copies and reduces apart from the softmax; picking the label's
    logit with an iota compare instead costs a pass over the logits in the forward (XLA CPU
    writes the selected array out before it sums it). Here the forward picks with a gather of
    one number per row, and the backward is one elementwise pass that recomputes the softmax
    from the saved logsumexp, then subtracts `g` at each row's label in place (a scatter of one
    number per row: an iota compare in that pass made XLA CPU's loop slower; docs/design.md,
    "Speed"). A label
    outside [0, V) (such as transformers' -100) picks nothing: its loss is the logsumexp and its
    gradient the softmax, as the iota-compare formula gave. Reverse mode only (`jax.grad`,
    `jax.vjp`): forward mode (`jax.jvp`, `jax.jacfwd`) raises, as for any `jax.custom_vjp`; a
    `custom_jvp` would keep `softmax - one_hot` from the forward pass for the backward, one more
    pass over the logits.
    """
    return _cross_entropy_fwd(logits, labels)[0]


def _cross_entropy_fwd(logits: jax.Array, labels: jax.Array
                       ) -> tuple[jax.Array, tuple[jax.Array, jax.Array, jax.Array]]:
    lse = jax.nn.logsumexp(logits, axis=-1)  # (...)
    in_range = (labels >= 0) & (labels < logits.shape[-1])  # (...)
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")[..., 0]
    return lse - jnp.where(in_range, picked, 0.0), (logits, lse, labels)


def _cross_entropy_bwd(saved: tuple[jax.Array, jax.Array, jax.Array], g: jax.Array
                       ) -> tuple[jax.Array, None]:
    logits, lse, labels = saved
    V, lead = logits.shape[-1], tuple(range(logits.ndim - 1))
    grad = jnp.exp(logits - lse[..., None]) * g[..., None]  # (..., V): softmax times g
    picked = jnp.where((labels >= 0) & (labels < V), labels, V)[..., None]  # (..., 1); V: dropped
    # minus g at each row's label, in place; the leading axes are batch axes of the scatter, so a
    # batch-sharded gradient needs no gathered indices
    numbers = jax.lax.ScatterDimensionNumbers(
        update_window_dims=(), inserted_window_dims=(logits.ndim - 1,),
        scatter_dims_to_operand_dims=(logits.ndim - 1,),
        operand_batching_dims=lead, scatter_indices_batching_dims=lead)
    grad = jax.lax.scatter_add(grad, picked, -g.astype(grad.dtype), numbers,
                               mode=jax.lax.GatherScatterMode.FILL_OR_DROP)
    return grad, None


cross_entropy.defvjp(_cross_entropy_fwd, _cross_entropy_bwd)


def argmax_is(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """`argmax(logits, -1) == labels` (the first of tied maxima wins, as `jnp.argmax` picks), made
    of two plain reductions: the row's maximum, then the smallest index holding it.

    `jnp.argmax` is one reduction over (value, index) pairs, which XLA CPU does not vectorise
    over the MLM logits (docs/design.md, "Speed"; the max is the one logsumexp takes anyway). A
    row with a NaN matches no label in [0, V).
    """
    top = jnp.max(logits, axis=-1, keepdims=True)  # (..., 1)
    vocab = jax.lax.broadcasted_iota(jnp.int32, logits.shape, logits.ndim - 1)  # (..., V)
    first = jnp.min(jnp.where(logits == top, vocab, logits.shape[-1]), axis=-1)  # (...)
    return first == labels


def pretraining_sums(
    mlm_logits: jax.Array, nsp_logits: jax.Array, batch: dict[str, jax.Array]
) -> dict[str, jax.Array]:
    """Sums over a batch that add up across micro-batches and devices (float32 scalars).

    logits (B, P, V) and (B, 2); `masked_ids`/`masked_weights` (B, P), `next_sentence_label` (B,)
    (0 IsNext). Packed rows (`bertjax.data.pair_packing`) give NSP logits (B, K, 2) and labels
    (B, K) with `next_sentence_weights` (B, K) (0: an empty slot, left out). `*_loss_sum` are
    summed cross-entropies (weighted), `mlm_weight` / `nsp_count` what they are divided by,
    `*_correct` right argmax predictions (weighted).
    """
    labels = batch["next_sentence_label"]  # (B,) or (B, K)
    nsp_ce = cross_entropy(nsp_logits.astype(jnp.float32), labels)  # (B,) or (B, K)
    nsp_right = argmax_is(nsp_logits, labels)
    if "next_sentence_weights" in batch:  # packed: the real pairs only
        pairs = batch["next_sentence_weights"].astype(jnp.float32)  # (B, K)
        nsp = {"nsp_loss_sum": jnp.sum(nsp_ce * pairs), "nsp_count": jnp.sum(pairs),
               "nsp_correct": jnp.sum(nsp_right * pairs)}
    else:
        nsp = {"nsp_loss_sum": jnp.sum(nsp_ce), "nsp_count": jnp.float32(labels.shape[0]),
               "nsp_correct": jnp.sum(nsp_right).astype(jnp.float32)}
    return {**masked_lm_sums(mlm_logits, batch), **nsp}


def masked_lm_sums(mlm_logits: jax.Array, batch: dict[str, jax.Array]) -> dict[str, jax.Array]:
    """The masked-LM part of `pretraining_sums` (logits (B, P, V) at `masked_positions`,
    `masked_ids` and `masked_weights` (B, P)): what a masked LM alone is trained on."""
    weights = batch["masked_weights"].astype(jnp.float32)  # (B, P)
    mlm_ce = cross_entropy(mlm_logits.astype(jnp.float32), batch["masked_ids"])  # (B, P)
    return {
        "mlm_loss_sum": jnp.sum(mlm_ce * weights),
        "mlm_weight": jnp.sum(weights),
        "mlm_correct": jnp.sum(argmax_is(mlm_logits, batch["masked_ids"]) * weights),
    }


def replaced_token_sums(logits: jax.Array, labels: jax.Array, real: jax.Array
                        ) -> dict[str, jax.Array]:
    """Sums of ELECTRA's replaced-token detection over the real tokens (`real` (B, S) 1.0, 0.0
    on padding): the summed sigmoid cross-entropy of the discriminator's logits (B, S) against
    `labels` (B, S, 1: replaced), the tokens, right answers, and the counts precision and recall
    are made of (predicted replaced, truly replaced, both)."""
    z, y = logits.astype(jnp.float32), labels.astype(jnp.float32)  # (B, S)
    bce = jnp.maximum(z, 0.0) - z * y + jnp.log1p(jnp.exp(-jnp.abs(z)))  # softplus(z) - z y
    said = (z > 0).astype(jnp.float32)  # (B, S): "replaced"
    return {
        "rtd_loss_sum": jnp.sum(bce * real),
        "rtd_count": jnp.sum(real),
        "rtd_correct": jnp.sum((said == y) * real),
        "rtd_predicted": jnp.sum(said * real),
        "rtd_replaced": jnp.sum(y * real),
        "rtd_true_positive": jnp.sum(said * y * real),
    }


def nsp_count(batch: dict[str, jax.Array]) -> jax.Array:
    """The sequences a batch's NSP loss is the mean over: its rows, or its packed pairs."""
    if "next_sentence_weights" in batch:
        return jnp.sum(batch["next_sentence_weights"].astype(jnp.float32))
    return jnp.float32(batch["next_sentence_label"].shape[0])


def loss_from_sums(sums: dict[str, jax.Array], predictions: jax.Array, sequences: jax.Array,
                   *, mlm_weight: float = 1.0, nsp_weight: float = 1.0) -> jax.Array:
    """MLM + NSP loss: the summed losses over the number of real predictions and of sequences
    they are the mean of (a batch with no real prediction, or packed rows with no pair, has that
    part 0, not NaN), each part times its weight (BERT's: 1 and 1)."""
    return (mlm_weight * sums["mlm_loss_sum"] / jnp.maximum(predictions, LOSS_WEIGHT_FLOOR)
            + nsp_weight * sums["nsp_loss_sum"] / jnp.maximum(sequences, LOSS_WEIGHT_FLOOR))


def pretraining_loss(
    mlm_logits: jax.Array,
    nsp_logits: jax.Array,
    batch: dict[str, jax.Array],
) -> tuple[jax.Array, dict[str, jax.Array]]:
    """The batch's mean MLM + NSP loss and its two parts."""
    sums = pretraining_sums(mlm_logits, nsp_logits, batch)
    parts = metrics_from_sums(sums)
    loss = loss_from_sums(sums, sums["mlm_weight"], sums["nsp_count"])
    return loss, {"mlm_loss": parts["mlm_loss"], "nsp_loss": parts["nsp_loss"]}


def metrics_from_sums(sums: dict[str, Any]) -> dict[str, Any]:
    """Means from summed counts (JAX or host numbers): MLM loss/accuracy/perplexity, NSP
    loss/accuracy."""
    xp = jnp if any(isinstance(v, jax.Array) for v in sums.values()) else np
    weight = xp.maximum(sums["mlm_weight"], LOSS_WEIGHT_FLOOR)
    count = xp.maximum(sums["nsp_count"], 1.0)
    mlm = sums["mlm_loss_sum"] / weight
    return {
        "mlm_loss": mlm,
        "mlm_accuracy": sums["mlm_correct"] / weight,
        "perplexity": xp.exp(mlm),
        "nsp_loss": sums["nsp_loss_sum"] / count,
        "nsp_accuracy": sums["nsp_correct"] / count,
    }


def classification_sums(logits: jax.Array, labels: jax.Array) -> dict[str, jax.Array]:
    """Sums over a batch of sequence-classification logits (B, L) and labels (B,) that add up
    across micro-batches and devices: summed cross-entropy, the labelled sequences, right
    predictions. Packed rows give logits (B, K, L) and labels (B, K), `IGNORE_INDEX` in an empty
    slot (left out)."""
    labelled = labels != IGNORE_INDEX  # (B,) or (B, K)
    ce = cross_entropy(logits.astype(jnp.float32), jnp.where(labelled, labels, 0))
    return {
        "loss_sum": jnp.sum(jnp.where(labelled, ce, 0.0)),
        "count": jnp.sum(labelled).astype(jnp.float32),
        "correct": jnp.sum(argmax_is(logits, labels) & labelled).astype(jnp.float32),
    }


def classification_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """The batch's mean cross-entropy (what fine-tuning minimises; parity compares it)."""
    sums = classification_sums(logits, labels)
    return sums["loss_sum"] / sums["count"]


def token_classification_sums(logits: jax.Array, labels: jax.Array) -> dict[str, jax.Array]:
    """Sums over a batch of per-token logits (B, S, L) and labels (B, S), positions labelled
    `IGNORE_INDEX` (-100: special tokens, padding, a word's later pieces) left out: summed
    cross-entropy, the labelled positions, right predictions among them."""
    labelled = labels != IGNORE_INDEX  # (B, S)
    safe = jnp.where(labelled, labels, 0)  # an ignored position's pick is masked out below
    ce = cross_entropy(logits.astype(jnp.float32), safe)  # (B, S)
    return {
        "loss_sum": jnp.sum(jnp.where(labelled, ce, 0.0)),
        "count": jnp.sum(labelled).astype(jnp.float32),
        "correct": jnp.sum(argmax_is(logits, labels) & labelled).astype(jnp.float32),
    }


def token_classification_loss(logits: jax.Array, labels: jax.Array) -> jax.Array:
    """The mean cross-entropy over labelled positions (transformers' BertForTokenClassification
    `labels` loss; 0, not NaN, with none labelled)."""
    sums = token_classification_sums(logits, labels)
    return sums["loss_sum"] / jnp.maximum(sums["count"], 1.0)


def question_answering_sums(start_logits: jax.Array, end_logits: jax.Array,
                            start_positions: jax.Array, end_positions: jax.Array
                            ) -> dict[str, jax.Array]:
    """Sums over a batch of span logits (B, S) and answer positions (B,), as transformers'
    BertForQuestionAnswering scores them: positions are clamped to [0, S] and S is ignored, so a
    position past the window is no label; start and end are counted apart. Right predictions
    count windows whose argmax start and end are both right (among rows with both labelled)."""
    S = start_logits.shape[-1]
    out = {}
    for name, logits, positions in (("start", start_logits, start_positions),
                                    ("end", end_logits, end_positions)):
        positions = jnp.clip(positions, 0, S)
        labelled = positions != S  # (B,)
        ce = cross_entropy(logits.astype(jnp.float32), jnp.where(labelled, positions, 0))
        out[f"{name}_loss_sum"] = jnp.sum(jnp.where(labelled, ce, 0.0))
        out[f"{name}_count"] = jnp.sum(labelled).astype(jnp.float32)
        out[f"{name}_right"] = argmax_is(logits, positions) & labelled
    out["correct"] = jnp.sum(out.pop("start_right") & out.pop("end_right")).astype(jnp.float32)
    return out


def packed_question_answering_sums(start_logits: jax.Array, end_logits: jax.Array,
                                   sequence_ids: jax.Array, start_positions: jax.Array,
                                   end_positions: jax.Array) -> dict[str, jax.Array]:
    """`question_answering_sums` of packed rows: span logits (B, S) of rows holding several
    windows (`sequence_ids` (B, S)), each window's answer (B, K) in row positions
    (`IGNORE_INDEX`: none, or an empty slot). Each window's softmax is over its own positions
    alone: its padding is not there to take a share, unlike the unpacked loss (transformers'),
    whose softmax spans the padded row."""
    own = sequence_mask(sequence_ids, start_positions.shape[1])  # (B, K, S)
    low = jnp.finfo(jnp.float32).min
    out = {}
    for name, logits, positions in (("start", start_logits, start_positions),
                                    ("end", end_logits, end_positions)):
        windows = jnp.where(own, logits.astype(jnp.float32)[:, None, :], low)  # (B, K, S)
        labelled = positions != IGNORE_INDEX  # (B, K)
        ce = cross_entropy(windows, jnp.where(labelled, positions, 0))
        out[f"{name}_loss_sum"] = jnp.sum(jnp.where(labelled, ce, 0.0))
        out[f"{name}_count"] = jnp.sum(labelled).astype(jnp.float32)
        out[f"{name}_right"] = argmax_is(windows, positions) & labelled
    out["correct"] = jnp.sum(out.pop("start_right") & out.pop("end_right")).astype(jnp.float32)
    return out


def question_answering_loss_from_sums(sums: dict[str, jax.Array], start_count: jax.Array,
                                      end_count: jax.Array) -> jax.Array:
    """(mean start CE + mean end CE) / 2 over the given counts (a part with no label adds 0)."""
    return (sums["start_loss_sum"] / jnp.maximum(start_count, 1.0)
            + sums["end_loss_sum"] / jnp.maximum(end_count, 1.0)) / 2


def question_answering_loss(start_logits: jax.Array, end_logits: jax.Array,
                            start_positions: jax.Array, end_positions: jax.Array) -> jax.Array:
    """transformers' BertForQuestionAnswering loss for this batch."""
    sums = question_answering_sums(start_logits, end_logits, start_positions, end_positions)
    return question_answering_loss_from_sums(sums, sums["start_count"], sums["end_count"])
