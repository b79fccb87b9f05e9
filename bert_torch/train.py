"""PyTorch mirror of the bertjax training step, for parity checks: AdamW, schedule, clipping.

Only AdamW has a mirror here (`bertjax.train.optim` also offers Adam, LAMB and SGD): it is
the BERT recipe and what `parity.training` compares. The settings come from the same
`OptimConfig` and the learning rate from the same `learning_rate_factor` (linear decay or WSD) as
the Optax side (`bertjax.train.schedule` imports no framework), so there is one place for each
fact.

Matching `optax.adamw(mask=decay_mask)`: `torch.optim.AdamW` applies the same decoupled decay
(`p -= lr * wd * p`, with the parameters before the update) and the same epsilon placement
(`sqrt(v_hat) + eps`). Two known differences of `clip_grad_norm_`, both far below the parity
tolerances (`tests/parity/test_train_parity.py`): it scales by `clip / (norm + 1e-6)` where Optax scales
by `clip / norm`, and its float32 norm loses the word embeddings' many tiny decoder gradients
(~1e-5 relative on the tiny preset's 1024x128 table, where XLA's is within 1e-7 of float64).
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from bert_torch.losses import pretraining_loss
from bertjax.train.schedule import (
    OptimConfig,
    applies_weight_decay,
    check_steps,
    learning_rate_factor,
)

__all__ = ["OptimConfig", "decay_parameter_names", "make_optimizer", "train_step"]


def decay_parameter_names(model: nn.Module) -> tuple[list[str], list[str]]:
    """(decayed, not decayed) parameter names by `schedule.applies_weight_decay`, the rule
    `bertjax.train.optim.decay_mask` applies too: no decay for biases and LayerNorm parameters."""
    decay: list[str] = []
    no_decay: list[str] = []
    for name, param in model.named_parameters():
        (decay if applies_weight_decay(tuple(param.shape)) else no_decay).append(name)
    return decay, no_decay


def make_optimizer(
    model: nn.Module, config: OptimConfig, total_steps: int
) -> tuple[torch.optim.AdamW, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with BERT's decay groups, and the config's schedule (warm-up, then linear decay or
    WSD) over `total_steps` updates as a `LambdaLR`.

    Call `scheduler.step()` after each `optimizer.step()` (as `train_step` does): the first
    update then uses `learning_rate_factor(config, 0, ...)`, like the Optax schedule's count 0.
    """
    if config.optimizer != "adamw":
        raise ValueError(f"bert_torch mirrors only the AdamW optimizer, not {config.optimizer!r}")
    params = dict(model.named_parameters())
    decay, no_decay = decay_parameter_names(model)
    optimizer = torch.optim.AdamW(
        [
            {"params": [params[n] for n in decay], "weight_decay": config.weight_decay},
            {"params": [params[n] for n in no_decay], "weight_decay": 0.0},
        ],
        lr=config.learning_rate,
        betas=(config.b1, config.b2),
        eps=config.eps,
    )
    check_steps(total_steps)
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: learning_rate_factor(config, step, total_steps)
    )
    return optimizer, scheduler


def train_step(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    batch: dict[str, torch.Tensor],
    clip_norm: float,
) -> dict[str, float]:
    """One update on `batch`, mirroring `bertjax.train.step.make_train_step`.

    MLM+NSP loss, gradient, global-norm clip (`clip_norm` 0 disables it), AdamW step, schedule
    step. Dropout follows `model.training`. Returns the loss parts at the parameters before the
    update, the gradient norm before clipping and the learning rate this update used.
    """
    optimizer.zero_grad(set_to_none=True)
    out = model(
        batch["input_ids"], batch["token_type_ids"], batch["attention_mask"],
        batch["masked_positions"],
    )
    loss, parts = pretraining_loss(out.mlm_logits, out.nsp_logits, batch)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(
        model.parameters(), clip_norm if clip_norm > 0 else float("inf")
    )
    learning_rate = scheduler.get_last_lr()[0]
    optimizer.step()
    scheduler.step()
    metrics: dict[str, Any] = {"loss": loss, **parts, "grad_norm": grad_norm}
    return ({k: float(v.detach()) for k, v in metrics.items()}
            | {"learning_rate": float(learning_rate)})
