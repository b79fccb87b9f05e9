"""ModernBERT under `scan_layers`: its first layer (no attention norm) held as `layers.0` and the
others stacked (L - 1, ...) as `layers.from_1`, scanned with each layer global or local through a
`lax.cond`; the same numbers as the loop model, named per layer by conversion, optimizer and
checkpoints.

Tolerances: initialisation and conversion are exact (the same arrays); the forward and gradients
1e-5 absolute (XLA compiles the scanned layer as one program and the loop's ops one by one, so
float32 rounding may differ; a local layer run as global moves the outputs by 1e-1 here, rows of
16 tokens against a window of 3 on either side); an optimizer update from the same parameters and
gradients 1e-6.
"""

from __future__ import annotations

from pathlib import Path

import jax
import jax.extend.core
import jax.numpy as jnp
import numpy as np
import optax
import pytest
import torch
import transformers
from flax import nnx
from modernbert_fixtures import config, packed_rows

import bertjax
from bertjax import BertConfig, BertForMaskedLM, BertForSequenceClassification
from bertjax.cli.main import main
from bertjax.io.weights import (
    expected_shapes,
    model_from_numpy,
    model_to_numpy,
    state_to_numpy,
)
from bertjax.train.optim import OptimConfig, make_optimizer
from bertjax.train.saved import read_state

L = 5  # global, local, local, global, local: both kinds in the stack
LOOP = config(num_hidden_layers=L, hidden_dropout_prob=0.1, mlp_dropout=0.1,
              attention_probs_dropout_prob=0.1)
SCAN = LOOP.replace(scan_layers=True)
TOL = 1e-5


def _batch(seed: int = 0) -> tuple[jax.Array, jax.Array]:
    """Rows of 16 tokens (past the window of 3 on either side), the second padded after 11."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, LOOP.vocab_size, size=(2, 16)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[1, 11:] = 0
    ids[1, 11:] = 0
    return jnp.asarray(ids), jnp.asarray(mask)


def _close(a: jax.Array, b: jax.Array, what: str) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=0, atol=TOL, err_msg=what)


def test_scan_model_holds_the_first_layer_and_the_others_stacked_as_the_loop_made_them():
    loop, scan = BertForMaskedLM(LOOP, rngs=nnx.Rngs(0)), BertForMaskedLM(SCAN, rngs=nnx.Rngs(0))
    held = {p[0] for p, _ in nnx.to_flat_state(nnx.state(scan.bert.layers))}
    assert held == {"0", "from_1"}
    stacked = scan.bert.layers["from_1"].attn.wqkv.kernel[...]
    assert stacked.shape == (L - 1, 30, 90)  # (L - 1, H, 3 H)
    assert scan.bert.layers["0"].attn_norm is None
    ours, theirs = model_to_numpy(loop), model_to_numpy(scan)  # per-layer names, both
    assert set(ours) == set(theirs) == set(expected_shapes(LOOP, BertForMaskedLM))
    for name, value in ours.items():
        np.testing.assert_array_equal(theirs[name], value, err_msg=name)


def test_scan_forward_is_the_loops_with_windows_attentions_and_hidden_states():
    loop, scan = BertForMaskedLM(LOOP, rngs=nnx.Rngs(1)), BertForMaskedLM(SCAN, rngs=nnx.Rngs(1))
    ids, mask = _batch()
    a = loop(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    b = scan(ids, attention_mask=mask, output_attentions=True, output_hidden_states=True)
    _close(b.mlm_logits, a.mlm_logits, "mlm_logits")
    assert len(b.attentions) == L and len(b.hidden_states) == L + 1
    for i in range(L):
        _close(b.attentions[i], a.attentions[i], f"attentions.{i}")
        _close(b.hidden_states[i + 1], a.hidden_states[i + 1], f"hidden_states.{i + 1}")
    # the local layers attend within the window: nothing past 3 tokens away in layer 1 (row 0,
    # unpadded; a padded query of row 1 sees no key in its window and spreads evenly)
    far = np.abs(np.arange(16)[:, None] - np.arange(16)[None, :]) > LOOP.local_attention // 2
    assert np.all(np.asarray(b.attentions[1])[0][:, far] == 0)
    assert np.all(np.asarray(b.attentions[0])[0][:, far] > 0)  # the global ones do not


def test_scan_every_layer_global_is_not_the_loop():
    """The test above can fail: a scan whose stacked layers all ran global gives other logits."""
    loop = BertForMaskedLM(LOOP, rngs=nnx.Rngs(1))
    wrong = BertForMaskedLM(SCAN.replace(layer_types=("full_attention",) * L), rngs=nnx.Rngs(1))
    ids, mask = _batch()
    gap = np.abs(np.asarray(wrong(ids, attention_mask=mask).mlm_logits)
                 - np.asarray(loop(ids, attention_mask=mask).mlm_logits)).max()
    assert gap > 100 * TOL


def test_scan_branches_per_layer_under_cond_inside_one_scan():
    model = BertForMaskedLM(SCAN, rngs=nnx.Rngs(0))
    graphdef, state = nnx.split(model)
    ids, mask = _batch()
    program = jax.make_jaxpr(lambda s: nnx.merge(graphdef, s)(ids, attention_mask=mask))(state)

    def count(jaxpr: jax.extend.core.Jaxpr, name: str) -> int:
        return sum((e.primitive.name == name)
                   + sum(count(sub, name) for sub in jax.extend.core.jaxprs_in_params(e.params))
                   for e in jaxpr.eqns)

    assert count(program.jaxpr, "scan") == 1 and count(program.jaxpr, "cond") == 1


@pytest.mark.slow
@pytest.mark.parametrize("remat", [False, True])
def test_scan_training_gradients_with_dropout_are_the_loops(remat):
    """Dropout draws one key per layer, so the scan and the loop drop the same units."""
    ids, mask = _batch(1)
    positions = jnp.asarray([[1, 5, 9], [2, 4, 10]])

    def grads(config):
        model = BertForMaskedLM(config.replace(remat=remat), rngs=nnx.Rngs(2))

        def loss(m):
            out = m(ids, attention_mask=mask, masked_positions=positions, deterministic=False,
                    dropout_rng=jax.random.key(7))
            return jnp.square(out.mlm_logits).mean()

        value, g = nnx.value_and_grad(loss)(model)
        return value, model_to_numpy(nnx.merge(nnx.graphdef(model), g))

    (va, ga), (vb, gb) = grads(LOOP), grads(SCAN)
    _close(vb, va, "loss")
    assert set(ga) == set(gb)
    for name in ga:
        np.testing.assert_allclose(gb[name], ga[name], rtol=0,
                                   atol=TOL * max(1.0, np.abs(ga[name]).max()), err_msg=name)


def test_scan_packed_rows_and_mean_pooling_are_the_loops():
    c = dict(classifier_pooling="mean", id2label=("a", "b", "c"))
    loop = BertForSequenceClassification(LOOP.replace(**c), rngs=nnx.Rngs(3))
    scan = BertForSequenceClassification(SCAN.replace(**c), rngs=nnx.Rngs(3))
    ids, mask = _batch(2)
    packed = packed_rows(np.asarray(ids), np.asarray(mask), [[0], [1]], length=32)
    args = {k: jnp.asarray(packed[k]) for k in ("attention_mask", "sequence_ids", "cls_positions")}
    _close(scan(jnp.asarray(packed["input_ids"]), **args).logits,
           loop(jnp.asarray(packed["input_ids"]), **args).logits, "packed logits")


def test_scan_on_the_fused_path_keeps_the_window():
    """`attn_implementation="fused"`: each local layer hands its window to
    `jax.nn.dot_product_attention` inside its branch; the exact loop's numbers."""
    loop = BertForMaskedLM(LOOP, rngs=nnx.Rngs(4))
    fused = BertForMaskedLM(SCAN.replace(attn_implementation="fused",
                                         attention_probs_dropout_prob=0.0), rngs=nnx.Rngs(4))
    ids, mask = _batch(3)
    _close(fused(ids, attention_mask=mask).mlm_logits, loop(ids, attention_mask=mask).mlm_logits,
           "fused scan vs exact loop")


def test_scan_conversion_round_trip_and_optimizer_update_are_the_loops():
    loop = BertForMaskedLM(LOOP, rngs=nnx.Rngs(5))
    arrays = model_to_numpy(loop)
    scan = model_from_numpy(arrays, SCAN, BertForMaskedLM)
    back = model_to_numpy(scan)
    for name in arrays:
        np.testing.assert_array_equal(back[name], arrays[name], err_msg=name)

    rng = np.random.default_rng(0)
    grads = {k: rng.normal(size=v.shape).astype(np.float32) for k, v in arrays.items()}
    tx = make_optimizer(OptimConfig(optimizer="lamb", learning_rate=1e-2, weight_decay=0.5), 10)
    after = []
    for c in (LOOP, SCAN):  # LAMB's trust ratio and the decay mask per layer, stacked or not
        p = nnx.state(model_from_numpy(arrays, c, BertForMaskedLM), nnx.Param)
        g = nnx.state(model_from_numpy(grads, c, BertForMaskedLM), nnx.Param)
        updates, _ = tx.update(g, tx.init(p), p)
        after.append(state_to_numpy(optax.apply_updates(p, updates)))
    for name in after[0]:
        np.testing.assert_allclose(after[1][name], after[0][name], rtol=0, atol=1e-6,
                                   err_msg=name)


@pytest.mark.slow
def test_a_scan_run_checkpoints_loads_per_layer_and_converts(tmp_path: Path, capsys) -> None:
    """`bertjax pretrain --model.model-type modernbert --model.scan-layers`: the checkpoint holds
    `layers.0` and the stacked `layers.from_1`, loads back as a scan or a loop model with the same
    logits, and converts to a directory transformers loads with them (1e-5)."""
    run, hf_dir = tmp_path / "run", tmp_path / "hf"
    assert main(["pretrain", "--output-dir", str(run), "--no-progress",
                 "--model.model-type=modernbert", "--model.preset=tiny", "--model.scan-layers",
                 "--data.vocab-size=300", "--data.seq-len=32", "--data.batch-size=4",
                 "--data.eval-batches=1", "--train.steps=4", "--train.eval-every=4",
                 "--train.log-every=2"]) == 0
    _, saved = read_state(run / "checkpoints")
    layers = saved["params"]["bert"]["layers"]
    assert set(layers) == {"0", "from_1"}
    tiny = BertConfig.from_preset("tiny", model_type="modernbert")
    assert layers["from_1"]["attn"]["wqkv"]["kernel"]["value"].shape[0] == (
        tiny.num_hidden_layers - 1)
    scan, _ = bertjax.from_pretrained(run)
    loop, _ = bertjax.from_pretrained(run, scan_layers=False)
    assert scan.config.scan_layers and not loop.config.scan_layers
    ids = jnp.asarray(np.arange(3, 43, dtype=np.int32).reshape(1, 40))  # past the window
    ours = np.asarray(scan(ids).mlm_logits[0])
    np.testing.assert_allclose(np.asarray(loop(ids).mlm_logits[0]), ours, rtol=0, atol=TOL)
    assert main(["convert", str(run), str(hf_dir)]) == 0
    assert "loads it as ModernBertForMaskedLM" in capsys.readouterr().out
    hf = transformers.AutoModelForMaskedLM.from_pretrained(hf_dir).eval()
    with torch.no_grad():
        theirs = hf(torch.tensor(np.asarray(ids))).logits[0].numpy()
    np.testing.assert_allclose(ours, theirs, rtol=0, atol=TOL)
