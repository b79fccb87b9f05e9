"""`bertjax pretrain` on bad input and Ctrl-C: one line, exit 2 (130 for Ctrl-C), and nothing lost.

Bad corpora, run directories and config files are refused before anything is written (or what
was written is removed again), so the same command works once the input is fixed. A real SIGINT
during the set-up, the first step's compilation or the loop stops the run promptly with one line
saying how to resume, and the resumed run ends exactly where an uninterrupted one does.
"""

from __future__ import annotations

import json
import os
import random
import re
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from use_helpers import state_leaves

from bertjax.cli.main import main
from bertjax.jobs.pretrain.job import TRAIN_METRIC_KEYS
from bertjax.jobs.pretrain.start import check_run_dir
from bertjax.jobs.stop import NOTHING_TO_SAVE, SAVING, StopRequest
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.metrics import read_jsonl
from bertjax.train.saved import read_state

ROOT = Path(__file__).resolve().parents[2]
WORDS = ("the king queen lord lady sword crown night day love hate fear hope time death life "
         "brave old young fair foul sweet bitter good ill").split()


def _corpus(path: Path, documents: int = 120) -> Path:
    """A small BERT-format corpus: documents of sentences, a blank line between them."""
    rng = random.Random(0)
    lines = []
    for _ in range(documents):
        lines += [" ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))) + "."
                  for _ in range(rng.randint(3, 6))]
        lines.append("")
    path.write_text("\n".join(lines), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _corpus(tmp_path_factory.mktemp("corpus") / "corpus.txt")


def _tiny(corpus: Path, steps: int = 2) -> list[str]:
    return ["--model.preset=tiny", f"--data.corpus={corpus}", "--data.vocab-size=64",
            "--data.seq-len=32", "--data.max-predictions=5", "--data.batch-size=4",
            "--data.eval-batches=1", f"--train.steps={steps}", "--train.eval-every=2",
            "--train.log-every=1", "--no-progress"]


def _one_line_error(err: str, *needles: str) -> str:
    """The one stderr line of a refused command; it names every needle."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err and lines[0].startswith("bertjax pretrain: error: "), err
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    return lines[0]


def _listing(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


# --- bad input, nothing written ----------------------------------------------------------------


@pytest.mark.parametrize("kind", ["empty", "binary", "latin-1", "missing", "one document"])
def test_a_bad_corpus_is_one_line_and_leaves_nothing(tmp_path: Path, capsys, kind: str) -> None:
    path = tmp_path / f"{kind.replace(' ', '_')}.txt"
    content = {"empty": b"", "binary": b"PK\x03\x04\x00\x00binary", "latin-1": b"caf\xe9 au lait.\n",
               "one document": b"one sentence.\nanother sentence.\n"}.get(kind)
    if content is not None:
        path.write_bytes(content)
    run_dir, empty_dir = tmp_path / "new_run", tmp_path / "empty_run"
    empty_dir.mkdir()
    for out in (run_dir, empty_dir):
        assert main(["pretrain", *_tiny(path), f"--output-dir={out}"]) == 2
        err = capsys.readouterr().err
        line = next(x for x in err.splitlines() if "error" in x)
        assert "Traceback" not in err and "--data.corpus" in line and path.name in line, err
    assert not run_dir.exists()  # not even the directory
    assert list(empty_dir.iterdir()) == []


def test_a_parquet_corpus_without_a_text_column_is_named(tmp_path: Path, capsys) -> None:
    """The error names the columns there are and the option that chooses one; with it, the
    same corpus is read."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"body": ["One. Two."]}), path)
    assert main(["pretrain", *_tiny(path), f"--output-dir={tmp_path / 'run'}"]) == 2
    line = _one_line_error(capsys.readouterr().err, "--data.corpus",
                           "corpus.parquet has no column 'text' (its columns: body; text columns: "
                           "body)")
    assert "--data.text-field" in line, line
    assert not (tmp_path / "run").exists()
    from bertjax.jobs.pretrain.data import check_corpus
    from bertjax.runs import config as rc

    check_corpus(rc.load(None, {"data.corpus": str(path), "data.text_field": "body"}))


@pytest.mark.slow
def test_a_failed_set_up_does_not_block_the_retry(tmp_path: Path, corpus: Path, capsys) -> None:
    """A config left by a run that never reached a checkpoint (what bertjax used to leave after
    a bad corpus) no longer blocks a fresh start with other options, nor does a bad corpus."""
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    leftover = {"data": {"corpus": str(tmp_path / "gone.txt"), "vocab_size": 300}}
    (run_dir / "run_config.json").write_text(json.dumps(leftover))
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"\xff\xfe b\x00a\x00d\x00")
    assert main(["pretrain", *_tiny(bad), f"--output-dir={run_dir}"]) == 2
    _one_line_error(capsys.readouterr().err, "--data.corpus", "bad.txt")
    assert json.loads((run_dir / "run_config.json").read_text()) == leftover  # untouched

    assert main(["pretrain", *_tiny(corpus), f"--output-dir={run_dir}"]) == 0
    err = capsys.readouterr().err
    assert "never reached its first checkpoint: starting it afresh" in err
    assert json.loads((run_dir / "run_config.json").read_text())["data"]["corpus"] == str(corpus)
    assert read_state(run_dir / "checkpoints")[0] == 2


def test_resume_where_there_is_no_run(tmp_path: Path, corpus: Path, capsys) -> None:
    missing, empty = tmp_path / "missing", tmp_path / "empty"
    empty.mkdir()
    for where in (missing, empty):
        assert main(["pretrain", "--resume", f"--output-dir={where}"]) == 2
        line = _one_line_error(capsys.readouterr().err, str(where), "no run to resume",
                               "leave out --resume")
        assert f"bertjax pretrain --output-dir {where}" in line
    assert not missing.exists() and list(empty.iterdir()) == []


@pytest.mark.parametrize("files", [["notes.txt", "train.py"], ["vocab.txt", "tokenizer.json"],
                                   ["data/mine.csv"]])
def test_a_directory_of_other_files_is_refused(tmp_path: Path, corpus: Path, capsys,
                                               files: list[str]) -> None:
    run_dir = tmp_path / "project"
    for name in files:
        (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
        (run_dir / name).write_text(f"the user's {name}\n")
    before = _listing(run_dir)
    assert main(["pretrain", *_tiny(corpus), f"--output-dir={run_dir}"]) == 2
    _one_line_error(capsys.readouterr().err, str(run_dir), *files, "choose another --output-dir")
    assert _listing(run_dir) == before


@pytest.mark.parametrize("content", [b"{\n", b"\xff\xfe{}", b"[1, 2]"])
def test_a_damaged_run_config_is_one_line(tmp_path: Path, capsys, content: bytes) -> None:
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "4").mkdir(parents=True)
    (run_dir / "run_config.json").write_bytes(content)
    before = _listing(run_dir)
    for resume in (["--resume"], []):
        assert main(["pretrain", *resume, f"--output-dir={run_dir}"]) == 2
        _one_line_error(capsys.readouterr().err, str(run_dir / "run_config.json"),
                        f"delete it: `bertjax pretrain --resume --output-dir {run_dir}` writes it "
                        "again from the newest checkpoint's copy")
    assert _listing(run_dir) == before


@pytest.mark.slow
def test_a_deleted_run_config_comes_back_from_the_newest_checkpoint(tmp_path: Path, corpus: Path,
                                                                  capsys) -> None:
    """The fix the damaged-config error names: delete run_config.json and resume; the run's
    options come from the newest checkpoint's copy (not the defaults) and the file is written
    again."""
    run_dir = tmp_path / "run"
    assert main(["pretrain", *_tiny(corpus, steps=4), "--train.checkpoint-every=2",
                 f"--output-dir={run_dir}"]) == 0
    saved = (run_dir / "run_config.json").read_bytes()
    shutil.rmtree(run_dir / "checkpoints" / "4")  # a run stopped at step 2 of 4
    (run_dir / "run_config.json").unlink()
    capsys.readouterr()
    assert main(["pretrain", "--resume", f"--output-dir={run_dir}"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("done: 4 steps")
    assert json.loads((run_dir / "run_config.json").read_bytes()) == json.loads(saved)


@pytest.mark.parametrize(("name", "content", "needle"), [
    ("run.toml", b"[model]\npreset = \n", "is not valid TOML"),
    ("run.toml", b"[model]\npreset = 'caf\xe9'\n", "not UTF-8"),
    ("run.yaml", b"model: [1\ndata: 2\n", "is not valid YAML"),
    ("run.json", b"{\n", "is not valid JSON"),
    ("run.json", b"[]", "must hold a table of options"),
    ("run.ini", b"[model]\n", "unknown format '.ini'"),
    ("missing.toml", None, "does not exist"),
])
def test_a_bad_config_file_is_one_line(tmp_path: Path, capsys, name: str, content: bytes | None,
                                       needle: str) -> None:
    path = tmp_path / name
    if content is not None:
        path.write_bytes(content)
    assert main(["pretrain", f"--config={path}", f"--output-dir={tmp_path / 'run'}"]) == 2
    _one_line_error(capsys.readouterr().err, f"--config {path}", needle)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_resume_of_a_finished_run_keeps_its_summary(tmp_path: Path, corpus: Path, capsys) -> None:
    run_dir = tmp_path / "run"
    assert main(["pretrain", *_tiny(corpus), f"--output-dir={run_dir}"]) == 0
    capsys.readouterr()
    before, handler = _listing(run_dir), signal.getsignal(signal.SIGINT)
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, [])
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["tokens_per_s"] > 0 and summary["steps"] == 2
    assert main(["pretrain", "--resume", f"--output-dir={run_dir}"]) == 0
    out, err = capsys.readouterr()
    assert f"the run in {run_dir} had already finished (2 steps)" in out
    assert f"{summary['tokens_per_s']:,.0f} tokens/s" in out  # its summary, as it was
    assert "already finished" in err and "Traceback" not in err
    assert _listing(run_dir) == before  # summary.json, curves.png, logs: nothing rewritten
    assert signal.getsignal(signal.SIGINT) is handler  # nothing of the job's Ctrl-C is left
    assert signal.pthread_sigmask(signal.SIG_BLOCK, []) == mask


# --- Ctrl-C ------------------------------------------------------------------------------------


GC_CALLBACK_CTRL_C = """
import gc, os, signal, sys, time
from bertjax.cli.interrupts import ctrl_c_blocked, ctrl_c_stops
from bertjax.jobs.stop import StopRequest

fired, dropped = [], []

def callback(phase, info):
    if phase == "start" and not fired:
        fired.append(True)
        os.kill(os.getpid(), signal.SIGINT)  # a real Ctrl-C, while the callback runs

sys.unraisablehook = dropped.append
gc.callbacks.append(callback)
stop = StopRequest()
with ctrl_c_blocked(), ctrl_c_stops(stop, "test"):
    gc.collect()
    deadline = time.time() + 60  # a hang guard: the watcher thread counts it
    while not stop.requested and time.time() < deadline:
        time.sleep(0.01)
    try:
        stop.poll()
        stopped = False
    except KeyboardInterrupt:  # setting up: the job stops at its next poll
        stopped = True
print(bool(fired), stop.count, stopped, len(dropped))
"""


def test_a_ctrl_c_in_a_gc_callback_is_not_lost() -> None:
    """The cause of a once-swallowed Ctrl-C: JAX's gc callback runs often, and an exception
    raised in a gc callback is reported as unraisable and dropped. The command line's handler
    raises nothing in the main thread: a thread takes the signal and the job polls. (In its own
    process: this one's other threads do not block SIGINT.)"""
    out = subprocess.run([sys.executable, "-c", GC_CALLBACK_CTRL_C], capture_output=True,
                         text=True, timeout=120, cwd=ROOT)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["True", "1", "True", "0"]


def test_ctrl_c_in_the_loop_waits_for_the_step_and_the_checkpoint() -> None:
    """Once a step has run, the first Ctrl-C only asks the loop to stop; a second one ends the
    process at once, but not while a checkpoint is written: right after it."""
    stop = StopRequest(message=lambda: "bye")
    stop.trained(1)
    assert stop.press() is None and stop.requested
    stop.poll()  # the loop stops at the end of the step: nothing raised
    written = False
    with pytest.raises(KeyboardInterrupt):
        with stop.entering(SAVING):
            assert stop.press() is None  # the second: waits for the block
            written = True
    assert written and stop.count == 2
    assert stop.press() == "bye"  # outside a checkpoint: at once
    assert StopRequest(NOTHING_TO_SAVE, message=lambda: "now").press() == "now"


def test_ctrl_c_ends_the_process_at_once_while_the_main_thread_cannot_take_it(tmp_path) -> None:
    """Nothing to save (the first step compiling in XLA, say): the main thread is blocked where
    Python runs no handler, and Ctrl-C still ends the process at once with the job's message
    and exit status 130 (the order of events, no clock)."""
    code = ("import sys, threading\n"
            "from bertjax.cli.interrupts import ctrl_c_blocked, ctrl_c_stops\n"
            "from bertjax.jobs.stop import NOTHING_TO_SAVE, StopRequest\n"
            "stop = StopRequest(NOTHING_TO_SAVE, message=lambda: 'bye')\n"
            "with ctrl_c_blocked(), ctrl_c_stops(stop, 'test'):\n"
            "    print('ready', flush=True)\n"
            "    threading.Event().wait()  # never set: only the watcher can end this\n")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout.readline() == "ready\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=60)  # a hang guard, not a speed test
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and err == "bertjax test: bye\n"


def _ctrl_c_options(corpus: Path) -> list[str]:
    # dropout on: the resumed RNG must be exact too
    return ["--model.preset=tiny", "--model.hidden-dropout-prob=0.1", f"--data.corpus={corpus}",
            "--data.vocab-size=100", "--data.seq-len=32", "--data.max-predictions=5",
            "--data.batch-size=4", "--data.eval-batches=2", "--train.steps=160",
            "--train.eval-every=80", "--train.checkpoint-every=40", "--train.log-every=5",
            "--no-progress"]


def _env() -> dict[str, str]:
    return dict(os.environ, JAX_PLATFORMS="cpu", PYTHONUNBUFFERED="1",
                XLA_FLAGS="--xla_force_host_platform_device_count=1")


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bertjax.cli", "pretrain", *args], env=_env(),
                          capture_output=True, text=True, timeout=600, cwd=ROOT)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, corpus: Path) -> Path:
    """An uninterrupted run of the configuration the Ctrl-C tests interrupt."""
    run_dir = tmp_path_factory.mktemp("ref") / "run"
    proc = _cli([*_ctrl_c_options(corpus), f"--output-dir={run_dir}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


def _interrupt(args: list[str], run_dir: Path, moment: str) -> tuple[int, str]:
    """Start the run, send SIGINT at `moment`; (exit status, stderr)."""
    # the first step's compilation must take its time: not XLA's cached program (conftest.py)
    env = dict(_env(), JAX_COMPILATION_CACHE_DIR="") if moment == "compilation" else _env()
    if moment == "set-up":  # the data made here, not copied from the cache: a Ctrl-C lands in it
        env["BERTJAX_DATA_CACHE"] = "0"
    proc = subprocess.Popen([sys.executable, "-m", "bertjax.cli", "pretrain", *args], env=env,
                            cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    seen = ""
    try:
        if moment in ("mid-run", "compilation"):  # a file the loop writes is on disk
            # a checkpoint (the loop is running), or TensorBoard's events file: the metrics
            # writer is made, the next thing is the first step and its compilation
            ready = {"mid-run": lambda: (run_dir / "checkpoints" / "40").is_dir(),
                     "compilation": lambda: any((run_dir / "tensorboard").glob("events.*"))}
            deadline = time.time() + 300  # a hang guard
            while proc.poll() is None and time.time() < deadline and not ready[moment]():
                time.sleep(0.02)
        else:  # the line printed as the set-up begins, or the one just before the loop
            marker = {"set-up": "preparing the data", "loop start": "baseline: "}[moment]
            while marker not in seen and proc.poll() is None:
                seen += proc.stderr.readline()
        assert proc.poll() is None, f"the run ended before Ctrl-C: {seen}{proc.stderr.read()}"
        proc.send_signal(signal.SIGINT)
        rest = proc.communicate(timeout=600)[1]  # a hang guard, not a speed test
        return proc.returncode, seen + rest
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()




def _train_records(run_dir: Path) -> list[dict]:
    return [{k: r[k] for k in ("step", *TRAIN_METRIC_KEYS)}
            for r in read_jsonl(run_dir / "metrics.jsonl", "train")]


@pytest.mark.slow
@pytest.mark.parametrize("moment", ["set-up", "loop start", "compilation", "mid-run"])
def test_ctrl_c_stops_at_the_right_point_and_resumes_exactly(reference: Path, corpus: Path,
                                                             tmp_path: Path, moment: str) -> None:
    """Where a Ctrl-C stops, by the order of events (not by seconds: CI machines are shared):
    in the set-up, as the loop starts (TensorBoard's import) and while the first step compiles,
    before any step has run (nothing to save, no step's metrics logged); in the loop, at the end
    of a step with its checkpoint."""
    run_dir = tmp_path / "run"
    code, err = _interrupt([*_ctrl_c_options(corpus), f"--output-dir={run_dir}"], run_dir, moment)
    assert code == 130, err[-3000:]
    assert "Traceback" not in err and "Exception ignored" not in err, err
    lines = [x for x in err.splitlines() if x.startswith("bertjax pretrain:")]
    assert len(lines) == 1 and "interrupted (Ctrl-C)" in lines[0], err
    assert lines[0].endswith(
        f"resume with: bertjax pretrain --resume --output-dir {shlex.quote(str(run_dir))}")
    steps = [int(p.name) for p in (run_dir / "checkpoints").iterdir()] if (
        run_dir / "checkpoints").is_dir() else []
    trained = read_jsonl(run_dir / "metrics.jsonl", "train") if (
        run_dir / "metrics.jsonl").is_file() else []
    if moment == "set-up":
        assert "during set-up; no checkpoint was written" in lines[0] and not steps
    elif moment in ("loop start", "compilation"):  # at once: the first step never ran
        assert "before the first step; no checkpoint was written" in lines[0], lines[0]
        assert not steps and not trained and not (run_dir / "summary.json").exists()
        assert json.loads((run_dir / "run_config.json").read_text())["train"]["steps"] == 160
        # what it left is a run not yet started: a plain retry starts it afresh (reads only)
        saved = rc.RunConfig.from_dict(RunDir(run_dir).saved_config())
        start = check_run_dir(RunDir(run_dir), saved, resume=False)
        assert start.restart and not start.resume and not start.rebuild_data
    else:  # a step had run: a checkpoint of the step it stopped at
        stopped = int(re.search(r"at step (\d+) of 160; saved a checkpoint", lines[0])[1])
        assert stopped == max(steps) and 40 <= stopped < 160
        assert max(r["step"] for r in trained) == stopped
        assert json.loads((run_dir / "summary.json").read_text())["stopped_early"] == (
            f"interrupted (Ctrl-C) at step {stopped}")

    resumed = _cli(["--resume", f"--output-dir={run_dir}", "--no-progress"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    (step_a, a), (step_b, b) = read_state(reference / "checkpoints"), read_state(
        run_dir / "checkpoints")
    assert step_a == step_b == 160
    for x, y in zip(state_leaves(a), state_leaves(b), strict=True):
        assert x.dtype == y.dtype and np.array_equal(x, y), "the resumed run ended elsewhere"
    assert _train_records(run_dir) == _train_records(reference)
    assert read_jsonl(run_dir / "metrics.jsonl", "eval") == read_jsonl(
        reference / "metrics.jsonl", "eval")
    shutil.rmtree(run_dir)
