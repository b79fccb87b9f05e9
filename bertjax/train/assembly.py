"""Model + optimizer + train and eval steps + strategy, built one way for every job.

Pre-training, fine-tuning and the bench all call `assemble`, so one rule decides each choice they
share: the optimizer and its schedule come from the `OptimConfig`, the dropout keys from
`needs_dropout_keys`, the steps' parallel axis from the strategy.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import optax
from flax import nnx

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
    state: TrainState  # host state, not yet placed (pre-training restores into it first)
    train_step: Callable[[TrainState, Batch], tuple[TrainState, Metrics]]
    eval_step: Callable[[nnx.State, Batch], Metrics]  # (params, batch) -> metric sums, no dropout


def assemble(
    model: nnx.Module,
    optim: OptimConfig,
    strategy: Strategy,
    *,
    seed: int,
    prng_impl: str = "threefry2x32",
    objective: Objective = PRETRAINING,
) -> Training:
    """Split `model` into a fresh `TrainState` (step 0, dropout key from `seed`) and build the
    optimizer and the steps of `objective`, compiled by `strategy`.

    Place the state with `strategy.place_state` before the first `train_step`: the mesh strategy
    takes the step's output shardings from the placed state, so the train step is handed to
    `strategy.compile_step` on its first call (tracing and compilation happen then anyway).
    The state shares the model's arrays, which the first (donating) step may delete: read the
    trained model as `nnx.merge(graphdef, state.params)`.
    """
    tx = make_optimizer(optim)
    dropout = needs_dropout_keys(model)
    graphdef, state = create_train_state(model, tx, seed, prng_impl)
    train_step = make_train_step(
        graphdef, tx, learning_rate_schedule(optim), grad_accum_steps=optim.grad_accum_steps,
        dropout=dropout, axis_name=strategy.axis_name, objective=objective, prng_impl=prng_impl)
    eval_step = make_eval_step(graphdef, axis_name=strategy.axis_name, objective=objective)
    return Training(graphdef=graphdef, tx=tx, state=state,
                    train_step=_compiled_on_first_call(strategy.compile_step, train_step),
                    eval_step=strategy.compile_eval(eval_step))


def _compiled_on_first_call(compile_step: Callable[[Callable], Callable], fn: Callable
                            ) -> Callable:
    """`fn` compiled by `compile_step` when first called (after the state has been placed)."""
    compiled: list[Callable] = []

    def step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
        if not compiled:
            compiled.append(compile_step(fn))
        return compiled[0](state, batch)

    return step
