"""Bad inputs get clear errors in both frameworks, never silent garbage."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from flax import nnx

import bert_torch
from bertjax import BertConfig, BertForPreTraining
from bertjax.inputs import check_batch

CONFIG = BertConfig.from_preset("tiny", max_position_embeddings=16, vocab_size=50)


@pytest.fixture(scope="module")
def models():
    return BertForPreTraining(CONFIG, rngs=nnx.Rngs(0)), bert_torch.BertForPreTraining(CONFIG)


def _both(models, *args, **kwargs):
    fmodel, tmodel = models
    yield lambda: fmodel(*[None if a is None else jnp.asarray(a) for a in args], **kwargs)
    yield lambda: tmodel(*[None if a is None else torch.from_numpy(np.asarray(a)) for a in args],
                         **kwargs)


def test_sequence_longer_than_positions(models):
    ids = np.ones((1, 17), np.int32)
    for call in _both(models, ids):
        with pytest.raises(ValueError, match=r"seq_len 17 > max_position_embeddings \(16\)"):
            call()


def test_ids_outside_vocabulary(models):
    ids = np.array([[1, 2, 50, 3]], np.int32)
    for call in _both(models, ids):
        with pytest.raises(ValueError, match=r"input_ids has values outside \[0, vocab_size=50\)"
                                             r": e\.g\. \[50\]"):
            call()
    for call in _both(models, -ids):
        with pytest.raises(ValueError, match="input_ids has values outside"):
            call()


def test_token_types_outside_type_vocab(models):
    ids = np.ones((1, 4), np.int32)
    types = np.array([[0, 1, 2, 0]], np.int32)
    for call in _both(models, ids, types):
        with pytest.raises(ValueError, match=r"token_type_ids has values outside \[0, "
                                             r"type_vocab_size=2\)"):
            call()


def test_float_ids_are_refused(models):
    for call in _both(models, np.ones((1, 4), np.float32)):
        with pytest.raises(ValueError, match="input_ids must be integers, got dtype float32"):
            call()


def test_shape_errors(models):
    for call in _both(models, np.ones((4,), np.int32)):
        with pytest.raises(ValueError, match=r"input_ids must have shape \(batch, seq_len\)"):
            call()
    ids = np.ones((2, 4), np.int32)
    for call in _both(models, ids, None, np.ones((2, 5), np.int32)):
        with pytest.raises(ValueError, match=r"attention_mask must have the shape of input_ids"):
            call()
    for call in _both(models, ids, None, None, np.zeros((3, 2), np.int32)):
        with pytest.raises(ValueError, match=r"masked_positions must have shape \(batch=2"):
            call()
    for call in _both(models, ids, None, None, np.full((2, 2), 4, np.int32)):
        with pytest.raises(ValueError, match=r"masked_positions has values outside \[0, "
                                             r"seq_len=4\)"):
            call()


def test_inside_jit_check_batch_catches_what_tracing_cannot(models):
    fmodel, _ = models
    graphdef, state = nnx.split(fmodel)

    @jax.jit
    def forward(state, ids):
        return nnx.merge(graphdef, state)(ids).mlm_logits

    bad = np.array([[1, 99]], np.int32)
    forward(state, jnp.asarray(bad))  # jit cannot see values: an embedding lookup clamps
    with pytest.raises(ValueError, match="input_ids has values outside"):
        check_batch(CONFIG, {"input_ids": bad})
    with pytest.raises(ValueError, match="seq_len 17"):
        forward(state, jnp.ones((1, 17), jnp.int32))  # shapes are checked even under jit
