"""Parallel strategies give the single-device result: pmap, mesh (data) and mesh (data x fsdp) on
4 and 8 forced CPU devices, gradient accumulation, and two real processes (jax.distributed, gloo)
running `scripts/pretrain.py` against one process with the same four devices.

Forced host devices must be configured before JAX is imported, so the strategies run in a
subprocess per device count (`python tests/train/test_parallel.py N OUT.json`, this file's `__main__`)
that trains every strategy for the same 5 steps and writes the largest differences for the tests
to assert on. Those subprocesses start first and run alongside the multi-process CLI runs.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # trains or compiles at length: CI runs the file, the fast tier leaves it out

ROOT = Path(__file__).resolve().parents[2]
TOL = 1e-5  # max abs difference allowed for every parameter, optimizer moment and loss

# The strategy runs: a global batch of 16 sequences splits over 8 devices x 2 micro-batches.
STEPS, BATCH, SEQ, PREDS, VOCAB = 5, 16, 16, 4, 128
RUNS: dict[int, list[tuple[str, str, int, int]]] = {  # devices -> (name, parallel, fsdp, accum)
    4: [("none_accum4", "none", 1, 4), ("pmap", "pmap", 1, 1), ("mesh_accum2", "mesh", 1, 2),
        ("mesh_fsdp4", "mesh", 4, 1)],
    8: [("pmap_accum2", "pmap", 1, 2), ("mesh", "mesh", 1, 1), ("mesh_fsdp2", "mesh", 2, 1),
        ("mesh_fsdp4_accum2", "mesh", 4, 2)],
}


def _env(devices: int) -> dict[str, str]:
    env = dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1")
    # LLVM's optimisation of the CPU code is off: compiles take about a third less time; the
    # SPMD partitioning and collectives under test are HLO passes, which still run.
    env["XLA_FLAGS"] = (f"--xla_force_host_platform_device_count={devices} "
                        "--xla_backend_optimization_level=0")
    return env


# --- the worker (runs in a subprocess with N forced devices) ------------------------------------


def make_batches(steps: int) -> list[dict[str, np.ndarray]]:
    """Deterministic pre-training batches: padded rows, empty prediction slots, both NSP labels."""
    rng = np.random.default_rng(1234)
    batches = []
    for _ in range(steps):
        lengths = rng.integers(SEQ // 2, SEQ + 1, BATCH)  # real tokens per row
        lengths[0] = SEQ
        real = np.arange(SEQ)[None, :] < lengths[:, None]  # (B, S)
        input_ids = np.where(real, rng.integers(5, VOCAB, (BATCH, SEQ)), 0).astype(np.int32)
        split = lengths // 2
        token_type_ids = (real & (np.arange(SEQ)[None, :] >= split[:, None])).astype(np.int32)
        positions = np.zeros((BATCH, PREDS), np.int32)
        weights = np.zeros((BATCH, PREDS), np.float32)
        for i in range(BATCH):
            n = int(rng.integers(0, PREDS + 1)) if i else PREDS  # 0..P real predictions
            positions[i, :n] = np.sort(rng.choice(np.arange(1, lengths[i]), n, replace=False))
            weights[i, :n] = 1.0
        masked_ids = np.where(weights > 0, rng.integers(5, VOCAB, (BATCH, PREDS)), 0)
        labels = rng.integers(0, 2, BATCH).astype(np.int32)
        labels[:2] = [0, 1]
        batches.append({
            "input_ids": input_ids, "token_type_ids": token_type_ids,
            "attention_mask": real.astype(np.int32), "masked_positions": positions,
            "masked_ids": masked_ids.astype(np.int32), "masked_weights": weights,
            "next_sentence_label": labels,
        })
    return batches


def _max_diff(a: Any, b: Any) -> float:
    import jax

    la, lb = jax.tree.leaves(a), jax.tree.leaves(b)
    assert len(la) == len(lb) and la
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(la, lb, strict=True))


def _tiny_model() -> Any:
    """The tiny BERT every strategy starts from (seed 0, no dropout)."""
    from flax import nnx

    from bertjax.config import BertConfig
    from bertjax.heads import BertForPreTraining

    config = BertConfig.from_preset("tiny", vocab_size=VOCAB, hidden_dropout_prob=0.0,
                                    attention_probs_dropout_prob=0.0)
    return BertForPreTraining(config, rngs=nnx.Rngs(0))


def _train(parallel: str, fsdp: int, accum: int, batches: list[dict[str, np.ndarray]]):
    """5 AdamW steps of the tiny BERT (no dropout) under one strategy: (strategy, state, losses)."""
    from bertjax.train.optim import OptimConfig, learning_rate_schedule, make_optimizer
    from bertjax.train.parallel import make_strategy
    from bertjax.train.step import create_train_state, make_train_step

    optim = OptimConfig(learning_rate=1e-3, warmup_steps=2, grad_accum_steps=accum)
    tx = make_optimizer(optim, 10)
    graphdef, state = create_train_state(_tiny_model(), tx, seed=0)
    strategy = make_strategy(parallel, fsdp=fsdp)
    strategy.check_batch_size(BATCH, accum)
    step = strategy.compile_step(make_train_step(
        graphdef, tx, learning_rate_schedule(optim, 10), grad_accum_steps=accum, dropout=False,
        axis_name=strategy.axis_name), state)
    state = strategy.place_state(state)
    losses = []
    for batch in batches:
        state, metrics = step(state, strategy.shard_batch(batch))
        losses.append(strategy.host_metrics(metrics)["loss"])
    return strategy, state, losses


def _fsdp_layout(strategy: Any, state: Any) -> dict[str, Any]:
    """How a mesh run laid out its state: one kernel's spec and shards, bytes on device 0."""
    import jax

    flat = jax.tree_util.tree_flatten_with_path(state.params)[0]
    name, kernel = next((jax.tree_util.keystr(p), x) for p, x in flat
                        if "intermediate" in jax.tree_util.keystr(p) and x.ndim == 2)
    device0 = jax.devices()[0]
    total = on_device0 = 0
    for leaf in jax.tree.leaves(state):
        total += leaf.nbytes
        on_device0 += sum(s.data.nbytes for s in leaf.addressable_shards if s.device == device0)
    return {
        "kernel": name, "shape": list(kernel.shape), "spec": str(kernel.sharding.spec),
        "shard_shapes": sorted({tuple(s.data.shape) for s in kernel.addressable_shards}),
        "distinct_shards": len({str(s.index) for s in kernel.addressable_shards}),
        "device0_fraction": on_device0 / total,
    }


def worker(devices: int, out: str) -> None:
    """Train the single-device reference and every strategy of RUNS[devices]; write diffs."""
    import jax
    from flax import nnx

    assert jax.device_count() == devices, jax.devices()
    batches = make_batches(STEPS)
    ref_strategy, ref_state, ref_losses = _train("none", 1, 1, batches)
    ref = ref_strategy.host_state(ref_state)
    initial = nnx.state(_tiny_model(), nnx.Param)
    results: dict[str, Any] = {"devices": jax.device_count(), "runs": {}}
    for name, parallel, fsdp, accum in RUNS[devices]:
        strategy, state, losses = _train(parallel, fsdp, accum, batches)
        host = strategy.host_state(state)
        entry = {
            "params": _max_diff(host.params, ref.params),
            "state": _max_diff((host.params, host.opt_state, host.step),
                               (ref.params, ref.opt_state, ref.step)),
            "loss": float(np.max(np.abs(np.array(losses) - np.array(ref_losses)))),
            "moved": _max_diff(host.params, initial),
        }
        if parallel == "mesh":
            entry["layout"] = _fsdp_layout(strategy, state)
        results["runs"][name] = entry
    Path(out).write_text(json.dumps(results, indent=1))


# --- fixtures: the strategy subprocesses ----------------------------------------------------------


@pytest.fixture(scope="module")
def strategy_workers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, dict]]:
    """Start one worker per device count; they are killed at the end if still running."""
    out = tmp_path_factory.mktemp("strategies")
    procs: dict[int, subprocess.Popen] = {}
    try:
        for n in RUNS:
            with open(out / f"{n}.log", "w") as log:
                procs[n] = subprocess.Popen([sys.executable, __file__, str(n), str(out / f"{n}.json")],
                                            env=_env(n), cwd=ROOT, stdout=log,
                                            stderr=subprocess.STDOUT)
        yield out, procs
    finally:
        _kill(procs.values())


@pytest.fixture(scope="module")
def strategy_results(strategy_workers: tuple[Path, dict]) -> dict[int, dict[str, Any]]:
    """The workers' max differences, per device count."""
    out, procs = strategy_workers
    try:
        for proc in procs.values():
            proc.wait(timeout=300)
    finally:
        _kill(procs.values())
    for n, proc in procs.items():
        assert proc.returncode == 0, f"{n} devices:\n{(out / f'{n}.log').read_text()[-4000:]}"
    return {n: json.loads((out / f"{n}.json").read_text()) for n in RUNS}


def _kill(procs: Any) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# --- two processes (jax.distributed, gloo) vs one process, through the real CLI -----------------

SCRIPT = ROOT / "scripts" / "pretrain.py"
# test_pretrain_resume's tiny run (dropout on: the masks must agree too), 6 steps, checkpoints at
# 3 and 6, one evaluation at the end; batch 8 splits over 4 devices.
CLI = [
    "--model.preset=tiny", "--model.hidden-dropout-prob=0.1",
    "--model.attention-probs-dropout-prob=0.1", "--data.vocab-size=300", "--data.seq-len=32",
    "--data.max-predictions=5", "--data.batch-size=8", "--data.eval-batches=2",
    "--optim.learning-rate=1e-3", "--optim.warmup-steps=4", "--train.eval-every=8",
    "--train.checkpoint-every=3", "--train.log-every=4", "--no-progress", "--train.steps=6",
    "--train.parallel=mesh", "--train.fsdp=2",  # mesh (data 2, fsdp 2): data axis across processes
]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


Launch = list[tuple[subprocess.Popen, Any]]  # (process, its log file)


def _start(run_dir: Path, processes: int, devices_each: int, *extra: str) -> Launch:
    """Start the CLI in `processes` processes (one jax.distributed run if more than one)."""
    port = _free_port()
    launch: Launch = []
    for i in range(processes):
        multi = [] if processes == 1 else [
            f"--coordinator-address=127.0.0.1:{port}", f"--num-processes={processes}",
            f"--process-id={i}"]
        log = open(run_dir.parent / f"{run_dir.name}.{i}.log", "w+")  # noqa: SIM115
        launch.append((subprocess.Popen(
            [sys.executable, str(SCRIPT), *CLI, f"--output-dir={run_dir}", *multi, *extra],
            env=_env(devices_each), cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    return launch


def _finish(launch: Launch, timeout: float = 200) -> list[str]:
    """Wait for every process (killed on timeout or error); assert all exit 0; their logs."""
    logs = []
    try:
        for proc, _ in launch:
            proc.wait(timeout=timeout)
    finally:
        _kill(proc for proc, _ in launch)
        for _, log in launch:
            log.seek(0)
            logs.append(log.read())
            log.close()
    codes = [proc.returncode for proc, _ in launch]
    assert codes == [0] * len(launch), "\n".join(f"--- {c}: {t[-3000:]}" for c, t in zip(
        codes, logs, strict=True))
    return logs


@pytest.fixture(scope="module")
def two_process_runs(
    tmp_path_factory: pytest.TempPathFactory, strategy_workers: tuple[Path, dict]
) -> dict[str, Any]:
    """Two processes x 2 devices; then, side by side, one process x 4 devices (which trains its
    own vocabulary and shards: the same ones) and the two-process run resumed after its last
    checkpoint was damaged.
    (`strategy_workers` is only requested so that the strategy subprocesses run meanwhile.)

    The two-process run goes first and makes the vocabulary and shards itself (process 0 writes,
    process 1 waits for them), so the test also covers that hand-over.
    """
    base = tmp_path_factory.mktemp("multihost")
    multi, single, resumed = base / "two_processes", base / "one_process", base / "resumed"
    _finish(_start(multi, 2, 2))
    shutil.copytree(multi, resumed)
    target = max((resumed / "checkpoints" / "6" / "state" / "d").iterdir(),
                 key=lambda f: f.stat().st_size)
    with open(target, "r+b") as f:
        f.truncate(target.stat().st_size // 3)
    launches = [_start(single, 1, 4), _start(resumed, 2, 2, "--resume")]
    try:
        logs = [_finish(launch) for launch in launches]
    finally:  # a failure in the first must not leave the second running
        _kill(proc for launch in launches for proc, _ in launch)
    return {"multi": multi, "single": single, "resumed": resumed, "resumed_logs": logs[1]}


def _state_diffs(dir_a: Path, dir_b: Path) -> dict[str, float]:
    """Max abs difference per leaf of the newest saved states (step 6 in both)."""
    import jax

    from bertjax.train.saved import read_state

    (step_a, state_a), (step_b, state_b) = (read_state(d / "checkpoints") for d in (dir_a, dir_b))
    assert step_a == step_b == 6
    flat_a = jax.tree_util.tree_flatten_with_path(state_a)[0]
    flat_b = jax.tree_util.tree_flatten_with_path(state_b)[0]
    assert [p for p, _ in flat_a] == [p for p, _ in flat_b] and len(flat_a) > 100
    diffs = {}
    for (path, a), (_, b) in zip(flat_a, flat_b, strict=True):
        a, b = np.asarray(a), np.asarray(b)
        assert a.dtype == b.dtype and a.shape == b.shape, jax.tree_util.keystr(path)
        diffs[jax.tree_util.keystr(path)] = float(np.max(np.abs(
            a.astype(np.float64) - b.astype(np.float64)))) if a.size else 0.0
    return diffs


def test_two_processes_match_one_process(two_process_runs: dict[str, Any]) -> None:
    multi, single = two_process_runs["multi"], two_process_runs["single"]
    assert (multi / "tokenizer.json").read_bytes() == (single / "tokenizer.json").read_bytes()
    diffs = _state_diffs(multi, single)
    worst = max(diffs, key=diffs.get)
    print(f"two processes vs one: max abs diff {diffs[worst]:.3g} ({worst}); bitwise equal: "
          f"{all(v == 0.0 for v in diffs.values())}")
    assert diffs[worst] <= TOL, (worst, diffs[worst])
    params = [k for k in diffs if "params" in k]
    assert params and max(diffs[k] for k in params) <= TOL

    # Process 0 logged global numbers: every train step's loss, gradient norm and token count,
    # the held-out metrics and the most-frequent-token baseline of the whole eval batches.
    from bertjax.train.metrics import read_jsonl

    for kind in ("train", "eval"):
        rec_m, rec_s = read_jsonl(multi / "metrics.jsonl", kind), read_jsonl(
            single / "metrics.jsonl", kind)
        assert [r["step"] for r in rec_m] == [r["step"] for r in rec_s] and rec_m
        for a, b in zip(rec_m, rec_s, strict=True):
            assert a.keys() == b.keys()
            for key in a:
                if key in ("perplexity", "accuracy_ratio"):
                    assert a[key] == pytest.approx(b[key], rel=1e-5), (kind, key)
                elif isinstance(a[key], float):
                    assert abs(a[key] - b[key]) <= TOL, (kind, a["step"], key, a[key], b[key])
                else:
                    assert a[key] == b[key], (kind, key)
    summary_m, summary_s = (json.loads((d / "summary.json").read_text()) for d in (multi, single))
    assert summary_m["baseline_token"] == summary_s["baseline_token"]
    assert summary_m["baseline_accuracy"] == summary_s["baseline_accuracy"]


def test_two_processes_resume_past_a_corrupt_checkpoint(two_process_runs: dict[str, Any]) -> None:
    """Both processes skip the damaged step 6, resume from step 3 and save step 6 again: the
    same processes and program, so the result is bitwise the uninterrupted run's."""
    logs = two_process_runs["resumed_logs"]
    assert "resuming at step 3" in logs[0]
    said = [[line for line in log.splitlines() if "step 6" in line and "damaged" in line]
            for log in logs]
    assert len(said[0]) == 1 and "skipped, restored step 3 instead; moved it to" in said[0][0]
    assert said[1:] == [[]]  # stated once, by process 0 (which moved it)
    resumed = two_process_runs["resumed"]
    assert [p.name.split(".")[0] for p in (resumed / "checkpoints_corrupt").iterdir()] == ["6"]
    diffs = _state_diffs(two_process_runs["multi"], resumed)
    assert max(diffs.values()) == 0.0, max(diffs.items(), key=lambda kv: kv[1])


# --- strategies vs one device ---------------------------------------------------------------------


@pytest.mark.parametrize("devices", sorted(RUNS))
def test_strategies_match_single_device(strategy_results, devices: int) -> None:
    results = strategy_results[devices]
    assert results["devices"] == devices
    assert set(results["runs"]) == {name for name, *_ in RUNS[devices]}
    for name, r in results["runs"].items():
        # every parameter, then every optimizer moment, then each step's loss
        assert r["params"] <= TOL, (name, r)
        assert r["state"] <= TOL, (name, r)
        assert r["loss"] <= TOL, (name, r)
        assert r["moved"] > 100 * TOL, (name, r)  # training moved the parameters: a real check


@pytest.mark.parametrize("devices", sorted(RUNS))
def test_fsdp_shards_parameters(strategy_results, devices: int) -> None:
    for (name, parallel, fsdp, _), r in zip(RUNS[devices], strategy_results[devices]["runs"]
                                            .values(), strict=True):
        if parallel != "mesh":
            continue
        layout = r["layout"]
        rows, cols = layout["shape"]
        if fsdp == 1:
            assert "fsdp" not in layout["spec"], (name, layout)
            assert layout["shard_shapes"] == [[rows, cols]]
            assert layout["device0_fraction"] == pytest.approx(1.0, abs=1e-12)
            continue
        assert "fsdp" in layout["spec"], (name, layout)
        # (128, 512) is sharded on its 512 axis: each device holds 1/fsdp of it
        assert layout["shard_shapes"] == [[rows, cols // fsdp]], (name, layout)
        assert layout["distinct_shards"] == fsdp, (name, layout)
        # parameters and Adam moments: device 0 holds about 1/fsdp of the state's bytes (only a
        # few tiny leaves, e.g. the step counter, are replicated)
        assert layout["device0_fraction"] <= 1.0 / fsdp + 0.01, (name, layout)


if __name__ == "__main__":
    worker(int(sys.argv[1]), sys.argv[2])
