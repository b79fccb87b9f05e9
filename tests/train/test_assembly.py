"""One assembly of model, optimizer and steps: the dropout-key rule, and assembled steps equal to
the train step built by hand (pre-training, fine-tuning, and the mesh strategy, whose step is
compiled only after the state is placed)."""

from __future__ import annotations

import jax
import numpy as np
import pytest
from flax import nnx
from test_parallel import make_batches

from bertjax import BertConfig, BertForPreTraining, BertForSequenceClassification
from bertjax.train.assembly import assemble, needs_dropout_keys
from bertjax.train.objectives import CLASSIFICATION
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.parallel import SingleDevice, make_strategy
from bertjax.train.step import create_train_state, make_eval_step, make_train_step

VOCAB = 128
OPTIM = OptimConfig(learning_rate=1e-3, warmup_steps=2)
STEPS = 10  # the updates its schedule spans


def _config(hidden: float, attention: float, classifier: float | None = None) -> BertConfig:
    """One small layer: each test compiles a few train steps."""
    return BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=1,
                      num_attention_heads=2, intermediate_size=64, max_position_embeddings=64,
                      hidden_dropout_prob=hidden, attention_probs_dropout_prob=attention,
                      classifier_dropout=classifier, id2label=("a", "b", "c"))


def _classifier_batch() -> dict[str, np.ndarray]:
    batch = make_batches(1)[0]
    labels = np.arange(batch["input_ids"].shape[0], dtype=np.int32) % 3
    return {k: batch[k] for k in ("input_ids", "token_type_ids", "attention_mask")} | {
        "labels": labels}


def _by_hand(model: nnx.Module, batch: dict[str, np.ndarray], *, dropout: bool, **kwargs):
    """One step of `make_train_step` built without `assemble`: (state, metrics)."""
    tx = make_optimizer(OPTIM, STEPS)
    graphdef, state = create_train_state(model, tx, seed=0)
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(OPTIM, STEPS), dropout=dropout,
                                   **kwargs))
    return step(state, batch)


def _assembled(model: nnx.Module, batch: dict[str, np.ndarray], strategy=None, **kwargs):
    strategy = strategy or SingleDevice()
    training = assemble(model, OPTIM, strategy, steps=STEPS, seed=0, **kwargs)
    state = strategy.place_state(training.state)
    return training.train_step(state, strategy.shard_batch(batch))


def _assert_equal(a, b) -> None:
    for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _max_diff(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x) - np.asarray(y))))
               for x, y in zip(jax.tree.leaves(a), jax.tree.leaves(b), strict=True))


@pytest.mark.parametrize(("hidden", "attention", "classifier", "expected"), [
    (0.0, 0.0, 0.0, False),
    (0.0, 0.0, 0.1, True),  # only the classifier drops: still needs keys
    (0.1, 0.0, 0.0, True),
    (0.0, 0.1, 0.0, True),
    (0.0, 0.0, None, False),  # classifier dropout follows hidden_dropout_prob
])
def test_classifier_needs_dropout_keys_if_any_dropout_is_on(
        hidden: float, attention: float, classifier: float | None, expected: bool) -> None:
    model = BertForSequenceClassification(_config(hidden, attention, classifier),
                                          rngs=nnx.Rngs(0))
    assert needs_dropout_keys(model) is expected


def test_pretraining_model_ignores_a_classifier_rate_it_has_no_layer_for() -> None:
    off = BertForPreTraining(_config(0.0, 0.0, 0.3), rngs=nnx.Rngs(0))
    on = BertForPreTraining(_config(0.1, 0.1), rngs=nnx.Rngs(0))
    assert (needs_dropout_keys(off), needs_dropout_keys(on)) == (False, True)


@pytest.fixture(scope="module")
def assembled_pretraining():
    """One assembled single-device pre-training step with dropout: (state, metrics)."""
    return _assembled(BertForPreTraining(_config(0.1, 0.1), rngs=nnx.Rngs(0)), make_batches(1)[0])


@pytest.mark.slow
def test_assembled_pretraining_step_equals_make_train_step(assembled_pretraining) -> None:
    model = BertForPreTraining(_config(0.1, 0.1), rngs=nnx.Rngs(0))
    expected = _by_hand(model, make_batches(1)[0], dropout=True)
    _assert_equal(assembled_pretraining, expected)


@pytest.mark.slow
def test_assembled_classifier_step_uses_classifier_only_dropout() -> None:
    """Fine-tuning with dropout only in the classifier: the assembled step draws dropout keys."""
    config = _config(0.0, 0.0, 0.5)
    batch = _classifier_batch()
    make = lambda: BertForSequenceClassification(config, rngs=nnx.Rngs(0))  # noqa: E731
    expected = _by_hand(make(), batch, dropout=True, objective=CLASSIFICATION)
    got = _assembled(make(), batch, objective=CLASSIFICATION)
    _assert_equal(got, expected)
    deterministic = _by_hand(make(), batch, dropout=False, objective=CLASSIFICATION)
    assert _max_diff(got[1]["loss"], deterministic[1]["loss"]) > 1e-4


@pytest.mark.slow
def test_assembled_step_under_the_mesh_strategy(assembled_pretraining) -> None:
    """Under the mesh strategy (the step's output shardings are the state's, from its shapes)
    the assembled step gives the single-device result."""
    config, batch = _config(0.1, 0.1), make_batches(1)[0]
    mesh = _assembled(BertForPreTraining(config, rngs=nnx.Rngs(0)), batch, make_strategy("mesh"))
    assert _max_diff(assembled_pretraining, mesh) < 1e-6


def test_assembled_eval_step_equals_make_eval_step() -> None:
    config, batch = _config(0.1, 0.1), make_batches(1)[0]
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    graphdef, params = nnx.split(model, nnx.Param)
    expected = jax.jit(make_eval_step(graphdef))(params, batch)
    training = assemble(model, OPTIM, SingleDevice(), steps=STEPS, seed=0)
    _assert_equal(training.eval_step(training.state.params, batch), expected)


# --- any Optax transformation ---------------------------------------------------------------


def _train(model: nnx.Module, optimizer, steps: int, **kwargs):
    """`steps` updates of `assemble(model, optimizer)` on one fixed batch: (losses, metrics)."""
    training = assemble(model, optimizer, seed=0, **kwargs)
    state = training.strategy.place_state(training.state)
    batch = training.strategy.shard_batch(make_batches(1)[0])
    losses, metrics = [], {}
    for _ in range(steps):
        state, metrics = training.train_step(state, batch)
        losses.append(float(metrics["loss"]))
    return losses, metrics


@pytest.mark.slow
def test_adafactor_trains_through_assemble_and_logs_no_rate_it_cannot_read() -> None:
    """A plain Optax optimizer: it learns (the loss on a repeated batch falls), and its state
    holds no learning rate, so none is logged rather than a made-up one."""
    import optax

    losses, metrics = _train(BertForPreTraining(_config(0.0, 0.0), rngs=nnx.Rngs(0)),
                             optax.adafactor(1e-2), steps=8)
    assert all(b < a for a, b in zip(losses, losses[1:], strict=False)), losses  # every update
    assert losses[-1] < 0.98 * losses[0], losses  # measured 5.563 -> 5.429 in 8 updates
    assert "learning_rate" not in metrics and np.isfinite(float(metrics["grad_norm"]))


@pytest.mark.slow
def test_a_user_chain_logs_the_rate_its_injected_schedule_used() -> None:
    """A user's own chain with `inject_hyperparams`: the learning rate logged after each update
    is the schedule's value at that update (0-based), read from the optimizer's state."""
    import optax

    schedule = optax.linear_schedule(1e-3, 0.0, transition_steps=4)
    chain = optax.chain(optax.clip_by_global_norm(1.0),
                        optax.inject_hyperparams(optax.adamw)(learning_rate=schedule))
    training = assemble(BertForPreTraining(_config(0.1, 0.1), rngs=nnx.Rngs(0)), chain, seed=0)
    state = training.strategy.place_state(training.state)
    batch = make_batches(1)[0]
    for step in range(3):
        state, metrics = training.train_step(state, batch)
        np.testing.assert_allclose(float(metrics["learning_rate"]), float(schedule(step)),
                                   rtol=1e-6)
    assert float(metrics["learning_rate"]) == pytest.approx(5e-4)


@pytest.mark.slow
def test_an_optim_config_and_the_transformation_it_builds_give_the_same_update() -> None:
    """OptimConfig is the run file's schema: it builds an Optax transformation; passing either
    to `assemble` trains the same (only the logged rate needs the config's schedule)."""
    batch = make_batches(1)[0]
    from_config = _assembled(BertForPreTraining(_config(0.0, 0.0), rngs=nnx.Rngs(0)), batch)
    training = assemble(BertForPreTraining(_config(0.0, 0.0), rngs=nnx.Rngs(0)),
                        make_optimizer(OPTIM, STEPS), seed=0)
    state, metrics = training.train_step(training.strategy.place_state(training.state), batch)
    _assert_equal(from_config[0].params, state.params)
    assert "learning_rate" in from_config[1] and "learning_rate" not in metrics


def test_assemble_refuses_what_is_no_optimizer_and_a_doubly_set_accumulation() -> None:
    model = BertForPreTraining(_config(0.0, 0.0), rngs=nnx.Rngs(0))
    with pytest.raises(TypeError, match="optax.GradientTransformation or an OptimConfig, got dict"):
        assemble(model, {"learning_rate": 1e-3})
    with pytest.raises(ValueError, match="grad_accum_steps=2 differs from the OptimConfig's 1"):
        assemble(model, OPTIM, steps=STEPS, grad_accum_steps=2)
