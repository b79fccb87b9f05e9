"""Each fine-tuning task's loss against transformers' own: the `labels` loss of its BertFor* class,
value and the gradient of every parameter, and the objective the train step uses built from sums
that add up across micro-batches: an assembled train step lowers each task's loss, and splitting
its batch into micro-batches (labelled counts differing between them) leaves loss and gradient
norm as they were.

Models and batches are test_heads.py's (odd shapes, perturbed biases, padded rows). Tolerances
(float32): the loss within 1e-5 absolute; gradients within 1e-5 of each parameter's largest
gradient (at least 1), as test_heads.py states them; each raised to 3 x transformers' own float32
noise where that is larger (the parity rule, `parity.noise`: transformers runs in float64 too).
"""

from __future__ import annotations

import copy

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx
from test_heads import _batch, _hf_model

from bertjax import (
    BertConfig,
    BertForMultipleChoice,
    BertForQuestionAnswering,
    BertForTokenClassification,
)
from bertjax.io.hf import hf_name
from bertjax.io.weights import state_to_numpy
from bertjax.losses import (
    IGNORE_INDEX,
    classification_loss,
    question_answering_loss,
    token_classification_loss,
    token_classification_sums,
)
from bertjax.pretrained import load_hf
from bertjax.train.assembly import assemble
from bertjax.train.objectives import (
    MULTIPLE_CHOICE,
    QUESTION_ANSWERING,
    TOKEN_CLASSIFICATION,
    masked_choice_logits,
)
from bertjax.train.optim import OptimConfig
from bertjax.train.parallel import SingleDevice
from parity.noise import failures

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

TOL = 1e-5
NAME = "BertForTokenClassification"


def _labels(mask: np.ndarray, seed: int = 0) -> np.ndarray:
    """(B, S) labels in [0, 3), ignored on padding and on a few real positions (later pieces)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 3, mask.shape)
    labels[mask == 0] = IGNORE_INDEX
    labels[rng.random(mask.shape) < 0.2] = IGNORE_INDEX
    return labels


def _pair(name: str, tmp_path_factory):
    hf = _hf_model(name)
    path = tmp_path_factory.mktemp(name) / "in"
    hf.save_pretrained(path)
    return hf, load_hf(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return _pair(NAME, tmp_path_factory)


def _transformers_loss(hf, batch, hf_labels: dict) -> tuple[float, dict[str, np.ndarray]]:
    """transformers' `loss` with `hf_labels` and its gradients by parameter name."""
    ids, types, mask = batch
    hf.zero_grad()
    out = hf(torch.from_numpy(ids), token_type_ids=torch.from_numpy(types),
             attention_mask=torch.from_numpy(mask),
             **{k: torch.from_numpy(v) for k, v in hf_labels.items()})
    out.loss.backward()
    return float(out.loss.detach()), {n: p.grad.numpy() for n, p in hf.named_parameters()
                                      if p.grad is not None}


def _compare(hf, ours, batch, hf_labels: dict, our_loss) -> None:
    """transformers' `loss` with `hf_labels` and its gradients against `our_loss(model)`'s, by
    the parity rule (transformers in float64 measuring its own float32 noise)."""
    (loss32, grads32), (loss64, grads64) = (_transformers_loss(m, batch, hf_labels)
                                            for m in (hf, copy.deepcopy(hf).double()))
    value, grads = nnx.jit(nnx.value_and_grad(our_loss))(ours)  # compiled, not op by op
    prefix = type(ours).base_model_prefix
    our_grads = {hf_name(k, prefix): v for k, v in state_to_numpy(grads).items()}
    assert failures({"loss": float(value)}, {"loss": loss32}, {"loss": loss64}, TOL) == []
    assert failures(our_grads, grads32, grads64, TOL, relative=True, floor=1.0) == []


def _logits(model, batch):
    return model(*(jnp.asarray(x) for x in batch))


def test_token_classification_loss_and_gradients_equal_transformers(models):
    hf, ours = models
    batch = _batch(NAME)
    labels = _labels(batch[2])
    _compare(hf, ours, batch, {"labels": labels},
             lambda m: token_classification_loss(_logits(m, batch).logits, jnp.asarray(labels)))


def test_question_answering_loss_and_gradients_equal_transformers(tmp_path_factory):
    """Positions past the window (11 pieces here) are clamped to it and ignored, start and end
    apart, as transformers does: one row's end and another's start are out."""
    name = "BertForQuestionAnswering"
    hf, ours = _pair(name, tmp_path_factory)
    batch = _batch(name)
    starts, ends = np.array([2, 40, 0]), np.array([5, 6, 11])
    _compare(hf, ours, batch, {"start_positions": starts, "end_positions": ends},
             lambda m: question_answering_loss(_logits(m, batch).start_logits,
                                               _logits(m, batch).end_logits,
                                               jnp.asarray(starts), jnp.asarray(ends)))
    arrays = dict(zip(("input_ids", "token_type_ids", "attention_mask"), batch, strict=True))
    arrays |= {"start_positions": starts, "end_positions": ends}
    sums = QUESTION_ANSWERING.forward_sums(ours, arrays, None)
    counts = QUESTION_ANSWERING.counts(arrays)
    assert (float(counts["start_count"]), float(counts["end_count"])) == (2.0, 2.0)
    out = _logits(ours, batch)
    np.testing.assert_allclose(float(QUESTION_ANSWERING.loss(sums, counts)),
                               float(question_answering_loss(out.start_logits, out.end_logits,
                                                             starts, ends)), rtol=1e-6)


def test_multiple_choice_loss_and_gradients_equal_transformers(tmp_path_factory):
    name = "BertForMultipleChoice"
    hf, ours = _pair(name, tmp_path_factory)
    batch = _batch(name)
    labels = np.array([1, 0, 1])
    _compare(hf, ours, batch, {"labels": labels},
             lambda m: classification_loss(_logits(m, batch).logits, jnp.asarray(labels)))
    arrays = dict(zip(("input_ids", "token_type_ids", "attention_mask"), batch, strict=True))
    arrays |= {"labels": labels, "choice_mask": np.ones((3, 2), np.int32)}
    sums = MULTIPLE_CHOICE.forward_sums(ours, arrays, None)
    np.testing.assert_allclose(float(MULTIPLE_CHOICE.loss(sums, MULTIPLE_CHOICE.counts(arrays))),
                               float(classification_loss(_logits(ours, batch).logits, labels)),
                               rtol=1e-6)


def test_a_padding_choice_has_no_probability_and_no_gradient():
    logits = jnp.asarray([[0.3, 2.0, -1.0]])
    mask = jnp.asarray([[1, 1, 0]])

    def loss(x):
        return classification_loss(masked_choice_logits(x, mask), jnp.asarray([0]))

    grad = np.asarray(jax.grad(loss)(logits))
    assert grad[0, 2] == 0.0
    two = classification_loss(logits[:, :2], jnp.asarray([0]))
    assert abs(float(loss(logits)) - float(two)) < 1e-6  # as if the choice were not there


def test_the_objective_is_the_mean_over_labelled_positions_of_the_whole_batch(models):
    _, ours = models
    ids, types, mask = _batch(NAME)
    labels = _labels(mask, seed=1)
    batch = {"input_ids": ids, "token_type_ids": types, "attention_mask": mask, "labels": labels}
    halves = [{k: v[rows] for k, v in batch.items()} for rows in ([0], [1, 2])]
    forward_sums = nnx.jit(TOKEN_CLASSIFICATION.forward_sums)  # compiled, not op by op
    whole = forward_sums(ours, batch, None)
    parts = [forward_sums(ours, h, None) for h in halves]
    for key in whole:
        np.testing.assert_allclose(float(whole[key]), sum(float(p[key]) for p in parts),
                                   rtol=1e-6, err_msg=key)
    counts = TOKEN_CLASSIFICATION.counts(batch)
    assert float(counts["labelled"]) == float(np.sum(labels != IGNORE_INDEX))
    logits = ours(ids, types, mask).logits
    np.testing.assert_allclose(float(TOKEN_CLASSIFICATION.loss(whole, counts)),
                               float(token_classification_loss(logits, jnp.asarray(labels))),
                               rtol=1e-6)


def test_ignored_positions_carry_no_loss():
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 3, 4)), jnp.float32)
    labels = jnp.asarray([[1, IGNORE_INDEX, 2], [IGNORE_INDEX, IGNORE_INDEX, IGNORE_INDEX]])
    sums = token_classification_sums(logits, labels)
    assert float(sums["count"]) == 2.0
    log_probs = np.asarray(logits - jnp.log(jnp.exp(logits).sum(-1, keepdims=True)))
    expected = -(log_probs[0, 0, 1] + log_probs[0, 2, 2])  # the two labelled positions
    assert abs(float(sums["loss_sum"]) - expected) < 1e-5
    assert float(token_classification_loss(logits[1:], labels[1:])) == 0.0  # none labelled: not NaN


def _task_setup(task: str):
    """(model class, objective, a fixed 4-row batch, the task's own loss of a model on it). Rows
    0 and 2 make the first micro-batch of two, 1 and 3 the second; their labelled counts differ."""
    rng = np.random.default_rng(3)
    shape = (4, 3, 9) if task == "multiple-choice" else (4, 9)
    mask = np.ones(shape, np.int32)
    mask[1, ..., 6:] = 0
    mask[3, ..., 4:] = 0
    batch = {"input_ids": rng.integers(1, 99, shape).astype(np.int32),
             "token_type_ids": np.zeros(shape, np.int32), "attention_mask": mask}
    if task == "token-classification":
        labels = _labels(mask, seed=3)
        labels[2] = IGNORE_INDEX  # the first micro-batch keeps only row 0's labels
        labels[0, 1] = 2
        batch["labels"] = labels
        return BertForTokenClassification, TOKEN_CLASSIFICATION, batch, lambda m: (
            token_classification_loss(_logits(m, _inputs(batch)).logits, labels))
    if task == "question-answering":
        starts, ends = np.array([1, 2, 30, 0]), np.array([3, 9, 4, 2])  # one start, one end out
        batch |= {"start_positions": starts, "end_positions": ends}

        def qa_loss(m):
            out = _logits(m, _inputs(batch))
            return question_answering_loss(out.start_logits, out.end_logits, starts, ends)
        return BertForQuestionAnswering, QUESTION_ANSWERING, batch, qa_loss
    choice_mask = np.ones((4, 3), np.int32)
    choice_mask[1, 2] = 0  # a padding choice
    labels = np.array([2, 0, 1, 1])
    batch |= {"labels": labels, "choice_mask": choice_mask}
    return BertForMultipleChoice, MULTIPLE_CHOICE, batch, lambda m: classification_loss(
        masked_choice_logits(_logits(m, _inputs(batch)).logits, choice_mask), labels)


def _inputs(batch: dict) -> tuple:
    return batch["input_ids"], batch["token_type_ids"], batch["attention_mask"]


def _train(task: str, steps: int, accum: int = 1) -> tuple[list[dict], float]:
    """The metrics of `steps` assembled train steps on one fixed batch (no dropout, so micro-
    batching changes nothing but the split) and the task's loss of the fresh model."""
    cls, objective, batch, task_loss = _task_setup(task)
    config = BertConfig(vocab_size=99, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=48, max_position_embeddings=16,
                        hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                        id2label=("a", "b", "c"))
    model = cls(config, rngs=nnx.Rngs(0))
    fresh = float(task_loss(model))
    optim = OptimConfig(learning_rate=3e-3, warmup_steps=0, grad_accum_steps=accum)
    strategy = SingleDevice()
    training = assemble(model, optim, strategy, steps=100, seed=0, objective=objective)
    state = strategy.place_state(training.state)
    history = []
    for _ in range(steps):
        state, metrics = training.train_step(state, strategy.shard_batch(batch))
        history.append({k: float(v) for k, v in metrics.items()})
    return history, fresh


TASKS = ("token-classification", "question-answering", "multiple-choice")


@pytest.mark.parametrize("task", TASKS)
def test_an_assembled_train_step_lowers_the_task_loss(task):
    """The first step's logged loss is the task's loss of the fresh model (1e-6 relative); eight
    Adam steps on the one batch take it below 70% of that."""
    history, fresh = _train(task, steps=8)
    np.testing.assert_allclose(history[0]["loss"], fresh, rtol=1e-6)
    assert history[-1]["loss"] < 0.7 * history[0]["loss"], [h["loss"] for h in history]


@pytest.mark.parametrize("task", TASKS)
def test_micro_batches_give_the_whole_batch_loss_and_gradient(task):
    """Two micro-batches whose labelled counts differ: their summed sums over the global batch's
    counts give the same loss (1e-6 relative) and gradient norm (1e-5 relative) as one pass."""
    (whole,), _ = _train(task, steps=1)
    (split,), _ = _train(task, steps=1, accum=2)
    np.testing.assert_allclose(split["loss"], whole["loss"], rtol=1e-6)
    np.testing.assert_allclose(split["grad_norm"], whole["grad_norm"], rtol=1e-5)
