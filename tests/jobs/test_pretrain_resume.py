"""`bertjax pretrain` end to end on the tiny preset: exact resume after SIGKILL, corrupt-checkpoint
fallback, config mismatch, NaN stop, batch/device mismatch."""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from use_helpers import state_leaves

from bertjax.jobs.pretrain.job import TRAIN_METRIC_KEYS
from bertjax.train.metrics import read_jsonl
from bertjax.train.saved import read_state

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "pretrain.py"
LAUNCH = [sys.executable, str(SCRIPT)]

# Tiny model, tiny vocabulary, short sequences; dropout on, so the RNG must resume exactly too.
TINY = [
    "--model.preset=tiny", "--model.hidden-dropout-prob=0.1",
    "--model.attention-probs-dropout-prob=0.1", "--data.vocab-size=300", "--data.seq-len=32",
    "--data.max-predictions=5", "--data.batch-size=8", "--data.eval-batches=2",
    "--optim.learning-rate=1e-3", "--optim.warmup-steps=4", "--train.eval-every=8",
    "--train.checkpoint-every=4", "--train.keep-checkpoints=3", "--train.log-every=4",
    "--no-progress",
]


def _env(devices: int = 1) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return env


def _cli(args: list[str], devices: int = 1, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*LAUNCH, *args], env=_env(devices), capture_output=True, text=True,
        timeout=timeout, cwd=ROOT,
    )




def _assert_same_state(dir_a: Path, dir_b: Path) -> int:
    step_a, state_a = read_state(dir_a / "checkpoints")
    step_b, state_b = read_state(dir_b / "checkpoints")
    assert step_a == step_b
    la, lb = state_leaves(state_a), state_leaves(state_b)
    assert len(la) == len(lb) > 10
    for x, y in zip(la, lb, strict=True):
        assert x.dtype == y.dtype and x.shape == y.shape
        assert np.array_equal(x, y), "parameters / optimizer state differ after resume"
    return step_a


def _train_records(run_dir: Path) -> list[dict]:
    return [{k: r[k] for k in ("step", *TRAIN_METRIC_KEYS)}
            for r in read_jsonl(run_dir / "metrics.jsonl", "train")]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An uninterrupted 40-step run."""
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    proc = _cli([*TINY, "--train.steps=40", f"--output-dir={run_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def test_reference_run_outputs(reference: Path) -> None:
    records = _train_records(reference)
    assert [r["step"] for r in records] == list(range(1, 41))
    evals = read_jsonl(reference / "metrics.jsonl", "eval")
    assert [e["step"] for e in evals] == [8, 16, 24, 32, 40]
    # trained at the default 40%: held out at 15% always, at 40% too at the last step only
    assert ["own_rate_mlm_accuracy" in e for e in evals] == [False] * 4 + [True]
    for e in evals:
        assert 0.0 < e["baseline_accuracy"] < 1.0
        assert e["perplexity"] == pytest.approx(np.exp(e["mlm_loss"]), rel=1e-5)
        assert e["accuracy_ratio"] == pytest.approx(e["mlm_accuracy"] / e["baseline_accuracy"])
    steps = sorted(int(p.name) for p in (reference / "checkpoints").iterdir() if p.name.isdigit())
    best = min(evals, key=lambda e: e["mlm_loss"])["step"]
    assert steps == sorted({best, 32, 36, 40})  # newest 3 plus the best held-out loss
    assert (reference / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert any((reference / "tensorboard").iterdir())
    summary = json.loads((reference / "summary.json").read_text())
    assert summary["steps"] == 40 and summary["first_step_s"] > 0
    # tokens/s is over steps 2..40 (the first step compiles), batch 8 x seq 32
    assert summary["tokens_per_s"] * summary["train_time_s"] == pytest.approx(39 * 8 * 32, rel=1e-9)
    # the speed of each log interval after the first flush (step 1: compilation), which add up
    # to the summary's training time
    speed = read_jsonl(reference / "metrics.jsonl", "speed")
    assert [r["step"] for r in speed] == list(range(4, 41, 4))
    intervals = np.diff([1] + [r["step"] for r in speed])  # steps in each interval
    assert sum(n / r["steps_per_s"] for n, r in zip(intervals, speed, strict=True)) == \
        pytest.approx(summary["train_time_s"], rel=1e-9)
    for r in speed:
        assert r["tokens_per_s"] == pytest.approx(8 * 32 * r["steps_per_s"], rel=1e-12)
    assert (reference / "vocab.txt").is_file()


def test_sigkill_then_resume_is_bitwise_identical(reference: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    ckpt_dir = run_dir / "checkpoints"
    kill_after = random.Random().choice([4, 8, 12, 16, 20, 24])  # a random checkpoint step
    # the run trains its own vocabulary: the same as the reference's (deterministic training)
    proc = subprocess.Popen(
        [*LAUNCH, *TINY, "--train.steps=40", f"--output-dir={run_dir}"],
        env=_env(), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        done = [int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit()] if ckpt_dir.is_dir() else []
        if done and max(done) >= kill_after:
            time.sleep(random.uniform(0.0, 0.3))  # land anywhere, mid-step or mid-save
            break
        time.sleep(0.02)
    if proc.poll() is not None:
        pytest.fail(f"run ended before it could be killed:\n{proc.stderr.read()[-2000:]}")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    killed_at = max(int(p.name) for p in ckpt_dir.iterdir() if p.name.isdigit())
    assert killed_at < 40

    resumed = _cli(["--resume", f"--output-dir={run_dir}", "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resuming at step" in resumed.stderr
    assert (run_dir / "tokenizer.json").read_bytes() == (reference / "tokenizer.json").read_bytes()
    assert _assert_same_state(reference, run_dir) == 40
    assert _train_records(run_dir) == _train_records(reference)
    assert read_jsonl(run_dir / "metrics.jsonl", "eval") == read_jsonl(
        reference / "metrics.jsonl", "eval"
    )


def test_corrupt_latest_checkpoint_falls_back(reference: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    target = max((run_dir / "checkpoints" / "40" / "state" / "d").iterdir(),
                 key=lambda p: p.stat().st_size)
    with open(target, "r+b") as f:
        f.truncate(target.stat().st_size // 3)
    proc = _cli(["--resume", f"--output-dir={run_dir}", "--no-progress"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "checkpoint step 40" in proc.stderr and "corrupt" in proc.stderr
    assert "resuming at step 36" in proc.stderr
    # Steps 37-40 are trained again from step 36 and land exactly where the reference did.
    assert _assert_same_state(reference, run_dir) == 40
    assert _train_records(run_dir) == _train_records(reference)


def test_resume_with_a_different_config_names_the_fields(reference: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(reference, run_dir)
    proc = _cli([*TINY, "--train.steps=40", "--optim.learning-rate=5e-4", "--data.batch-size=16",
                 "--resume", f"--output-dir={run_dir}"])
    assert proc.returncode == 2
    assert "differs from the saved one in 2 field(s)" in proc.stderr
    assert "optim.learning_rate: saved 0.001, requested 0.0005" in proc.stderr
    assert "data.batch_size: saved 8, requested 16" in proc.stderr
    fresh = _cli([*TINY, "--train.steps=40", f"--output-dir={run_dir}"])
    assert fresh.returncode == 2 and "pass --resume to continue it" in fresh.stderr


def test_nan_loss_stops_and_keeps_last_good_checkpoint(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    proc = _cli([*TINY, "--train.steps=40", "--train.checkpoint-every=1", "--optim.warmup-steps=0",
                 "--optim.learning-rate=1e30", f"--output-dir={run_dir}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if "stopping" in x)
    assert "is nan at step" in line or "is inf at step" in line
    bad_step = int(line.split(" at step ")[1].split(":")[0])
    kept = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    assert kept and max(kept) == bad_step - 1
    assert (f"The last good checkpoint is step {bad_step - 1} (kept); resuming would repeat the "
            "same steps exactly, so lower optim.learning_rate or raise optim.warmup_steps and "
            "start a new run (another --output-dir)") in line
    records = read_jsonl(run_dir / "metrics.jsonl", "train")
    assert all(np.isfinite(r["loss"]) for r in records if r["step"] < bad_step)


def test_nan_loss_before_any_checkpoint_says_to_run_again_not_to_resume(tmp_path: Path) -> None:
    """Issue 45: with no checkpoint there is nothing to resume; the advice is a command that
    works: the same one, with other options, in the same --output-dir."""
    run_dir = tmp_path / "run"
    unstable = [*TINY, "--train.steps=40", "--train.checkpoint-every=1000",
                "--train.eval-every=1000", "--optim.warmup-steps=0", f"--output-dir={run_dir}"]
    proc = _cli([*unstable, "--optim.learning-rate=1e30"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    line = next(x for x in proc.stderr.splitlines() if "stopping" in x)
    assert line.endswith("No checkpoint was saved before it, so there is nothing to resume: "
                         "lower optim.learning_rate or raise optim.warmup_steps and run the "
                         "command again (a run without a checkpoint starts afresh in the same "
                         "--output-dir)"), line
    again = _cli([*unstable[:-2], "--train.steps=2", "--optim.learning-rate=1e-3",
                  f"--output-dir={run_dir}"])
    assert again.returncode == 0, again.stderr[-3000:]


def test_batch_not_divisible_by_devices(tmp_path: Path) -> None:
    proc = _cli([*TINY, "--train.steps=4", "--train.parallel=pmap", "--data.batch-size=7",
                 f"--output-dir={tmp_path / 'run'}"], devices=2)
    assert proc.returncode == 2
    assert ("error: batch size 7 is not divisible by the 2 device(s) of parallel='pmap'; use a "
            "batch size that is a multiple of 2") in proc.stderr


def test_time_limit_stops_with_a_checkpoint_and_resumes(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    first = _cli([*TINY, "--train.steps=100000", "--time-limit=0.05", f"--output-dir={run_dir}"])
    assert first.returncode == 0, first.stderr[-3000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    stopped = summary["steps"]
    assert 0 < stopped < 100000 and stopped % 4 == 0  # checked every train.log_every=4 steps
    assert f"time limit of 3s reached at step {stopped}" in summary["stopped_early"]
    assert read_state(run_dir / "checkpoints")[0] == stopped  # a checkpoint at the stop
    assert read_jsonl(run_dir / "metrics.jsonl", "eval")[-1]["step"] == stopped
    resumed = _cli(["--resume", "--time-limit=0.05", f"--output-dir={run_dir}", "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert f"resuming at step {stopped}" in resumed.stderr
    again = json.loads((run_dir / "summary.json").read_text())
    assert again["resumed_from"] == stopped and again["steps"] > stopped
    assert [r["step"] for r in _train_records(run_dir)] == list(range(1, again["steps"] + 1))
