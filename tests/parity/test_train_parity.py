"""Optax training against its PyTorch mirror (`bert_torch.train`): parameters after one AdamW
update, losses over 20 updates (and over 8 on the warm-up-stable-decay schedule), both
learning-rate schedules and the weight-decay selection.

All runs: tiny preset, same initial weights (seed 0), real Shakespeare batches (padded rows,
empty prediction slots, both NSP labels), float32, no dropout, highest matmul precision. Each
number is judged by the parity rule (`parity.noise`): within max(its tolerance, 3 x the float32
PyTorch run's own distance from its float64 run).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch
from flax import nnx

from bert_torch import BertForPreTraining as TorchBertForPreTraining
from bert_torch.train import decay_parameter_names
from bert_torch.train import make_optimizer as torch_optimizer
from bertjax.config import BertConfig
from bertjax.heads import BertForPreTraining
from bertjax.io.names import torch_name
from bertjax.train.optim import OptimConfig, decay_mask, learning_rate_schedule
from bertjax.train.schedule import learning_rate_factor
from parity.noise import bar
from parity.training import (
    LOSS_TOLERANCE,
    PARAM_TOLERANCE,
    TrainParityReport,
    shakespeare_batches,
    train_parity,
)

TINY = BertConfig.from_preset("tiny")
STEPS = 20
CLIP = 0.5  # the tiny model's gradient norm is ~2-3 on these batches: every update is clipped
PARAM_TOL = 1e-6  # max abs diff of every parameter after one update
LOSS_TOL = 1e-4  # max abs diff of the MLM+NSP loss at each of 20 updates
PARAM_TOL_20 = 1e-5  # max abs diff of every parameter after 20 updates
# Gradient norm before clipping, relative: torch's float32 norm of the 1024x128 word-embedding
# gradient is ~1.3e-5 off its float64 value (the global norm ~6e-6 off); XLA's is ~1e-7 off.
GRAD_NORM_RTOL = 2e-5


def _within(ours, ref32, ref64, tolerance: float, relative: bool = False) -> bool:
    """The parity rule on scalars or arrays of them (one judgement each)."""
    ours, ref32, ref64 = (np.asarray(x, np.float64) for x in (ours, ref32, ref64))
    scale = np.abs(ref32) if relative else 1.0
    return bool(np.all(np.abs(ours - ref32) / scale
                       <= np.vectorize(bar)(tolerance, np.abs(ref32 - ref64) / scale)))


def _params_within(diff: dict[str, float], noise: dict[str, float], tolerance: float) -> list:
    """The parameters whose difference is past the rule's bar (none when all pass)."""
    return [(n, d, noise[n]) for n, d in diff.items() if d > bar(tolerance, noise[n])]


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """PyTorch's CPU thread pool spins: sharing two busy cores it runs a tiny step 30x slower."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def batches() -> list[dict[str, np.ndarray]]:
    return shakespeare_batches(STEPS, vocab_size=TINY.vocab_size, batch_size=8, seq_len=64,
                               max_predictions=10, seed=0)


def test_batches_cover_padding_empty_slots_and_both_labels(batches):
    lengths = np.concatenate([b["attention_mask"].sum(1) for b in batches])
    weights = np.concatenate([b["masked_weights"] for b in batches])
    labels = np.concatenate([b["next_sentence_label"] for b in batches])
    assert lengths.min() < 64 == lengths.max() and len(np.unique(lengths)) > 10
    assert 0 < np.mean(weights == 0) < 0.5
    assert set(labels.tolist()) == {0, 1}


@pytest.mark.slow
def test_one_adamw_step_gives_the_same_parameters(batches):
    # No warm-up, so the first update has the full rate. Adam turns a gradient g into
    # lr * g / (|g| + eps): where |g| is near eps (1e-6) it magnifies the float32 round-off of g by
    # lr / eps, so the bound on parameters scales with lr. At BERT's peak rate of 1e-4 the worst
    # parameter is ~1.2e-7 off (at 1e-3, ~1.2e-6: mlm_head.transform.weight, gradient 3e-7).
    optim = OptimConfig(learning_rate=1e-4, warmup_steps=0, clip_norm=CLIP)
    report = train_parity(TINY, optim, batches=batches[:1], total_steps=STEPS)
    assert report.grad_norms[0, 1] > 2 * CLIP  # the clip engages
    assert _within(report.grad_norms[0, 0], report.grad_norms[0, 1], report.grad_norms64[0],
                   GRAD_NORM_RTOL, relative=True)
    assert np.allclose(report.learning_rates[0], 1e-4, rtol=1e-6, atol=0)
    assert abs(report.losses[0, 0] - report.losses[0, 1]) <= bar(1e-6, report.loss_noise[0])
    assert len(report.first_step_diff) == len(list(TorchBertForPreTraining(TINY).parameters()))
    assert not _params_within(report.first_step_diff, report.first_step_noise, PARAM_TOL)


@pytest.mark.slow
def test_twenty_steps_with_warmup_decay_and_clipping_give_the_same_losses(batches):
    # 5 warm-up updates (the first at rate 0), linear decay towards 0 at step 20, every update
    # clipped (gradient norms ~2-3 against a clip of 0.5), weight decay 0.01.
    optim = OptimConfig(learning_rate=1e-3, warmup_steps=5, clip_norm=CLIP)
    report = train_parity(TINY, optim, batches=batches, total_steps=STEPS)
    rates = report.learning_rates[:, 1]
    assert rates[0] == 0 and np.argmax(rates) == 5 and rates[-1] > 0  # warm-up, then decay
    assert np.allclose(report.learning_rates[:, 0], rates, rtol=1e-6, atol=0)
    assert np.all(report.grad_norms > CLIP)  # every update clipped, on both sides
    assert _within(report.grad_norms[:, 0], report.grad_norms[:, 1], report.grad_norms64,
                   GRAD_NORM_RTOL, relative=True)
    assert report.losses[-1, 1] < report.losses[0, 1] - 0.2  # the model does learn
    assert report.losses_passed and LOSS_TOLERANCE == LOSS_TOL, report.losses
    assert not _params_within(report.last_step_diff, report.last_step_noise, PARAM_TOL_20)
    assert report.passed, report.format()


@pytest.mark.slow
def test_eight_steps_of_wsd_give_the_same_losses_and_rates(batches):
    # warm-up over 2 updates, the peak, the last half decaying (1-sqrt), every update clipped
    optim = OptimConfig(learning_rate=1e-3, warmup_steps=2, schedule="wsd", decay_fraction=0.5,
                        clip_norm=CLIP)
    report = train_parity(TINY, optim, batches=batches[:8], total_steps=8)
    rates = report.learning_rates[:, 1]
    assert rates[0] == 0 and rates[2] == rates[3] == rates[4] == 1e-3 > rates[5] > rates[7] > 0
    assert np.allclose(report.learning_rates[:, 0], rates, rtol=1e-6, atol=0)
    assert report.losses_passed, report.losses
    assert not _params_within(report.last_step_diff, report.last_step_noise, PARAM_TOL_20)
    assert report.passed, report.format()


@pytest.mark.parametrize("warmup,total,decay", [
    (5, 20, None), (0, 7, None), (3, 4, None),  # linear
    (5, 20, 0.2), (0, 7, 0.5), (3, 4, 1.0)])  # wsd: the last decay of the updates, 1-sqrt
def test_schedule_formula_optax_and_lambdalr_agree_at_every_step(warmup, total, decay):
    optim = OptimConfig(learning_rate=1e-3, warmup_steps=warmup, decay_fraction=decay,
                        schedule="linear" if decay is None else "wsd")
    optax_schedule = learning_rate_schedule(optim, total)
    optimizer, scheduler = torch_optimizer(torch.nn.Linear(2, 2), optim, total)
    for step in range(total + 3):  # past the end too: the rate stays 0
        formula = optim.learning_rate * learning_rate_factor(optim, step, total)
        assert float(optax_schedule(step)) == pytest.approx(formula, rel=1e-6, abs=1e-12)
        assert scheduler.get_last_lr()[0] == pytest.approx(formula, rel=1e-12, abs=0)
        assert optimizer.param_groups[0]["lr"] == scheduler.get_last_lr()[0]
        optimizer.step()  # no gradients: changes nothing, keeps the call order torch expects
        scheduler.step()


def test_decay_masks_select_the_same_parameters():
    model = BertForPreTraining(TINY, rngs=nnx.Rngs(0))
    mask = decay_mask(nnx.state(model, nnx.Param))
    flax_decay = {torch_name(path)[0]: bool(v.get_value()) for path, v in nnx.to_flat_state(mask)}

    torch_model = TorchBertForPreTraining(TINY)
    decay, no_decay = decay_parameter_names(torch_model)
    assert set(flax_decay) == {n for n, _ in torch_model.named_parameters()}
    assert {n for n, d in flax_decay.items() if d} == set(decay)
    assert {n for n, d in flax_decay.items() if not d} == set(no_decay)
    # what the rule means: LayerNorm weights and every bias, the MLM output bias included
    assert {"mlm_head.bias", "bert.layers.1.output_norm.weight", "nsp_head.bias"} <= set(no_decay)
    assert {"bert.embeddings.word_embeddings.weight", "bert.layers.0.attention.query.weight",
            "nsp_head.weight"} <= set(decay)

    optimizer, _ = torch_optimizer(torch_model, OptimConfig(weight_decay=0.01), 10)
    params = dict(torch_model.named_parameters())
    groups = [({id(p) for p in g["params"]}, g["weight_decay"]) for g in optimizer.param_groups]
    assert groups == [({id(params[n]) for n in decay}, 0.01), ({id(params[n]) for n in no_decay}, 0.0)]


def test_torch_training_mirror_imports_no_jax():
    import subprocess
    import sys

    code = ("import sys, bert_torch.train; "
            "bad = [m for m in ('jax', 'flax', 'optax') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_report_fails_on_a_parameter_difference_alone():
    """`passed` judges the parameters as well as the losses."""
    steps = np.zeros((3, 2))
    good = TrainParityReport(losses=steps, grad_norms=steps, learning_rates=steps,
                             first_step_diff={"w": 1e-7}, last_step_diff={"w": 2e-7})
    assert good.passed and "ok" in good.format().splitlines()[-1]
    drifted = dataclasses.replace(good, last_step_diff={"w": 10 * PARAM_TOLERANCE})
    assert not drifted.passed and "FAIL" in drifted.format().splitlines()[-1]
    assert not dataclasses.replace(good, losses=steps + [[0.0, 2 * LOSS_TOLERANCE]]).passed
