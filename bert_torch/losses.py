"""Pre-training losses in PyTorch, mirroring `bertjax.losses`: in float32 (float64 stays float64,
for the mirror's float64 run, `parity.noise`)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bert_torch.numerics import upcast
from bertjax.config import LOSS_WEIGHT_FLOOR


def mlm_loss(
    logits: torch.Tensor, masked_ids: torch.Tensor, masked_weights: torch.Tensor
) -> torch.Tensor:
    """Mean cross-entropy over real predictions. logits (B, P, V), ids/weights (B, P)."""
    per_token = F.cross_entropy(
        upcast(logits).flatten(0, 1), masked_ids.long().flatten(), reduction="none"
    ).view(masked_ids.shape)  # (B, P)
    weights = masked_weights.to(per_token.dtype)
    return (per_token * weights).sum() / weights.sum().clamp_min(LOSS_WEIGHT_FLOOR)


def nsp_loss(logits: torch.Tensor, labels: torch.Tensor,
             weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean cross-entropy of next-sentence prediction. logits (B, 2), labels (B,): 0 IsNext;
    packed: logits (B, K, 2), labels and `weights` (B, K) (0: an empty slot, left out)."""
    if weights is None:
        return F.cross_entropy(upcast(logits), labels.long())
    per_pair = F.cross_entropy(upcast(logits).flatten(0, 1), labels.long().flatten(),
                               reduction="none").view(labels.shape)  # (B, K)
    weights = weights.to(per_pair.dtype)
    return (per_pair * weights).sum() / weights.sum().clamp_min(LOSS_WEIGHT_FLOOR)


def pretraining_loss(
    mlm_logits: torch.Tensor, nsp_logits: torch.Tensor | None, batch: dict[str, torch.Tensor]
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """MLM + NSP loss and its parts (packed rows: `next_sentence_weights` (B, K) in `batch`);
    the MLM loss alone for a masked LM (`nsp_logits` None: `bertjax.train.MASKED_LM`)."""
    mlm = mlm_loss(mlm_logits, batch["masked_ids"], batch["masked_weights"])
    if nsp_logits is None:
        return mlm, {"mlm_loss": mlm}
    nsp = nsp_loss(nsp_logits, batch["next_sentence_label"], batch.get("next_sentence_weights"))
    return mlm + nsp, {"mlm_loss": mlm, "nsp_loss": nsp}


def classification_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean cross-entropy of sequence classification. logits (B, L), labels (B,)."""
    return F.cross_entropy(upcast(logits), labels.long())
