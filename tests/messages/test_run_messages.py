"""What commands say about a `bertjax pretrain` run directory (issue 29): a run without its
tokenizer names the copy to restore; `--resume` of a copied run names where it is now; a damaged
step is stated once by `--resume`; a run stopped before any evaluation writes strict JSON."""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
from use_helpers import DATA_CACHE, tiny_run

from bertjax.cli.main import main
from bertjax.jobs.pretrain.job import pretrain
from bertjax.jobs.pretrain.summary import read_summary
from bertjax.jobs.stop import Interrupted, StopRequest
from bertjax.runs import config as rc
from bertjax.runs.layout import RunDir
from bertjax.train.saved import finished_steps

TEXT = "to be or not to [MASK] ."


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    return tiny_run(tmp_path_factory.mktemp("run") / "run")


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _lines(err: str) -> list[str]:
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.strip()]


def test_a_run_without_its_tokenizer_names_the_copy_to_restore(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    (run / "tokenizer.json").unlink()  # vocab.txt is still there: passing it is no fix
    before = _snapshot(run)
    assert main(["fill-mask", str(run), TEXT]) == 2
    (line,) = _lines(capsys.readouterr().err)
    copy = run / "data" / "train" / "tokenizer.json"
    assert line == (f"bertjax fill-mask: error: {run} is a run without its tokenizer: "
                    f"{run / 'tokenizer.json'} is missing; restore it from the copy its shards "
                    f"keep: cp {copy} {run / 'tokenizer.json'}")
    assert "vocab.txt" not in line and _snapshot(run) == before
    shutil.copy(copy, run / "tokenizer.json")  # the fix it names
    assert main(["fill-mask", str(run), TEXT]) == 0


def test_resume_of_a_copied_finished_run_names_where_it_is_now(run_dir, tmp_path, capsys):
    moved = tmp_path / "elsewhere" / "run"
    shutil.copytree(run_dir, moved)
    before = _snapshot(moved)
    assert main(["pretrain", "--resume", f"--output-dir={moved}"]) == 0
    out = capsys.readouterr().out
    assert f"the run in {moved} had already finished (6 steps)" in out
    assert f"outputs in {moved}" in out and str(run_dir) not in out
    assert _snapshot(moved) == before  # its summary.json (with the old path) is not rewritten


@pytest.mark.slow
def test_resume_states_a_damaged_step_once(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    data = max((p for p in (run / "checkpoints" / "6" / "state").rglob("*")
                if p.is_file() and p.parent.name == "d"), key=lambda p: p.stat().st_size)
    flipped = bytearray(data.read_bytes())
    flipped[len(flipped) // 2] ^= 0xFF
    data.write_bytes(bytes(flipped))
    assert main(["pretrain", "--resume", f"--output-dir={run}", "--no-progress"]) == 0
    lines = _lines(capsys.readouterr().err)
    about = [line for line in lines if "step 6" in line and "damaged" in line]
    assert len(about) == 1, lines  # once: no logging line, no Orbax or pybind11 text
    assert not any(line.startswith("WARNING:") or "pybind11" in line for line in lines), lines
    (moved,) = (run / "checkpoints_corrupt").iterdir()
    step = run / "checkpoints" / "6"
    assert about[0] == (f"warning: checkpoint step 6 is damaged ({data.relative_to(step)} does "
                        f"not match its digest (its bytes changed)) at {step}: skipped, restored "
                        f"step 3 instead; moved it to {moved}")
    assert finished_steps(run / "checkpoints") == [3, 6]  # step 6 trained again


@pytest.mark.slow
def test_a_run_stopped_before_any_evaluation_writes_strict_json(tmp_path, capsys):
    """No evaluation ran, so there is no accuracy yet: null in summary.json (a bare NaN is no
    JSON), NaN again once read back."""
    config = rc.load(None, {"model.preset": "tiny", "data.vocab_size": 300, "data.seq_len": 32,
                            "data.max_predictions": 5, "data.batch_size": 4,
                            "data.eval_batches": 1, "train.steps": 6, "train.eval_every": 6})
    run = tmp_path / "run"
    stop = StopRequest()

    def press_ctrl_c(step: int, metrics: dict) -> None:
        if not stop.requested:
            assert stop.press() is None  # in the loop: the step ends with a checkpoint

    with pytest.raises(Interrupted, match=r"at step \d of 6; saved a checkpoint"):
        pretrain(config, run, progress=False, on_step=press_ctrl_c, stop=stop,
                 data_cache=DATA_CACHE)

    def no_bare_constants(name: str) -> None:
        raise AssertionError(f"summary.json holds a bare {name}")

    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_bare_constants)
    assert summary["accuracy_ratio"] is None and summary["stopped_early"].startswith("interrupted")
    assert math.isnan(read_summary(RunDir(run)).accuracy_ratio)
    capsys.readouterr()
    assert main(["pretrain", "--resume", f"--output-dir={run}", "--no-progress"]) == 0
    summary = json.loads((run / "summary.json").read_text(), parse_constant=no_bare_constants)
    assert summary["steps"] == 6 and summary["accuracy_ratio"] is not None
