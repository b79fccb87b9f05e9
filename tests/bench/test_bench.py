"""`bertjax bench train|infer`: the FLOP formula against independent counts, the batch, the
derived numbers, and end-to-end runs on the tiny preset (seq 16, batch 4, two steps).

No test asserts a speed: only that the reported numbers are the quotients they claim to be.
"""

from __future__ import annotations

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from bench_helpers import ROW_FIELDS, TINY, dot_flops
from flax import nnx

from bertjax.bench.batch import MODEL_KEYS, default_predictions, mask_rate, pretraining_batch
from bertjax.bench.flops import datasheet_peak, model_flops_per_token
from bertjax.bench.options import BenchSettings, Row
from bertjax.bench.report import add_ratios, summarize_row
from bertjax.cli.main import main
from bertjax.config import BertConfig
from bertjax.heads import BertForPreTraining
from bertjax.losses import pretraining_loss

# --- model FLOPs ------------------------------------------------------------------------------


def _tiny_forward(seq: int, batch: int, predictions: int):
    config = BertConfig.from_preset("tiny")
    graphdef, params = nnx.split(BertForPreTraining(config, rngs=nnx.Rngs(0)), nnx.Param)
    data = {k: jnp.asarray(v) for k, v in pretraining_batch(config, batch, seq, predictions).items()
            if k in MODEL_KEYS}

    def forward(params):
        out = nnx.merge(graphdef, params)(data["input_ids"], data["token_type_ids"],
                                          data["attention_mask"], data["masked_positions"])
        return out.mlm_logits, out.nsp_logits

    def loss(params):
        return pretraining_loss(*forward(params), data)[0]

    return config, params, forward, loss


@pytest.mark.slow
@pytest.mark.parametrize(("seq", "batch", "predictions"), [(16, 4, 2), (64, 2, 10), (16, 2, 15)])
def test_flop_formula_counts_every_matmul_of_the_model(seq, batch, predictions) -> None:
    """The formula equals the matmul FLOPs in bertjax's own program (its jaxpr), forward and
    forward + backward, exactly. The only slack allowed is a one-hot token-type matmul
    (2 * type_vocab * H per token forward, once more backward for the table's gradient), which an
    implementation may use instead of a gather and which is not part of BERT's count; and in the
    backward the gradients that `numerics.add_broadcast` and `scale_broadcast` write as
    ones-vector matmuls: the MLM bias's, a sum over the logits' rows (2 * V per prediction), the
    position rows', a sum over the batch (2 * H per token), and every LayerNorm's scale and bias
    (4 * H per row it normalises: each token in the embeddings and all layers but the last, which
    runs on each sequence's masked rows and [CLS] only, then the MLM head's rows)."""
    config, params, forward, loss = _tiny_forward(seq, batch, predictions)
    tokens, H, L = batch * seq, config.hidden_size, config.num_hidden_layers
    one_hot = 2 * config.type_vocab_size * H * tokens
    normalised_rows = tokens * (2 * L - 1) + 2 * batch * (predictions + 1) + batch * predictions
    ones_gradients = (2 * batch * predictions * config.vocab_size + 2 * H * tokens
                      + 4 * H * normalised_rows)
    counted_forward = dot_flops(jax.make_jaxpr(forward)(params).jaxpr)
    counted_training = dot_flops(jax.make_jaxpr(jax.grad(loss))(params).jaxpr)
    formula_forward = model_flops_per_token(config, seq, predictions, training=False) * tokens
    formula_training = model_flops_per_token(config, seq, predictions, training=True) * tokens
    assert counted_forward - formula_forward in (0, one_hot)
    assert counted_training - formula_training in (ones_gradients, 2 * one_hot + ones_gradients)
    assert formula_training == 3 * formula_forward


def test_flop_formula_against_xla_cost_analysis() -> None:
    """XLA's own count of the compiled forward also includes elementwise work (softmax, GELU,
    LayerNorm): at least the formula and at most 15% above it on the tiny preset (9% measured)."""
    config, params, forward, _ = _tiny_forward(16, 4, 2)
    cost = jax.jit(forward).lower(params).compile().cost_analysis()
    cost = cost[0] if isinstance(cost, list) else cost
    formula = model_flops_per_token(config, 16, 2, training=False) * 16 * 4
    assert formula <= cost["flops"] <= 1.15 * formula


def test_flop_formula_for_bert_base_by_hand() -> None:
    """BERT-base, seq 128, 20 predictions, written out: 2 x the encoder weights (85.0M, but the
    last layer's queries, output projection and MLP at the 21 rows of [CLS] and the masked
    positions) + attention 4 S H per layer (the last one at 21/128) + MLM head (H^2 + H V) x 2 x
    20/128 + pooler/NSP (H^2 + 2H) x 2/128, per token."""
    config = BertConfig.from_preset("base")
    rows = 21 / 128  # the last layer's rows per token
    layer = 2 * (4 * 768**2 + 2 * 768 * 3072)  # 2 x 7,077,888
    last = 2 * 2 * 768**2 + rows * 2 * (2 * 768**2 + 2 * 768 * 3072)  # keys, values: every token
    encoder = 11 * layer + last
    attention = (11 + rows) * 4 * 128 * 768
    mlm = 2 * (768**2 + 768 * 30522) * 20 / 128
    nsp = 2 * (768**2 + 2 * 768) / 128
    forward = encoder + attention + mlm + nsp
    assert model_flops_per_token(config, 128, 20, training=False) == pytest.approx(forward, rel=1e-12)
    assert model_flops_per_token(config, 128, 20, training=True) == pytest.approx(3 * forward,
                                                                                 rel=1e-12)
    assert forward == 160_008_192 + 4_389_888 + 7_509_600 + 9_240 == 171_916_920
    # with no fewer rows than tokens the last layer runs whole: every layer 2 x 7,077,888
    assert model_flops_per_token(config, 16, 15, training=False) == pytest.approx(
        12 * layer + 12 * 4 * 16 * 768 + 2 * (768**2 + 768 * 30522) * 15 / 16 + nsp * 128 / 16)


def test_datasheet_peaks() -> None:
    assert datasheet_peak("NVIDIA H100 80GB HBM3") == ("NVIDIA H100 SXM", 989e12)
    assert datasheet_peak("NVIDIA H100 PCIe") == ("NVIDIA H100 PCIe", 756e12)
    assert datasheet_peak("NVIDIA H200") == ("NVIDIA H200", 989e12)
    assert datasheet_peak("NVIDIA A100-SXM4-40GB") == ("NVIDIA A100", 312e12)
    assert datasheet_peak("NVIDIA L4") == ("NVIDIA L4", 121e12)
    assert datasheet_peak("NVIDIA L40") is None  # not an L4
    assert datasheet_peak("TPU v4") == ("TPU v4", 275e12)
    assert datasheet_peak("TPU v5 lite") == ("TPU v5e", 197e12)
    assert datasheet_peak("TPU v5") == ("TPU v5p", 459e12)
    assert datasheet_peak("TPU v6 lite") == ("TPU v6e", 918e12)
    assert datasheet_peak("AMD EPYC 7B13") is None


# --- the batch --------------------------------------------------------------------------------


def test_pretraining_batch() -> None:
    config = BertConfig.from_preset("tiny")
    B, S, P = 8, 32, default_predictions(32)
    assert P == 5  # round(0.15 * 32)
    batch = pretraining_batch(config, B, S, P, seed=3)
    assert batch["input_ids"].shape == (B, S) and batch["masked_positions"].shape == (B, P)
    assert batch["input_ids"].min() >= 0 and batch["input_ids"].max() < config.vocab_size
    lengths = batch["attention_mask"].sum(1)
    assert lengths[0] == S and lengths.min() >= S // 2 and lengths.min() < S  # some padding
    assert np.all(batch["input_ids"][batch["attention_mask"] == 0] == config.pad_token_id)
    assert set(np.unique(batch["token_type_ids"])) == {0, 1}
    assert np.all(batch["token_type_ids"][batch["attention_mask"] == 0] == 0)
    for b in range(B):
        real = int(batch["masked_weights"][b].sum())
        assert real == min(P, round(0.15 * int(lengths[b])))
        pos = batch["masked_positions"][b, :real]
        assert len(set(pos)) == real and pos.min() >= 1 and pos.max() < lengths[b]
        np.testing.assert_array_equal(batch["masked_ids"][b, :real], batch["input_ids"][b, pos])
        # transformers' labels: the same targets at the same positions, -100 elsewhere
        labelled = np.nonzero(batch["labels"][b] != -100)[0]
        np.testing.assert_array_equal(labelled, pos)
        np.testing.assert_array_equal(batch["labels"][b, pos], batch["masked_ids"][b, :real])
    assert set(np.unique(batch["next_sentence_label"])) <= {0, 1}
    again = pretraining_batch(config, B, S, P, seed=3)
    assert all(np.array_equal(batch[k], again[k]) for k in batch)


def test_pretraining_batch_masks_at_the_rate_its_slots_ask() -> None:
    """More slots than BERT's 15% (ModernBERT's 30%: 154 of 512) mask that share of each row,
    so that a model predicting at the labelled positions alone (transformers' ModernBERT,
    `sparse_prediction`) does the work a run at that rate does; BERT's slots keep 15%."""
    config = BertConfig.from_preset("tiny")
    S, P = 64, 19  # 30% of 64
    assert mask_rate(S, P) == P / S and mask_rate(S, default_predictions(S)) == 0.15
    batch = pretraining_batch(config, 16, S, P, seed=1)
    lengths = batch["attention_mask"].sum(1)
    real = batch["masked_weights"].sum(1)
    np.testing.assert_array_equal(real, [min(P, round(P / S * int(n))) for n in lengths])
    assert real.sum() / lengths.sum() > 0.28  # not 15%
    assert real[0] == P  # the full row fills every slot


# --- derived numbers --------------------------------------------------------------------------


def _raw(times: list[float]) -> dict:
    return {"step_times_s": times, "dispatch_times_s": [t / 4 for t in times],
            "pipelined_step_s": 0.5 * min(times), "first_step_s": 3.0,
            "peak_memory_bytes": 2**30, "memory_source": "test", "loss": 1.0, "parameters": 7,
            "matmul_precision": "highest", "device": "cpu", "versions": {}}


def test_ratios_and_mfu_are_the_quotients_they_claim() -> None:
    kw = {"tokens_per_step": 1000, "flops_per_token": 2e6, "gemm_flops_per_s": 1e11,
          "peak_flops_per_s": 1e12}
    rows = [summarize_row(Row("bertjax", "float32"), _raw([0.1, 0.2, 0.4]), **kw),
            summarize_row(Row("bertjax", "bfloat16"), _raw([0.05, 0.1, 0.1]), **kw),
            summarize_row(Row("hf-eager", "float32"), _raw([0.4, 0.5, 0.6]), **kw),
            summarize_row(Row("hf-eager", "bfloat16"), _raw([0.25, 0.2, 0.3]), **kw)]
    add_ratios(rows)
    jf, jb, ef, eb = rows
    assert jf["tokens_per_s"] == pytest.approx(1000 / 0.2)
    assert jf["p10_step_s"] == pytest.approx(0.12) and jf["p90_step_s"] == pytest.approx(0.36)
    assert jf["pipelined_tokens_per_s"] == pytest.approx(1000 / 0.05)
    assert jf["median_dispatch_s"] == pytest.approx(0.2 / 4)
    assert jf["achieved_flops_per_s"] == pytest.approx(2e6 * 5000)
    assert jf["mfu_vs_gemm"] == pytest.approx(0.1) and jf["mfu_vs_datasheet"] == pytest.approx(0.01)
    # each row against the transformers row of its own dtype
    assert jf["vs_hf_eager"] == pytest.approx(0.5 / 0.2) and jf["vs_hf_eager_row"] == "hf-eager fp32"
    assert jb["vs_hf_eager"] == pytest.approx(0.25 / 0.1) and jb["vs_hf_eager_row"] == "hf-eager bf16"
    assert ef["vs_hf_eager"] == 1.0 and eb["vs_hf_eager"] == 1.0
    assert jf["vs_hf_compiled"] is None and jf["vs_hf_compiled_row"] is None
    # MFU ratios equal speed ratios: one FLOP count for every row
    assert jf["mfu_vs_gemm"] / ef["mfu_vs_gemm"] == pytest.approx(jf["vs_hf_eager"])


def test_settings_resolve_device_defaults() -> None:
    cpu = BenchSettings(mode="train").resolve("cpu")
    gpu = BenchSettings(mode="train").resolve("gpu")
    assert (cpu.preset, cpu.batch, cpu.dropout, cpu.hf_dtypes) == ("mini", 32, 0.0, ("float32",))
    assert (gpu.preset, gpu.batch, gpu.dropout, gpu.hf_dtypes) == ("base", 256, 0.1, ("bfloat16",))
    assert cpu.predictions == gpu.predictions == 19  # round(0.15 * 128)
    assert BenchSettings(mode="infer").resolve("gpu").dropout == 0.0
    names = [r.name for r in cpu.rows()]
    assert names == ["bertjax fp32", "bertjax bf16", "hf-eager fp32", "hf-compiled fp32",
                     "bert_torch fp32"]
    config = BenchSettings(preset="tiny", dropout=0.2, overrides=(("hidden_act", "relu"),
                           ("attention_probs_dropout_prob", 0.0))).resolve("cpu").bert_config("bfloat16")
    assert (config.hidden_act, config.hidden_dropout_prob, config.attention_probs_dropout_prob,
            config.dtype, config.num_hidden_layers) == ("relu", 0.2, 0.0, "bfloat16", 2)


# --- end to end -------------------------------------------------------------------------------


def _run(argv: list[str], capsys) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _check_report(report: dict, out: str, mode: str, names: list[str]) -> None:
    config = BertConfig.from_preset("tiny", num_hidden_layers=1)
    flops = model_flops_per_token(config, 16, 2, training=mode == "train")
    assert report["benchmark"] == mode
    assert report["model_flops_per_token"] == pytest.approx(flops)
    assert report["settings"]["predictions"] == 2 == default_predictions(16)
    assert [r["row"] for r in report["rows"]] == names
    assert report["gemm"]["size"] == 128 and report["gemm"]["flops_per_s"] > 0
    assert report["datasheet_peak"] is None  # CPU
    n_params = sum(int(x.size) for x in jax.tree.leaves(
        nnx.state(BertForPreTraining(config, rngs=nnx.Rngs(0)), nnx.Param)))
    eager = next((r for r in report["rows"] if r["impl"] == "hf-eager"), None)
    for r in report["rows"]:
        assert set(r) == ROW_FIELDS, r["row"]
        assert r["parameters"] == n_params  # every child built the --set num_hidden_layers=1 model
        assert r["model_class"] == ("BertForPreTraining" if r["impl"].startswith("hf-")
                                    else "BertForPreTraining (bert)")
        assert len(r["step_times_s"]) == 2
        assert r["median_step_s"] == pytest.approx(float(np.median(r["step_times_s"])))
        assert r["tokens_per_s"] == pytest.approx(4 * 16 / r["median_step_s"])
        assert r["pipelined_tokens_per_s"] == pytest.approx(4 * 16 / r["pipelined_step_s"])
        assert r["p10_step_s"] <= r["median_step_s"] <= r["p90_step_s"]
        assert 0 < r["median_dispatch_s"] <= r["median_step_s"]
        assert r["achieved_flops_per_s"] == pytest.approx(flops * r["tokens_per_s"])
        assert r["mfu_vs_gemm"] == pytest.approx(r["achieved_flops_per_s"]
                                                 / report["gemm"]["flops_per_s"])
        assert r["mfu_vs_datasheet"] is None
        assert r["peak_memory_bytes"] > 50 * 2**20 and r["memory_source"].startswith("peak RSS")
        assert r["first_step_s"] > 0
        # the JAX child calls keep_freed_memory (the tests' conftest switches it off)
        assert r["host_memory"] == ("disabled by BERTJAX_KEEP_FREED_MEMORY=0"
                                    if r["impl"] == "bertjax" else "glibc's defaults")
        if eager is not None:
            assert r["vs_hf_eager"] == pytest.approx(r["tokens_per_s"] / eager["tokens_per_s"])
        if mode == "train":
            assert 0 < r["loss"] < 20  # ~ ln(1024) + ln(2) at initialisation
        else:
            assert r["loss"] is None
    # the table: a header line, then one line per row, its tokens/s as printed
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("row "))
    rows = report["rows"]
    for r, line in zip(rows, lines[header + 1:header + 1 + len(rows)], strict=True):
        assert line.startswith(r["row"]) and f"{r['tokens_per_s']:,.0f}" in line
    assert "MFU against: measured GEMM float32 128^3" in out and "datasheet n/a" in out
    assert "thread(s) for XLA and torch alike" in out


@pytest.mark.slow
def test_bench_train_reports_every_row_and_a_failing_one(tmp_path, capsys) -> None:
    """Every row that ran has every field; hf-compiled, given a backend torch does not know,
    fails in its own process, is reported with its error, and the rows after it still run."""
    path = tmp_path / "train.json"
    code, out, err = _run(["bench", "train", *TINY, "--set", "num_hidden_layers=1", "--dtype",
                           "bfloat16", "--compile-backend", "no_such_backend", "--json", str(path)],
                          capsys)
    assert code == 1  # a row failed
    report = json.loads(path.read_text())
    _check_report(report, out, "train", ["bertjax bf16", "hf-eager fp32", "bert_torch fp32"])
    assert report["rows"][1]["vs_hf_eager"] == 1.0
    assert report["skipped"] == []
    assert [f["row"] for f in report["failed"]] == ["hf-compiled fp32"]
    assert "no_such_backend" in report["failed"][0]["error"].splitlines()[-1]
    assert "FAILED hf-compiled fp32: " in out and "[3/4] hf-compiled fp32: FAILED" in err
    assert report["config"]["hidden_dropout_prob"] == 0.0  # the CPU default
    assert report["threads"]["env"]["OMP_NUM_THREADS"] == str(report["threads"]["count"])
    assert "[4/4] bert_torch fp32: " in err


@pytest.mark.slow
def test_bench_infer_reports_every_row(tmp_path, capsys) -> None:
    path = tmp_path / "infer.json"
    code, out, err = _run(["bench", "infer", *TINY, "--set", "num_hidden_layers=1",
                           "--dtype", "float32", "--impl", "bertjax,hf-eager,hf-compiled,bert_torch",
                           "--compile-backend", "eager", "--json", str(path)], capsys)
    assert code == 0, err
    report = json.loads(path.read_text())
    _check_report(report, out, "infer", ["bertjax fp32", "hf-eager fp32", "hf-compiled fp32",
                                         "bert_torch fp32"])
    compiled = report["rows"][2]
    for r in report["rows"]:
        assert r["vs_hf_compiled"] == pytest.approx(r["tokens_per_s"] / compiled["tokens_per_s"])


@pytest.mark.slow
def test_rows_needing_transformers_are_skipped_and_named(tmp_path, capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "transformers", None)  # `import transformers` fails
    path = tmp_path / "r.json"
    code, out, err = _run(["bench", "train", *TINY, "--dtype", "float32", "--json", str(path)],
                          capsys)
    assert code == 0, err
    report = json.loads(path.read_text())
    assert [r["row"] for r in report["rows"]] == ["bertjax fp32", "bert_torch fp32"]
    assert [s["row"] for s in report["skipped"]] == ["hf-eager fp32", "hf-compiled fp32"]
    for s in report["skipped"]:
        assert s["reason"] == "transformers is not installed; pip install 'bertjax[bench]'"
        assert f"skipped {s['row']}: transformers is not installed" in out
    assert all(r["vs_hf_eager"] is None and r["vs_hf_compiled"] is None for r in report["rows"])


@pytest.mark.parametrize("missing", ["torch", "transformers"])
def test_torch_child_skips_without_its_packages(monkeypatch, missing) -> None:
    """The child itself, run in this process, when an import fails after the parent's check."""
    from bertjax.bench.timing import RowSkippedError, RowSpec
    from bertjax.bench.torch_rows import torch_row
    from bertjax.train.schedule import OptimConfig

    spec = RowSpec(cores=(), threads=1, impl="hf-eager", mode="train", dtype="float32",
                   config=BertConfig.from_preset("tiny"), seq=16, batch=2, predictions=2, steps=1,
                   warmup=0, seed=0, optim=OptimConfig(), compile_backend="inductor",
                   prng_impl="threefry2x32", device="cpu")
    monkeypatch.setitem(sys.modules, missing, None)
    with pytest.raises(RowSkippedError, match=rf"^{missing} is not installed .*bertjax\[bench\]"):
        torch_row(spec)


@pytest.mark.parametrize(("argv", "message"), [
    (["--impl", "bertjax,tensorflow"], "--impl: expected a comma-separated subset of bertjax, "
                                       "hf-eager, hf-compiled, bert_torch, got 'bertjax,tensorflow'"),
    (["--dtype", "float16"], "--dtype: expected a comma-separated subset of float32, bfloat16, got "
                             "'float16'"),
    (["--set", "hidden_size"], "expected NAME=VALUE, got 'hidden_size'"),
    (["--set", "hiden_size=64"], "'hiden_size' is not a BertConfig field"),
    (["--set", "num_hidden_layers=two"], "--set: num_hidden_layers must be a positive integer, got 'two'"),
    (["--set", "dtype=bfloat16"], "set the compute dtype with --dtype"),
    (["--steps", "0"], "expected a positive integer, got '0'"),
    (["--dropout", "1.5"], "expected a probability in [0, 1), got '1.5'"),
    (["--preset", "huge"], "--preset: expected one of base, large, medium, mini, small, "
                            "tiny, got 'huge'"),
])
def test_bad_options_are_refused_by_the_parser(capsys, argv, message) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", "train", *argv])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.parametrize(("argv", "message"), [
    (["--preset", "tiny", "--seq", "256"], "--seq 256 is longer than max_position_embeddings=128 "
                                           "of preset 'tiny'; use a shorter --seq or --set "
                                           "max_position_embeddings=256"),
    (["--preset", "tiny", "--seq", "128", "--set", "model_type=roberta"],
     "--seq 128 is longer than max_position_embeddings=128 of preset 'tiny' less roberta's 1 "
     "rows before its first position; use a shorter --seq or --set max_position_embeddings=129"),
    (["--preset", "tiny", "--seq", "16", "--predictions", "17"],
     "--predictions 17 must be between 1 and --seq 16"),
    (["--preset", "tiny", "--set", "num_attention_heads=3"],
     "--set: BertConfig.hidden_size (128) must be divisible by num_attention_heads (3)"),
    (["--preset", "tiny", "--threads", "4096"], "--threads 4096 must be between 1 and the"),
])
def test_options_that_do_not_fit_together(capsys, argv, message) -> None:
    code, _, err = _run(["bench", "train", *argv], capsys)
    assert code == 2
    assert f"bertjax bench train: error: {message}" in err

