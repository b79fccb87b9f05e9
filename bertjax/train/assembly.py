"""Model + optimizer + train and eval steps + strategy, built one way for every job.

Pre-training, fine-tuning and the bench all call `assemble`, so one rule decides each choice they
share: the optimizer is any Optax transformation (or an `OptimConfig`, which builds bertjax's
recipe and its schedule), the dropout keys follow `needs_dropout_keys`, the steps' parallel axis
the strategy.

    training = assemble(model, optax.adamw(optax.linear_schedule(1e-3, 0, 1000)), seed=0)
    training = assemble(model, OptimConfig(learning_rate=1e-3), steps=1000, seed=0)  # BERT's
    state = training.strategy.place_state(training.state)
    state, metrics = training.train_step(state, batch)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optax
from flax import nnx

from bertjax.errors import InputError
from bertjax.train.objectives import PRETRAINING, Objective
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.parallel import MeshStrategy, Pmap, SingleDevice
from bertjax.train.step import (
    Batch,
    Metrics,
    TrainState,
    create_train_state,
    make_eval_step,
    make_train_step,
)

Strategy = SingleDevice | Pmap | MeshStrategy


def needs_dropout_keys(model: nnx.Module) -> bool:
    """True if any `nnx.Dropout` in `model` (encoder, heads, classifier) has a rate above 0."""
    return any(isinstance(node, nnx.Dropout) and node.rate > 0
               for _, node in nnx.iter_graph(model))


@dataclasses.dataclass
class Training:
    """What a job trains with: the split model, its optimizer, the fresh state and the steps."""

    graphdef: nnx.GraphDef
    tx: optax.GradientTransformation
    strategy: Strategy
    state: TrainState  # host state, not yet placed (pre-training restores into it first)
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    eval_step: Callable[[nnx.State, Batch], Metrics]  # (params, batch) -> metric sums, no dropout


def assemble(
    model: nnx.Module,
    optimizer: OptimConfig | optax.GradientTransformation,
    strategy: Strategy | None = None,
    *,
    steps: int | None = None,
    seed: int = 0,
    prng_impl: str = "threefry2x32",
    objective: Objective = PRETRAINING,
    grad_accum_steps: int | None = None,
) -> Training:
    """Split `model` into a fresh `TrainState` (step 0, dropout key from `seed`) and build the
    steps of `objective` with `optimizer`, compiled by `strategy` (default: one device).

    `optimizer` is any `optax.GradientTransformation` (its learning rate is logged when its state
    holds one: `optax.inject_hyperparams`), or an `OptimConfig`, which builds bertjax's recipe
    (clipping, decay mask, warm-up then linear decay over `steps` updates, logged exactly) and
    sets the gradient accumulation. `grad_accum_steps` sums that many micro-batches per update.

    Place the state with `strategy.place_state` before the first `train_step` (a `jax.jit` or
    `jax.pmap` of the step). The state shares the model's arrays, which the first (donating) step
    may delete: read the trained model as `nnx.merge(graphdef, state.params)`.
    """
    if not isinstance(model, nnx.Module):
        raise TypeError(f"assemble takes the model to train (a bertjax model, e.g. "
                        f"bertjax.BertForPreTraining(config, rngs=nnx.Rngs(0))), got "
                        f"{type(model).__name__}")
    strategy = SingleDevice() if strategy is None else strategy
    if isinstance(optimizer, OptimConfig):
        if grad_accum_steps not in (None, optimizer.grad_accum_steps):
            raise InputError(f"grad_accum_steps={grad_accum_steps} differs from the OptimConfig's "
                             f"{optimizer.grad_accum_steps}: set it in one place")
        if steps is None:
            raise InputError("an OptimConfig's schedule spans the run: pass steps=N, the number "
                             "of optimizer updates (or an Optax optimizer of your own)")
        tx, schedule = make_optimizer(optimizer, steps), learning_rate_schedule(optimizer, steps)
        accum = optimizer.grad_accum_steps
    elif isinstance(optimizer, optax.GradientTransformation):
        if steps is not None:
            raise InputError(f"steps={steps} sets an OptimConfig's schedule; an Optax optimizer "
                             "carries its own: leave steps out")
        tx, schedule, accum = optimizer, None, grad_accum_steps or 1
    else:
        raise TypeError(f"optimizer must be an optax.GradientTransformation or an OptimConfig, "
                        f"got {type(optimizer).__name__}")
    if accum < 1:
        raise InputError(f"grad_accum_steps must be positive, got {accum}")
    dropout = needs_dropout_keys(model)
    graphdef, state = create_train_state(model, tx, seed, prng_impl)
    train_step = make_train_step(
        graphdef, tx, schedule, grad_accum_steps=accum, dropout=dropout,
        axis_name=strategy.axis_name, objective=objective, prng_impl=prng_impl)
    eval_step = make_eval_step(graphdef, axis_name=strategy.axis_name, objective=objective)
    return Training(graphdef=graphdef, tx=tx, strategy=strategy, state=state,
                    train_step=strategy.compile_step(train_step, state),
                    eval_step=strategy.compile_eval(eval_step))
