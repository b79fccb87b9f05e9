"""Optax optimizers for pre-training: the schedule, weight-decay mask, clipping and the choices.

AdamW follows BERT (beta1 0.9, beta2 0.999, eps 1e-6, decoupled weight decay 0.01) and, like
BERT, does not decay biases or LayerNorm parameters. Gradients are clipped to a global norm
first. Gradient accumulation is not an optimizer wrapper here: the train step sums micro-batch
gradients itself (see `bertjax.train.step`), so one call is one optimizer update.
`bert_torch.train` mirrors this with `torch.optim.AdamW`.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import optax

from bertjax.config import per_layer_shape, stacked_at
from bertjax.errors import InputError
from bertjax.train.choices import OPTIMIZERS
from bertjax.train.schedule import (
    OptimConfig,
    applies_weight_decay,
    check_steps,
    decay_of,
    warmup_of,
)

__all__ = ["OPTIMIZERS", "OptimConfig", "current_learning_rate", "decay_mask",
           "learning_rate_schedule", "make_optimizer"]


def learning_rate_schedule(config: OptimConfig, total_steps: int) -> optax.Schedule:
    """`peak * learning_rate_factor(step)` (bertjax.train.schedule: linear decay or WSD) for
    traced steps, over `total_steps` updates."""
    check_steps(total_steps)
    peak, warmup, total = config.learning_rate, warmup_of(config, total_steps), total_steps
    if config.schedule == "wsd":
        return _warmup_stable_decay(peak, warmup, decay_of(config, total_steps), total)

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = step / max(warmup, 1)
        decay = jnp.maximum(0.0, (total - step) / max(1, total - warmup))
        return peak * jnp.where(step < warmup, warm, decay)

    return schedule


def _warmup_stable_decay(peak: float, warmup: int, decay: int, total: int) -> optax.Schedule:
    """`peak * warmup_stable_decay_factor(step)` for traced steps: the warm-up's ramp, the peak,
    then `1 - sqrt` of the share of the decay done, as `(1 - t) / (1 + sqrt(t))`."""
    start = total - decay if decay else math.inf

    def schedule(step: jax.Array) -> jax.Array:
        step = jnp.asarray(step, jnp.float32)
        warm = jnp.minimum(1.0, step / max(warmup, 1)) if warmup else jnp.float32(1.0)
        done = jnp.clip((step - start) / max(decay, 1), 0.0, 1.0)
        cool = jnp.maximum(0.0, (total - step) / max(decay, 1)) / (1.0 + jnp.sqrt(done))
        return peak * jnp.where(step < start, warm, jnp.minimum(warm, cool))

    return schedule


def decay_mask(params: Any) -> Any:
    """True where weight decay applies (`schedule.applies_weight_decay`: matrices, not biases or
    LayerNorm parameters), judged on one layer's shape where a scan model stacks them (L, ...)."""
    return jax.tree_util.tree_map_with_path(
        lambda path, p: applies_weight_decay(per_layer_shape(path, p.shape)), params)


def _per_layer(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """A stateless per-leaf transformation (LAMB's trust ratio) applied to each layer of a scan
    model's stacked (L, ...) parameters on its own, as to the loop model's per-layer leaves."""

    def update(updates: Any, state: Any, params: Any = None) -> tuple[Any, Any]:
        if params is None:
            raise InputError("LAMB's trust ratio needs the parameters: update(updates, state, "
                             "params)")

        def one(path: Any, u: jax.Array, p: jax.Array) -> jax.Array:
            if stacked_at(path) is None:
                return tx.update(u, state, p)[0]
            return jax.vmap(lambda ul, pl: tx.update(ul, state, pl)[0])(u, p)  # (L, ...)

        return jax.tree_util.tree_map_with_path(one, updates, params), state

    return optax.GradientTransformation(tx.init, update)


def _lamb(lr: optax.Schedule, c: OptimConfig) -> optax.GradientTransformation:
    """`optax.lamb` (same transformations, same state) with a trust ratio per layer."""
    return optax.chain(
        optax.scale_by_adam(b1=c.b1, b2=c.b2, eps=c.eps),
        optax.add_decayed_weights(c.weight_decay, mask=decay_mask),
        _per_layer(optax.scale_by_trust_ratio()),
        optax.scale_by_learning_rate(lr),
    )


def _without_params(tx: optax.GradientTransformation) -> optax.GradientTransformation:
    """`tx` (which reads no parameters) never handed them: `optax.flatten` would concatenate
    them into a vector of every parameter on each update for nothing."""
    return optax.GradientTransformation(tx.init, lambda u, state, params=None: tx.update(u, state))


def _flattened(c: OptimConfig, lr: optax.Schedule) -> optax.GradientTransformation:
    """`make_optimizer`'s update with the clipping and the moments over one vector of every
    gradient (a few large kernels instead of several per parameter); the weight decay (per
    parameter: `decay_mask`) and the learning rate stay per leaf, fused with the update."""
    per_vector = [optax.clip_by_global_norm(c.clip_norm)] if c.clip_norm > 0 else []
    if c.optimizer == "sgd":
        per_vector.append(optax.trace(decay=c.b1))
    else:
        per_vector.append(optax.scale_by_adam(b1=c.b1, b2=c.b2, eps=c.eps))
    per_leaf = [optax.add_decayed_weights(c.weight_decay, mask=decay_mask)] \
        if c.optimizer == "adamw" else []
    return optax.chain(_without_params(optax.flatten(optax.chain(*per_vector))), *per_leaf,
                       optax.scale_by_learning_rate(lr))


def make_optimizer(config: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """Clip by global norm, then the chosen optimizer with its learning-rate schedule over
    `total_steps` updates (`config.flatten`: the same over one vector of every gradient,
    `_flattened`)."""
    lr = learning_rate_schedule(config, total_steps)
    c = config
    if c.flatten:
        return _flattened(c, lr)
    if c.optimizer == "adamw":
        opt = optax.adamw(lr, b1=c.b1, b2=c.b2, eps=c.eps, weight_decay=c.weight_decay,
                          mask=decay_mask)
    elif c.optimizer == "adam":
        opt = optax.adam(lr, b1=c.b1, b2=c.b2, eps=c.eps)
    elif c.optimizer == "lamb":
        opt = _lamb(lr, c)
    else:
        opt = optax.sgd(lr, momentum=c.b1)
    parts = [optax.clip_by_global_norm(c.clip_norm)] if c.clip_norm > 0 else []
    return optax.chain(*parts, opt)


def current_learning_rate(opt_state: Any) -> jax.Array | None:
    """The learning rate an Optax state holds, if it holds exactly one: the `learning_rate`
    hyperparameter of an `optax.inject_hyperparams` transformation (anywhere in a chain), which
    after an update is the rate that update used. None for a state that keeps no rate (plain
    `optax.adamw(schedule)`, `optax.adafactor`, ...): there is nothing to read."""
    found: list[Any] = []

    def holds_rate(node: Any) -> bool:
        hyperparams = getattr(node, "hyperparams", None)
        if isinstance(hyperparams, dict) and "learning_rate" in hyperparams:
            found.append(hyperparams["learning_rate"])
            return True
        return False

    jax.tree_util.tree_flatten(opt_state, is_leaf=holds_rate)
    return found[0] if len(found) == 1 else None
