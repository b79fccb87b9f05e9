"""ELECTRA's pre-training in PyTorch, mirroring `bertjax.train.electra`: the discriminator with
its generator beside it (sharing its embeddings) and the loss, from the same Gumbel noise (the
samples are drawn from given noise, so both frameworks replace the same tokens)."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from bert_torch.heads import BertForMaskedLM, BertForReplacedTokenDetection
from bert_torch.losses import mlm_loss
from bert_torch.numerics import upcast
from bertjax.config import LOSS_WEIGHT_FLOOR, BertConfig


class ElectraPair(BertForReplacedTokenDetection):
    """The discriminator, with the generator beside it (`generator`), sharing its embeddings."""

    def __init__(self, config: BertConfig, generator_config: BertConfig):
        super().__init__(config)
        self.generator = BertForMaskedLM(generator_config)
        self.generator.bert.embeddings = self.bert.embeddings  # one module, two readers


def replace_tokens(batch: dict[str, torch.Tensor], sampled: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """The discriminator's inputs and labels (B, S), as `bertjax.train.electra.replace_tokens`."""
    positions, weights = batch["masked_positions"].long(), batch["masked_weights"] > 0  # (B, P)
    original = batch["input_ids"].clone()
    at = original.gather(1, positions)
    original.scatter_(1, positions, torch.where(weights, batch["masked_ids"].to(at.dtype), at))
    replaced = weights & (sampled != batch["masked_ids"])  # (B, P)
    inputs = original.clone()
    inputs.scatter_(1, positions, torch.where(weights, sampled.to(at.dtype),
                                              original.gather(1, positions)))
    labels = torch.zeros_like(original).scatter_reduce(1, positions, replaced.to(original.dtype),
                                                       reduce="amax")
    return inputs, labels


def electra_loss(pair: ElectraPair, batch: dict[str, torch.Tensor], noise: torch.Tensor,
                 rtd_weight: float = 50.0) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The generator's mean masked-LM loss plus `rtd_weight` times the discriminator's mean
    sigmoid cross-entropy over real tokens (attention mask), the samples the argmax of the
    generator's logits (detached) plus `noise` (B, P, V); and the two parts."""
    gen = pair.generator(batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
                         batch["masked_positions"])
    mlm = mlm_loss(gen.mlm_logits, batch["masked_ids"], batch["masked_weights"])
    sampled = (upcast(gen.mlm_logits).detach() + noise.to(upcast(gen.mlm_logits).dtype)).argmax(-1)
    inputs, labels = replace_tokens(batch, sampled)
    disc = pair(inputs, batch["token_type_ids"], batch["attention_mask"])
    real = (batch["attention_mask"] > 0).to(upcast(disc.logits).dtype)  # (B, S)
    per_token = F.binary_cross_entropy_with_logits(
        upcast(disc.logits), labels.to(real.dtype), reduction="none")  # (B, S)
    rtd = (per_token * real).sum() / real.sum().clamp_min(LOSS_WEIGHT_FLOOR)
    return mlm + rtd_weight * rtd, {"mlm_loss": mlm, "rtd_loss": rtd}
