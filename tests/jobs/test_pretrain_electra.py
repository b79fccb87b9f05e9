"""`bertjax pretrain --train.objective electra` end to end on the tiny preset: the run trains
ELECTRA's generator and discriminator and reports both, resumes bitwise after SIGKILL, loads back
as its discriminator (and as its generator when a masked LM is asked for), and converts to
directories transformers loads as ElectraForPreTraining and ElectraForMaskedLM with the same
logits (the convert command's own checks, 1e-5 or 4x transformers' float32 noise)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from use_helpers import DATA_CACHE, state_leaves

import bertjax
from bertjax.cli.main import main
from bertjax.jobs.pretrain.job import RTD_METRIC_KEYS, TRAIN_METRIC_KEYS
from bertjax.train.metrics import read_jsonl
from bertjax.train.saved import read_state

ROOT = Path(__file__).resolve().parents[2]
FLAGS = ["--train.objective=electra", "--model.preset=tiny", "--model.hidden-dropout-prob=0.1",
         "--data.vocab-size=300", "--data.seq-len=32", "--data.max-predictions=5",
         "--data.batch-size=4", "--data.eval-batches=2", "--optim.learning-rate=2e-3",
         "--optim.warmup-steps=2", "--train.steps=8", "--train.eval-every=4",
         "--train.checkpoint-every=2", "--train.log-every=2", "--no-progress"]
KEYS = ("step", *(k for k in TRAIN_METRIC_KEYS if not k.startswith("nsp_")), *RTD_METRIC_KEYS)


def _env() -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    if DATA_CACHE is not None:
        env["BERTJAX_DATA_CACHE"] = str(DATA_CACHE)
    return env


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> Path:
    """An uninterrupted 8-step ELECTRA run."""
    out = tmp_path_factory.mktemp("electra") / "run"
    assert main(["pretrain", "--output-dir", str(out), *FLAGS]) == 0
    return out


def _records(run_dir: Path, kind: str) -> list[dict]:
    return read_jsonl(run_dir / "metrics.jsonl", kind)


def test_the_run_trains_both_networks_and_reports_the_discriminator(run) -> None:
    train, evals = _records(run, "train"), _records(run, "eval")
    assert [r["step"] for r in train] == list(range(1, 9)) and [r["step"] for r in evals] == [4, 8]
    for r in train:  # the loss is ELECTRA's: MLM + 50 x replaced-token
        assert r["loss"] == pytest.approx(r["mlm_loss"] + 50.0 * r["rtd_loss"], rel=1e-5)
        assert 0 < r["replaced_share"] < 0.3 and "nsp_loss" not in r
    assert {"rtd_accuracy", "rtd_precision", "rtd_recall", "mlm_accuracy"} <= set(evals[-1])
    saved = json.loads((run / "run_config.json").read_text())
    assert saved["model"]["model_type"] == "electra" and saved["model"]["generator_size"] == 0.25
    summary = json.loads((run / "summary.json").read_text())
    assert 0 <= summary["eval"]["rtd_accuracy"] <= 1 and (run / "curves.png").is_file()


def test_it_loads_as_its_discriminator_and_as_its_generator(run) -> None:
    model, tokenizer, report = bertjax.from_pretrained(run, output_loading_info=True)
    assert type(model).__name__ == "BertForReplacedTokenDetection"
    assert report.left_out_heads == ("generator",) and model.config.hidden_size == 128
    generator, _ = bertjax.from_pretrained(run, model_cls=bertjax.BertForMaskedLM)
    assert generator.config.hidden_size == 32  # a quarter of the discriminator's
    words = [np.asarray(m.bert.embeddings.word_embeddings.embedding[...]) for m in (model, generator)]
    assert np.array_equal(*words)  # the one set of embeddings both trained


@pytest.mark.parametrize(("as_class", "transformers_class"), [
    (None, "ElectraForPreTraining"), ("BertForMaskedLM", "ElectraForMaskedLM")])
def test_convert_writes_what_transformers_loads_with_the_same_logits(run, tmp_path, capsys,
                                                                     as_class,
                                                                     transformers_class) -> None:
    out = tmp_path / "hf"
    argv = ["convert", str(run), str(out), *(["--as", as_class] if as_class else [])]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    assert "verified: transformers" in printed and f"loads it as {transformers_class}" in printed
    assert json.loads((out / "config.json").read_text())["architectures"] == [transformers_class]


def test_sigkill_then_resume_is_bitwise_identical(run, tmp_path) -> None:
    run_dir, ckpts = tmp_path / "run", tmp_path / "run" / "checkpoints"
    proc = subprocess.Popen([sys.executable, "-m", "bertjax.cli.main", "pretrain",
                             f"--output-dir={run_dir}", *FLAGS], env=_env(), cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and proc.poll() is None:
        if ckpts.is_dir() and any(p.name.isdigit() and int(p.name) >= 4 for p in ckpts.iterdir()):
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail(f"the run ended before it could be killed:\n{proc.stderr.read()[-2000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert main(["pretrain", "--resume", f"--output-dir={run_dir}", "--no-progress"]) == 0
    (step_a, a), (step_b, b) = (read_state(d / "checkpoints") for d in (run, run_dir))
    assert step_a == step_b == 8
    for x, y in zip(state_leaves(a), state_leaves(b), strict=True):
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
    records = [[{k: r[k] for k in KEYS} for r in _records(d, "train")] for d in (run, run_dir)]
    assert records[0] == records[1]
    assert _records(run, "eval") == _records(run_dir, "eval")
