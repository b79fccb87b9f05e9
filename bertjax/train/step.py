"""The train and eval steps: pure functions of `(state, batch)`, jitted once by a strategy.

The model is split once (`nnx.split(model, nnx.Param)`); the steps merge the graph definition
with the parameters inside the traced function, as the Flax performance guide recommends for hot
loops. Losses are sums divided by the *global* counts (masked predictions, sequences), computed
before any forward pass, so gradient accumulation over micro-batches and data parallelism (pmap
`psum`, or a mesh's global batch) give the gradient of the whole batch's mean loss, not a mean of
micro-batch means.

Dropout keys are `fold_in(fold_in(fold_in(key(seed), step), device), micro_batch)`: a pure
function of the state, so a resumed run draws exactly the masks an uninterrupted one would.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import jax
import jax.numpy as jnp
import optax
from flax import nnx, struct

from bertjax.errors import InputError
from bertjax.train.choices import PRNG_IMPLS
from bertjax.train.objectives import PRETRAINING, Objective
from bertjax.train.optim import current_learning_rate

Batch = dict[str, jax.Array]
Metrics = dict[str, jax.Array]


@struct.dataclass
class TrainState:
    """Everything a step changes; what a checkpoint holds besides the data iterator's position."""

    step: jax.Array  # () int32: optimizer updates done
    params: Any  # nnx.State of the model's nnx.Param leaves, float32
    opt_state: Any  # optax state
    rng: jax.Array  # uint32 raw key data of the dropout stream (not a typed key: saves as-is)

    if TYPE_CHECKING:  # made by flax.struct.dataclass
        def replace(self, **updates: Any) -> TrainState: ...



def create_train_state(
    model: nnx.Module, tx: optax.GradientTransformation, seed: int,
    prng_impl: str = "threefry2x32",
) -> tuple[nnx.GraphDef, TrainState]:
    """Split the model into its graph definition and a fresh `TrainState` (step 0) whose dropout
    key is of `prng_impl` (one of `PRNG_IMPLS`)."""
    if prng_impl not in PRNG_IMPLS:
        raise InputError(f"unknown PRNG implementation {prng_impl!r}; choose one of {PRNG_IMPLS}")
    graphdef, params, *rest = nnx.split(model, nnx.Param, ...)
    extra = [s for s in rest if jax.tree.leaves(s)]
    if extra:
        raise InputError(
            "the model holds state other than nnx.Param (e.g. an Rngs stream); build it without "
            f"rngs on dropout layers: {jax.tree.structure(extra)}"
        )
    rng = jax.random.key_data(jax.random.key(seed, impl=prng_impl))
    return graphdef, TrainState(
        step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params), rng=rng
    )


def _psum(tree: Any, axis_name: str | None) -> Any:
    return tree if axis_name is None else jax.lax.psum(tree, axis_name)


def _micro_batches(batch: Batch, k: int) -> Batch:
    """(B, ...) -> (k, B/k, ...); micro-batch i holds rows i, i+k, i+2k, ... so a batch sharded
    on its first axis stays sharded (each device keeps its own rows) under a mesh."""
    return jax.tree.map(
        lambda x: jnp.swapaxes(x.reshape(x.shape[0] // k, k, *x.shape[1:]), 0, 1), batch
    )


def make_train_step(
    graphdef: nnx.GraphDef,
    tx: optax.GradientTransformation,
    schedule: optax.Schedule | None = None,
    *,
    grad_accum_steps: int = 1,
    dropout: bool = True,
    axis_name: str | None = None,
    objective: Objective = PRETRAINING,
    prng_impl: str = "threefry2x32",
) -> Callable[[TrainState, Batch], tuple[TrainState, Metrics]]:
    """A pure `train_step(state, batch) -> (state, metrics)`: one optimizer update of
    `objective` (pre-training by default; `objectives.CLASSIFICATION` fine-tunes).

    `axis_name` is the pmap axis (gradients and counts are summed over it); `None` for a single
    device or a mesh, where the batch is one global array. `dropout=False` runs deterministically;
    `prng_impl` must be the one `create_train_state` made the state's key with. The metrics hold
    the update's `learning_rate`: `schedule(step)` if a schedule is given, else the rate the
    optimizer's state holds (`optim.current_learning_rate`), else none.
    """
    k = grad_accum_steps

    def train_step(state: TrainState, batch: Batch) -> tuple[TrainState, Metrics]:
        counts = _psum({**objective.counts(batch),
                        "tokens": jnp.sum(batch["attention_mask"], dtype=jnp.float32)}, axis_name)
        key = jax.random.fold_in(jax.random.wrap_key_data(state.rng, impl=prng_impl), state.step)
        if axis_name is not None:
            key = jax.random.fold_in(key, jax.lax.axis_index(axis_name))

        def grads_and_sums(index: jax.Array, micro: Batch) -> tuple[Any, Metrics]:
            def loss_fn(params: Any) -> tuple[jax.Array, Metrics]:
                rng = jax.random.fold_in(key, index) if dropout or objective.draws else None
                sums = objective.forward_sums(nnx.merge(graphdef, params), micro, rng)
                return objective.loss(sums, counts), sums

            grads, sums = jax.grad(loss_fn, has_aux=True)(state.params)
            return grads, sums

        if k == 1:
            grads, sums = grads_and_sums(jnp.int32(0), batch)
        else:
            def body(carry: tuple[Any, Metrics], xs: tuple[jax.Array, Batch]):
                g, s = grads_and_sums(*xs)
                return jax.tree.map(jnp.add, carry, (g, s)), None

            zeros = jax.eval_shape(grads_and_sums, jnp.int32(0),
                                   jax.tree.map(lambda x: x[0], _micro_batches(batch, k)))
            zeros = jax.tree.map(lambda s: jnp.zeros(s.shape, s.dtype), zeros)
            (grads, sums), _ = jax.lax.scan(
                body, zeros, (jnp.arange(k, dtype=jnp.int32), _micro_batches(batch, k)))
        grads, sums = _psum((grads, sums), axis_name)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        new_state = state.replace(
            step=state.step + 1, params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
        )
        metrics = objective.metrics(sums)
        metrics.update(
            grad_norm=optax.tree.norm(grads),  # before clipping
            tokens=counts["tokens"],  # real (unpadded) tokens of the global batch
        )
        rate = schedule(state.step) if schedule is not None else current_learning_rate(opt_state)
        if rate is not None:
            metrics["learning_rate"] = rate  # the rate this update used
        return new_state, metrics

    return train_step


def make_eval_step(
    graphdef: nnx.GraphDef, *, axis_name: str | None = None, objective: Objective = PRETRAINING
) -> Callable[[Any, Batch], Metrics]:
    """`eval_step(params, batch) -> sums` (no dropout); add the sums of several batches, then
    turn them into means (`bertjax.losses.metrics_from_sums` for pre-training)."""

    def eval_step(params: Any, batch: Batch) -> Metrics:
        return _psum(objective.forward_sums(nnx.merge(graphdef, params), batch, None), axis_name)

    return eval_step

