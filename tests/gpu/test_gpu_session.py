"""The prepared GPU run (`scripts/dev/gpu_session.sh`) end to end on the CPU: every stage a GPU
call runs (the GPU tests, the benchmarks at the defaults and with the GPU recipe, the recipe
from an older tree, the profile, the layout probe)
on the `tiny` preset for a few steps, so that a typo in the script or a stage it calls fails
here, not on a lent GPU whose minutes are counted. Timings are not checked: stages' exit codes,
the JSON each writes and the tables the script prints last."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from bertjax.bench.tables import render

ROOT = Path(__file__).resolve().parents[2]
STAGES = ("setup", "tests", "bench", "recipe", "baseline", "variant", "perleaf", "profile",
          "pretrain", "gap", "probe", "dropout")


@pytest.mark.slow
def test_the_gpu_session_runs_every_stage_on_the_cpu(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "bertjax", tmp_path / "old" / "bertjax")  # the "older" tree
    env = {**os.environ, "GPU_SESSION_MODE": "cpu", "OUT": str(tmp_path / "out"),
           "RESULTS": str(tmp_path / "results"), "BASELINE_TREE": str(tmp_path / "old"),
           "PRETRAIN_RUN": str(tmp_path / "pretrain-run"),
           # XLA parses GPU flags on a CPU too
           "VARIANT_FLAGS": "--xla_gpu_enable_triton_gemm=true;--xla_gpu_enable_command_buffer=",
           # transformers under torch.compile takes minutes on a CPU; tests/bench/test_bench.py runs it
           "IMPLS": "bertjax,hf-eager", "RECIPE_IMPLS": "bertjax",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "scripts/dev/gpu_session.sh", *STAGES], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stderr[-3000:]
    log = (tmp_path / "out" / "log.txt").read_text()
    exits = dict(re.findall(r"^=== (\w+): exit (\d+)", log, flags=re.M))
    ran = [s for s in STAGES if s != "variant"] + ["variant1", "variant2"]
    assert exits == dict.fromkeys(ran, "0"), log[-4000:]
    with tarfile.open(tmp_path / "out" / "results.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {"bench_default.json", "bench_recipe.json", "profile_default.json",
            "profile_recipe.json"} <= names
    for name in ("bench_default.json", "bench_recipe.json", "bench_baseline.json",
                 "bench_dropout.json", "bench_variant1.json", "bench_variant2.json",
                 "bench_perleaf.json"):
        report = json.loads((tmp_path / "results" / name).read_text())
        assert report["settings"]["preset"] == "tiny" and report["rows"], name
        assert not report["failed"], report["failed"]
        assert report["provenance"]["kind"] == "train"
    recipe = json.loads((tmp_path / "results" / "bench_recipe.json").read_text())["settings"]
    assert recipe["prng_impl"] == "rbg"
    dropout = json.loads((tmp_path / "results" / "bench_dropout.json").read_text())["settings"]
    assert dropout["prng_impl"] == "rbg" and dropout["flat_optimizer"]
    assert dropout["overrides"] == {} and recipe["overrides"] == {"attention_probs_dropout_prob": 0.0}
    perleaf = json.loads((tmp_path / "results" / "bench_perleaf.json").read_text())["settings"]
    assert recipe["flat_optimizer"] and not perleaf["flat_optimizer"]
    variant = json.loads((tmp_path / "results" / "bench_variant2.json").read_text())["rows"][0]
    assert variant["xla_options"]["XLA_FLAGS"] == "--xla_gpu_enable_command_buffer="
    stamp = json.loads((tmp_path / "results" / "bench_variant2.json").read_text())["provenance"]
    assert stamp["command"].startswith("XLA_FLAGS=--xla_gpu_enable_command_buffer= bertjax")
    baseline = json.loads((tmp_path / "results" / "bench_baseline.json").read_text())
    assert baseline["provenance"]["commit"] == "baseline tree"  # not the working tree's
    assert "bertjax bench train" in done.stdout  # the tables, printed last
    assert re.search(r"^pretrain job: [\d,]+ tokens/s .* of the bench's pipelined", done.stdout,
                     flags=re.M), done.stdout[-2000:]
    assert re.search(r"^  after step 2: [\d,]+ tokens/s = \d+% of the bench's pipelined$",
                     done.stdout, flags=re.M), done.stdout[-2000:]  # the job's speed records
    job = tmp_path / "results" / "pretrain_job.json"  # rendered as benchmarks.md's job table
    report = json.loads(job.read_text())
    assert report["provenance"]["kind"] == "pretrain-job" and report["share_of_pipelined"] > 0
    assert report["provenance"]["command"].startswith("bertjax pretrain --model.dtype=bfloat16")
    assert "| the job after its first log interval (from step 2) |" in render(job)
    assert len(re.findall(r"^the job's loop +[\d.]+ +[\d,]+$",
                          done.stdout, flags=re.M)) == 3, done.stdout[-2000:]  # gap: 3 flag sets
    assert re.search(r"^recheck at 1 layers: the model as it is beside the fastest fix",
                     done.stdout, flags=re.M), done.stdout[-2000:]  # the layout probe's
    assert re.search(r"^  synced steps \(\d+, medians each\): dispatch [\d.]+ ms", done.stdout,
                     flags=re.M), done.stdout[-2000:]  # the profile's synced-step account


def test_a_stage_past_the_deadline_is_not_run(tmp_path: Path) -> None:
    """DEADLINE (seconds into the call) cuts the stages' limits; one with under 10 s left is
    reported as not run and the script fails, so a lent GPU's call ends with its tables."""
    env = {**os.environ, "GPU_SESSION_MODE": "cpu", "OUT": str(tmp_path / "out"),
           "RESULTS": str(tmp_path / "results"), "DEADLINE": "5",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "scripts/dev/gpu_session.sh", "setup"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    log = (tmp_path / "out" / "log.txt").read_text()
    assert re.search(r"^=== setup: not run, DEADLINE=5 s is \d s away$", log, flags=re.M), log
    assert "failed stages: setup" in log
