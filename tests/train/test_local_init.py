"""Local-attention initialisation (bertjax.train.local_init): where the chosen heads look at
step 0, what it leaves alone, the loop and scan models alike, and that it buys what it is for (a
model that reads its neighbour learns to, where BERT's random init has not yet)."""

from __future__ import annotations

import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from bertjax import BertConfig, BertForPreTraining
from bertjax.common.options import build
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.local_init import OFFSETS, frequencies, local_attention_init
from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
from bertjax.train.step import create_train_state, make_train_step

VOCAB, SEQ = 64, 32


def _model(layers: int | None = 1, scan: bool = False, preset: str = "mini") -> BertForPreTraining:
    config = BertConfig.from_preset(preset, vocab_size=VOCAB, scan_layers=scan)
    model = BertForPreTraining(config, rngs=nnx.Rngs(0))
    if layers:
        local_attention_init(model, layers=layers)
    return model


def _attention(model: BertForPreTraining, seq: int = 128) -> np.ndarray:
    ids = jnp.asarray(np.random.default_rng(0).integers(5, VOCAB, (2, seq)), jnp.int32)
    out = model(ids, jnp.zeros_like(ids), jnp.ones_like(ids), output_attentions=True)
    return np.stack([np.asarray(p) for p in out.attentions])  # (L, B, A, S, S)


@pytest.mark.slow
def test_chosen_layers_attend_to_their_offsets_and_the_others_do_not() -> None:
    probs = _attention(_model(layers=2))
    i = np.arange(8, 120)  # queries whose every offset is inside the sequence
    for layer in range(4):
        for head, offset in enumerate(OFFSETS):
            on_target = probs[layer][:, head, i, i + offset].mean()
            if layer < 2:
                assert on_target > 0.8, (layer, head, on_target)  # designed: about 0.85
            else:
                assert on_target < 0.05, (layer, head, on_target)  # uniform: 1/128


def test_only_the_documented_weights_change() -> None:
    before = nnx.state(_model(layers=None), nnx.Param)
    after = nnx.state(_model(layers=1), nnx.Param)
    changed = {jax.tree_util.keystr(path) for (path, a), (_, b) in zip(
        jax.tree_util.tree_flatten_with_path(before)[0],
        jax.tree_util.tree_flatten_with_path(after)[0], strict=True)
        if a.shape != b.shape or not np.array_equal(a, b)}
    layer0 = "['bert']['layers'][0]['attention']"
    assert changed == {
        "['bert']['embeddings']['word_embeddings']['embedding'].value",
        "['bert']['embeddings']['position_embeddings']['embedding'].value",
        "['bert']['embeddings']['token_type_embeddings']['embedding'].value",
        *(f"{layer0}['{name}']['kernel'].value" for name in ("query", "key")),
    }  # the query and key biases are set to zero, which BERT's init already has


def test_scan_and_loop_models_start_the_same() -> None:
    loop = _attention(_model(layers=3))
    scan = _attention(_model(layers=3, scan=True))
    np.testing.assert_allclose(scan, loop, atol=1e-6)  # float32 sums in another order


def test_frequencies_single_out_one_offset() -> None:
    kernel = np.cos(np.outer(np.arange(1, 512), frequencies(32))).mean(axis=1)  # 1 at offset 0
    assert kernel[:127].max() < 0.25, kernel[:127].max()  # 0.218, the keys beside the target
    assert kernel.max() < 0.35, kernel.max()  # 0.297, 450 positions away


def test_bad_layer_counts_name_the_option() -> None:
    with pytest.raises(ValueError, match=r"in \[1, 4\]"):
        local_attention_init(_model(layers=None), layers=5)
    with pytest.raises(ValueError, match=r"model.local_attention_layers must be an integer >= 0, "
                                         r"got -1"):
        rc.RunConfig.from_dict({"model": {"local_attention_layers": -1}})


def _copy_task_batch(rng: np.random.Generator, batch: int = 16) -> dict[str, np.ndarray]:
    """Each odd position repeats the token before it; the odd positions are masked: the answer is
    the left neighbour, which no context-free predictor knows (1 in 59)."""
    ids = rng.integers(5, VOCAB, (batch, SEQ))
    ids[:, 1::2] = ids[:, 0::2]
    positions = np.tile(np.arange(1, SEQ, 2), (batch, 1))  # (B, S/2)
    targets = np.take_along_axis(ids, positions, axis=1)
    masked = ids.copy()
    np.put_along_axis(masked, positions, 3, axis=1)  # [MASK] is any fixed id here
    return {"input_ids": masked.astype(np.int32), "token_type_ids": np.zeros_like(masked, np.int32),
            "attention_mask": np.ones_like(masked, np.int32),
            "masked_positions": positions.astype(np.int32), "masked_ids": targets.astype(np.int32),
            "masked_weights": np.ones(positions.shape, np.float32),
            "next_sentence_label": np.zeros(batch, np.int32)}


def _copy_task_accuracy(layers: int | None, steps: int = 150) -> float:
    oc = OptimConfig(learning_rate=1e-3, warmup_steps=10)
    tx = make_optimizer(oc, steps)
    graphdef, state = create_train_state(_model(layers, preset="tiny"), tx, seed=0)
    step = jax.jit(make_train_step(graphdef, tx, learning_rate_schedule(oc, steps)))
    rng = np.random.default_rng(0)
    accuracy = []
    for _ in range(steps):
        state, metrics = step(state, _copy_task_batch(rng))
        accuracy.append(float(metrics["mlm_accuracy"]))
    return float(np.mean(accuracy[-20:]))


@pytest.mark.slow
def test_local_init_learns_to_read_a_neighbour_that_random_init_has_not_yet() -> None:
    local, random = _copy_task_accuracy(1), _copy_task_accuracy(None)
    assert local > 0.6, local  # measured 0.90 (0.016 with the heads looking at offset 0)
    assert random < 0.1, random  # measured 0.016: chance is 1 in 59


def test_a_run_saved_before_the_option_resumes_as_it_was_made(tmp_path) -> None:
    """A run_config.json without `model.local_attention_layers` (written before it existed) was
    made with BERT's init: it reads as 0, so a bare --resume equals it, and the new default is
    named as a difference rather than taken silently."""
    saved = rc.RunConfig().to_dict()
    del saved["model"]["local_attention_layers"]
    run = RunDir(tmp_path)
    run.config.write_text(json.dumps(saved))
    loaded = run.saved_config()
    assert loaded["model"]["local_attention_layers"] == 0
    assert rc.differences(loaded, rc.RunConfig.from_dict(loaded)) == []
    assert rc.differences(loaded, rc.RunConfig()) == [
        "model.local_attention_layers: saved 0, requested 4"]


@pytest.mark.parametrize("preset", ["tiny", "small", "base"])
def test_presets_other_than_mini_get_berts_init_unless_asked(preset: str) -> None:
    """The local-attention init is the mini recipe's: another preset, whether set on a default
    configuration or in a file, starts from BERT's initialisation; asking for it still works."""
    assert rc.RunConfig().to_dict()["model"]["local_attention_layers"] == 4  # the default recipe
    other = build(rc.RunConfig, {"model.preset": preset}, base=rc.RunConfig())
    assert other.model.local_layers == 0
    assert other.to_dict()["model"]["local_attention_layers"] == 0
    assert rc.RunConfig.from_dict({"model": {"preset": preset}}).model.local_layers == 0
    asked = build(rc.RunConfig, {"model.local_attention_layers": "2"}, base=other)
    assert asked.model.local_layers == 2 and asked.to_dict()["model"]["local_attention_layers"] == 2
    back = build(rc.RunConfig, {"model.preset": "mini"}, base=asked)  # an explicit value stays
    assert back.model.local_layers == 2


def test_the_pretraining_job_initialises_as_its_configuration_resolves(monkeypatch) -> None:
    """`_set_up` calls the local init exactly when the resolved option asks for it."""
    from bertjax.jobs.pretrain import job

    calls = []
    monkeypatch.setattr(job, "local_attention_init", lambda model, layers: calls.append(layers))
    for preset, expected in (("tiny", []), ("mini", [4])):
        calls.clear()
        config = build(rc.RunConfig, {"model.preset": preset}, base=rc.RunConfig())
        job.initialise_model(config, vocab_size=64)
        assert calls == expected, preset
