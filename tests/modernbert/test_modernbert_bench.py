"""The benchmarks on a ModernBERT: `bertjax bench train|infer --set model_type=modernbert` runs a
ModernBERT in every row (transformers' `ModernBertForMaskedLM`, the MLM loss alone on every
side, counted the same way), ModernBERT's FLOP formula against the jaxpr's matmuls,
`bertjax bench embed` beside transformers' `ModernBertModel`, and `bertjax parity --hf` on a
ModernBERT checkpoint. Tiny sizes: no test asserts a speed."""

from __future__ import annotations

import contextlib
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from bench_helpers import ROW_FIELDS, dot_flops
from flax import nnx
from hub_helpers import add_to_cache
from modernbert_fixtures import directory

import bertjax
from bertjax.attention import window_block
from bertjax.bench import jax_rows, torch_rows
from bertjax.bench.batch import MODEL_KEYS, pretraining_batch
from bertjax.bench.flops import model_flops_per_token, window_pairs
from bertjax.bench.timing import RowSpec
from bertjax.cli.main import main
from bertjax.config import BertConfig
from bertjax.heads import BertForMaskedLM
from bertjax.io.hf import read_hf_tensors
from bertjax.io.weights import save_model
from bertjax.train.objectives import MASKED_LM
from bertjax.train.parallel import SingleDevice
from bertjax.train.schedule import OptimConfig

# the tiny preset as a ModernBERT: two layers (global, then local), a window of 2 on either side
MODERNBERT = ["--set", "model_type=modernbert", "--set", "local_attention=4"]
TINY = ["--preset", "tiny", "--seq", "16", "--batch", "2", "--steps", "1", "--warmup", "0",
        "--gemm-size", "64", "--threads", "1", *MODERNBERT]
LOCAL = ("full_attention", "sliding_attention", "sliding_attention")
ALL_BIASES = dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True,
                  decoder_bias=False)


def tiny_config(**overrides: object) -> BertConfig:
    """What `bench` builds from TINY (and `overrides`), at dropout 0."""
    return BertConfig.from_preset("tiny", model_type="modernbert", local_attention=4,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  **overrides)


# --- model FLOPs ------------------------------------------------------------------------------


def test_window_pairs_count_the_band() -> None:
    """The (query, key) pairs at most `window` apart, against the band counted cell by cell."""
    for S in (1, 2, 5, 16, 33):
        for window in (None, 0, 1, 3, 8, 40):
            rows = np.arange(S)
            band = np.abs(rows[:, None] - rows[None, :]) <= (S if window is None else window)
            assert window_pairs(S, window) == int(band.sum()), (S, window)


def test_modernbert_base_flops_by_hand() -> None:
    """ModernBERT-base's shape (22 layers, every third global, a window of 64 on either side),
    seq 512, 77 predictions, written out per token: 2 x (4 H^2 + 3 H I) per layer, every layer
    whole; attention 4 H S on the 8 global layers and 4 H x pairs / S on the 14 local ones; the
    MLM head 2 (H^2 + H V) x 77/512; no pooler and no NSP."""
    config = BertConfig(model_type="modernbert", vocab_size=50368, hidden_size=768,
                        num_hidden_layers=22, num_attention_heads=12, intermediate_size=1152,
                        max_position_embeddings=8192, type_vocab_size=1)
    assert config.attention_windows.count(None) == 8 and config.attention_windows.count(64) == 14
    H, S = 768, 512
    pairs = 512 + 2 * sum(512 - d for d in range(1, 65))  # |i - j| <= 64
    assert pairs == 512 * 129 - 64 * 65
    forward = (22 * 2 * (4 * H * H + 3 * H * 1152) + 8 * 4 * H * S + 14 * 4 * H * pairs / S
               + 2 * (H * H + H * 50368) * 77 / S)
    assert model_flops_per_token(config, S, 77, training=False) == pytest.approx(forward, rel=1e-12)
    assert model_flops_per_token(config, S, 77, training=True) == pytest.approx(3 * forward,
                                                                               rel=1e-12)
    # a window covering the sequence: every layer attends as a global one
    wide = config.replace(local_attention=2 * S)
    assert model_flops_per_token(wide, S, 77, training=False) == pytest.approx(
        forward + 14 * 4 * H * (S - pairs / S), rel=1e-12)


def _computed_pairs(seq: int, window: int | None) -> int:
    """The (query, key) scores bertjax's exact path computes for one sequence and head: the
    whole S x S, or a local layer's blocks against the keys their window reaches."""
    block = None if window is None else window_block(seq, window)
    return seq * seq if block is None else seq * (block + 2 * window)


def _tiny_masked_lm(seq: int, batch: int, predictions: int, **overrides: object):
    config = tiny_config(num_hidden_layers=3, layer_types=LOCAL, **overrides)
    graphdef, params = nnx.split(BertForMaskedLM(config, rngs=nnx.Rngs(0)), nnx.Param)
    data = {k: jnp.asarray(v) for k, v in pretraining_batch(config, batch, seq, predictions).items()
            if k in MODEL_KEYS and k != "next_sentence_label"}

    def forward(params):
        out = nnx.merge(graphdef, params)(data["input_ids"], None, data["attention_mask"],
                                          data["masked_positions"])
        return out.mlm_logits

    def loss(params):  # the bench's objective (`bertjax.bench.jax_rows`)
        sums = MASKED_LM.forward_sums(nnx.merge(graphdef, params), data, None)
        return MASKED_LM.loss(sums, MASKED_LM.counts(data))

    return config, params, forward, loss


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, ALL_BIASES], ids=["defaults", "every-bias"])
@pytest.mark.parametrize(("seq", "batch", "predictions"), [(16, 4, 2), (24, 2, 5)])
def test_flop_formula_counts_every_matmul_of_a_modernbert(seq, batch, predictions,
                                                          overrides) -> None:
    """The formula against the matmul FLOPs of bertjax's ModernBERT masked LM (its jaxpr),
    forward and forward + backward. Allowed slack, each term exact: the scores bertjax computes
    outside a local layer's window and masks (its blocks of queries against the keys their
    window reaches, `attention.windowed_attention`, fewer than the whole S x S; the formula
    counts the window's pairs), three times in training; and in the backward the
    ones-vector matmuls of `numerics.add_broadcast` / `scale_broadcast`: the decoder bias's
    gradient (2 V per prediction, when `decoder_bias`) and every LayerNorm's scale (and bias,
    with `norm_bias`) gradient, 2 H (4 H) per row it normalises: every token in the embeddings,
    each layer's two norms but the first layer's attention norm, and the final norm; the MLM
    head's norm at the predictions."""
    config, params, forward, loss = _tiny_masked_lm(seq, batch, predictions, **overrides)
    tokens, H, L, V = batch * seq, config.hidden_size, config.num_hidden_layers, config.vocab_size
    assert config.attention_windows == (None, 2, 2)
    outside_window = sum(4 * H * batch * (_computed_pairs(seq, w) - window_pairs(seq, w))
                         for w in config.attention_windows)
    assert outside_window < 4 * H * batch * sum(seq * seq - window_pairs(seq, w)
                                                for w in config.attention_windows)
    normalised_rows = tokens * (2 * L + 1) + batch * predictions
    ones_gradients = ((2 * batch * predictions * V if config.decoder_bias else 0)
                      + (4 if config.norm_bias else 2) * H * normalised_rows)
    counted_forward = dot_flops(jax.make_jaxpr(forward)(params).jaxpr)
    counted_training = dot_flops(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
    formula_forward = model_flops_per_token(config, seq, predictions, training=False) * tokens
    formula_training = model_flops_per_token(config, seq, predictions, training=True) * tokens
    assert counted_forward - formula_forward == outside_window
    assert counted_training - formula_training == 3 * outside_window + ones_gradients
    assert formula_training == 3 * formula_forward


# --- the rows count the same loss -------------------------------------------------------------


def _spec(impl: str, mode: str, config: BertConfig) -> RowSpec:
    return RowSpec(cores=(), threads=1, impl=impl, mode=mode, dtype="float32", config=config,
                   seq=16, batch=3, predictions=3, steps=1, warmup=0, seed=0, optim=OptimConfig(),
                   compile_backend="eager", prng_impl="threefry2x32", device="cpu")


@pytest.mark.slow
@pytest.mark.parametrize("overrides", [{}, ALL_BIASES], ids=["defaults", "every-bias"])
def test_transformers_row_is_modernbert_with_bertjax_loss(tmp_path, monkeypatch,
                                                          overrides) -> None:
    """The transformers row's model is a `ModernBertForMaskedLM` whose weights are a bertjax
    ModernBERT's, name for name and shape for shape (`load_state_dict`); given the same weights
    and batch, its training step's loss (transformers' own, from `labels`) is bertjax's training
    row's (the MLM loss over the masked positions), and its inference logits at the masked
    positions are bertjax's."""
    config = tiny_config(**overrides)
    save_model(BertForMaskedLM(config, rngs=nnx.Rngs(1)), tmp_path / "hf")
    weights = {k: torch.from_numpy(v) for k, v in read_hf_tensors(tmp_path / "hf").items()}
    built = torch_rows._transformers_model

    def with_bertjax_weights(config: BertConfig, device: torch.device):
        hf = built(config, device)
        missing, unexpected = hf.load_state_dict(weights, strict=False)
        assert set(missing) <= {"decoder.weight"} and not unexpected, (missing, unexpected)
        return hf

    monkeypatch.setattr(torch_rows, "_transformers_model", with_bertjax_weights)
    losses, logits = {}, {}
    for mode in ("train", "infer"):
        spec = _spec("hf-eager", mode, config)
        batch = torch_rows._torch_batch(spec, torch.device("cpu"))
        hf, step = torch_rows._transformers_step(spec, batch, torch.device("cpu"),
                                                 contextlib.nullcontext)
        assert type(hf).__name__ == "ModernBertForMaskedLM"
        assert hf.config.sparse_prediction  # at the labelled positions, as bertjax
        theirs = step()
        if mode == "train":
            losses["hf"] = float(theirs)
        else:
            positions = batch["masked_positions"].long()[:, :, None].expand(-1, -1, theirs.shape[-1])
            logits["hf"] = torch.gather(theirs, 1, positions).numpy()

        strategy = SingleDevice()
        host = pretraining_batch(config, spec.batch, spec.seq, spec.predictions, spec.seed)
        ours_batch = strategy.shard_batch({k: host[k] for k in MODEL_KEYS[:-1]})
        build = jax_rows._training_step if mode == "train" else jax_rows._inference_step
        with jax.default_matmul_precision("highest"):
            # the same weights again (the training step donates the model's arrays)
            out = build(spec, BertForMaskedLM(config, rngs=nnx.Rngs(1)), strategy, ours_batch)()
        if mode == "train":
            losses["bertjax"] = float(out["loss"])
        else:
            assert out[1] is None  # no next-sentence head
            logits["bertjax"] = np.asarray(out[0])
    assert losses["hf"] == pytest.approx(losses["bertjax"], rel=1e-5)
    np.testing.assert_allclose(logits["hf"], logits["bertjax"], atol=1e-4, rtol=1e-5)


# --- end to end -------------------------------------------------------------------------------


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _check_rows(report: dict, mode: str, names: list[str]) -> None:
    """Every row's fields, the same ModernBERT (parameters) in each, its class, the formula."""
    config = tiny_config()
    assert report["config"]["model_type"] == "modernbert"
    assert report["config"]["local_attention"] == 4
    assert report["model_flops_per_token"] == pytest.approx(
        model_flops_per_token(config, 16, 2, training=mode == "train"))
    assert report["model_flops_counted_as"] == "ModernBERT's"
    assert [r["row"] for r in report["rows"]] == names
    n_params = sum(int(x.size) for x in jax.tree.leaves(
        nnx.state(BertForMaskedLM(config, rngs=nnx.Rngs(0)), nnx.Param)))
    classes = {"bertjax": "BertForMaskedLM (modernbert)", "hf-eager": "ModernBertForMaskedLM",
               "hf-compiled": "ModernBertForMaskedLM", "bert_torch": "BertForMaskedLM (modernbert)"}
    for r in report["rows"]:
        assert set(r) == ROW_FIELDS, r["row"]
        assert r["model_class"] == classes[r["impl"]], r["row"]
        assert r["parameters"] == n_params, r["row"]
        assert len(r["step_times_s"]) == 1 and r["tokens_per_s"] > 0
        assert r["achieved_flops_per_s"] == pytest.approx(report["model_flops_per_token"]
                                                          * r["tokens_per_s"])
        if mode == "train":  # the MLM loss alone: ~ ln(1024) at initialisation, no NSP part
            assert 5.5 < r["loss"] < 8.5, r["row"]
        else:
            assert r["loss"] is None


@pytest.mark.slow
def test_bench_train_runs_a_modernbert_in_every_row(tmp_path, capsys) -> None:
    path = tmp_path / "train.json"
    code, out, err = _run(["bench", "train", *TINY, "--dtype", "float32", "--compile-backend",
                           "eager", "--json", str(path)], capsys)
    assert code == 0, err
    report = json.loads(path.read_text())
    _check_rows(report, "train", ["bertjax fp32", "hf-eager fp32", "hf-compiled fp32",
                                  "bert_torch fp32"])
    assert report["skipped"] == [] and report["failed"] == []
    assert "ModernBERT's count for every row" in out


@pytest.mark.slow
def test_bench_infer_runs_a_modernbert_in_every_row(tmp_path, capsys) -> None:
    path = tmp_path / "infer.json"
    code, _, err = _run(["bench", "infer", *TINY, "--dtype", "float32", "--impl",
                         "bertjax,hf-eager,bert_torch", "--json", str(path)], capsys)
    assert code == 0, err
    _check_rows(json.loads(path.read_text()), "infer",
                ["bertjax fp32", "hf-eager fp32", "bert_torch fp32"])


@pytest.mark.slow
def test_bench_embed_beside_transformers_modernbert(tmp_path, capsys, monkeypatch) -> None:
    """`bench embed` on a ModernBERT by Hub id (fixture b in a Hub cache, as a sentence-
    transformers model of 48 tokens: every switch turned, a window shorter than the lines): the
    packed and sorted bertjax rows give transformers' `ModernBertModel`'s vectors, and the
    maximum length is the one its cached directory's sentence-transformers settings give."""
    from huggingface_hub import constants

    fixture = directory("b", "BertModel")
    (tmp_path / "modules.json").write_text(json.dumps(
        [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}]))
    (tmp_path / "sentence_bert_config.json").write_text(json.dumps({"max_seq_length": 48}))
    files = {p.name: p for p in fixture.iterdir() if p.suffix != ".npz"}
    add_to_cache(tmp_path / "hub", "bertjax-tests/modernbert-b", files | {
        name: tmp_path / name for name in ("modules.json", "sentence_bert_config.json")})
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    path = tmp_path / "embed.json"
    code, out, err = _run(["bench", "embed", "--model", "bertjax-tests/modernbert-b", "--lines",
                           "12", "--repeats", "1", "--batch-size", "4", "--json", str(path)],
                          capsys)
    assert code == 0, err
    report = json.loads(path.read_text())
    assert report["transformers_class"] == "ModernBertModel"
    assert report["bertjax_class"] == "ModernBertModel"  # bertjax.modernbert's encoder
    assert report["max_length"] == 48
    assert [r["row"] for r in report["rows"]] == ["bertjax (jit, packed)", "bertjax (jit)",
                                                  "transformers eager (sdpa)"]
    for row in report["rows"][:2]:
        assert row["max_abs_diff"] < 1e-5, row
        assert row["sentences_per_s"] > 0
    assert report["packed_batches"] >= 1 and report["lines"] == 12
    assert "bertjax ModernBertModel, transformers ModernBertModel; " in out


# --- parity --hf ------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("fixture", "name"), [("a", "BertForMaskedLM"),
                                               ("b", "BertForSequenceClassification")])
def test_parity_hf_passes_every_tensor_of_a_modernbert_checkpoint(capsys, fixture, name) -> None:
    """`bertjax parity --hf DIR` on a ModernBERT written by transformers 5: every output,
    attention map, hidden state and gradient of the mirror within the parity rule, rows longer
    than the window (fixture a: 8, b: 5)."""
    code = main(["parity", "--hf", str(directory(fixture, name)), "--seq-len", "24"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith(f"bertjax vs bert_torch: {directory(fixture, name)}, {name}; ")
    rows = lines[2:-1]
    assert lines[-1] == f"{len(rows)} passed, 0 failed"
    assert all(line.split()[-1] == "ok" for line in rows)
    tensors = {line.split()[0] for line in rows}
    assert {"attentions.3", "hidden_states.4"} <= tensors
    model, _ = bertjax.from_pretrained(directory(fixture, name))
    parameters = nnx.to_flat_state(nnx.state(model, nnx.Param))
    assert len([t for t in tensors if t.startswith("grad.")]) == len(parameters)  # every one


# --- parity --preset --model-type ---------------------------------------------------------------


@pytest.mark.slow
def test_parity_preset_of_a_modernbert_shape_passes_every_tensor(capsys) -> None:
    """`bertjax parity --preset mini --model-type modernbert`: ModernBERT's mini shape (4 layers,
    global and local alternating, window 64 on either side) as the masked LM it pre-trains as,
    rows of 160 tokens (past the window), every output, attention map, hidden state and gradient
    within the parity rule (1e-5, or 3x the mirror's own float32 noise)."""
    code = main(["parity", "--preset", "mini", "--model-type", "modernbert", "--seq-len", "160"])
    out = capsys.readouterr().out
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0].startswith("bertjax vs bert_torch: modernbert preset 'mini' (4 layers, hidden "
                               "256), ModernBertForMaskedLM, random init (seed 0); batch 2x160")
    rows = lines[2:-1]
    assert lines[-1] == f"{len(rows)} passed, 0 failed"
    tensors = {line.split()[0] for line in rows}
    assert {"mlm_logits", "attentions.1", "hidden_states.4", "grad.bert.layers.1.attn.wqkv.weight",
            "grad.mlm_head.transform.weight"} <= tensors
    config = BertConfig.from_preset("mini", model_type="modernbert")
    assert config.attention_types[1] == "sliding_attention" and config.local_attention // 2 < 160

