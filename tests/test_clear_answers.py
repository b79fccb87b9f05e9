"""Answers that were right but said the wrong thing, or too much (issue 45, "Vague"): each now
names the real problem and a fix that exists. Every case runs on real files, from the command
line (exit status, the message's first line) or the API, and leaves every input byte-identical.

The NaN stop before any checkpoint is tested with the other NaN stop in test_pretrain_resume.py,
a path that is no Hub id and an id the Hub cannot be asked for in test_hub.py, the Python API's
arguments in test_api_arguments.py.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from use_helpers import tiny_checkpoint, tiny_run

from bertjax.cli.main import main
from bertjax.train.manifest import MANIFEST


def _snapshot(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A real 6-step run (checkpoints at 3 and 6), shared; tests work on copies."""
    return tiny_run(tmp_path_factory.mktemp("clear") / "run")


@pytest.fixture
def run(trained, tmp_path) -> Path:
    copy = tmp_path / "run"
    shutil.copytree(trained, copy)
    return copy


def _cli(*argv: str) -> subprocess.CompletedProcess:
    """The command in its own process: what it prints at exit (a thread's late report) too."""
    return subprocess.run([sys.executable, "-m", "bertjax.cli", *argv], capture_output=True,
                          text=True, timeout=300, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_a_damaged_step_without_its_manifest_is_one_warning_not_68_tracebacks(run):
    """With bertjax_files.json gone a step is read without its checksums: an array file missing
    made Orbax's event loop close with TensorStore reads in flight, each reporting "RuntimeError:
    Event loop is closed" (409 lines). Its arrays are now read first, one at a time."""
    step = run / "checkpoints" / "6"
    (step / MANIFEST).unlink()
    data = sorted((step / "state").rglob("d/*"), key=lambda p: -p.stat().st_size)
    data[0].unlink()
    before = _snapshot(run)
    done = _cli("fill-mask", str(run), "to be or not to [MASK] .")
    assert done.returncode == 0, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith(f"bertjax fill-mask: warning: in {run}, checkpoint step 6 is "
                               "damaged (")
    assert lines[0].endswith("skipped, loaded step 3 instead (the newest readable step)")
    assert "Event loop" not in done.stderr and "Traceback" not in done.stderr
    assert _snapshot(run) == before


def test_a_broken_run_config_of_a_run_being_read_names_a_fix_for_a_reader(run, capsys):
    """fill-mask has no --output-dir to choose: the fix is the copy each checkpoint keeps, which
    a resume writes back (not Orbax's files, whose layout is Orbax's own)."""
    (run / "run_config.json").write_text("{broken\n")
    before = _snapshot(run)
    assert main(["fill-mask", str(run), "to be or not to [MASK] ."]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"bertjax fill-mask: error: {run}/run_config.json cannot be read as "
                           "JSON (")
    assert line.endswith(f"delete it and run `bertjax pretrain --resume --output-dir {run}` (it "
                         "writes the file again from the newest checkpoint's copy, and trains on "
                         "only if the run had not finished), or pass another model")
    assert _snapshot(run) == before
    (run / "run_config.json").unlink()  # the fix, followed
    resumed = _cli("pretrain", "--resume", "--output-dir", str(run))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert json.loads((run / "run_config.json").read_text())["train"]["steps"] == 6
    assert _cli("fill-mask", str(run), "to be or not to [MASK] .").returncode == 0


def test_a_run_with_another_tokenizer_blames_the_tokenizer_not_the_checkpoint(run, capsys):
    for name in ("tokenizer.json", "vocab.txt"):  # another model's, 400 tokens against 300
        shutil.copy(tiny_checkpoint() / name, run / name)
    before = _snapshot(run)
    assert main(["fill-mask", str(run), "to be or not to [MASK] ."]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"bertjax fill-mask: error: {run}/tokenizer.json has 400 tokens but the "
                    "checkpoint (step 6) was trained with a vocabulary of 300: the tokenizer is "
                    f"not this run's; restore it from the copy its shards keep: cp "
                    f"{run}/data/train/tokenizer.json {run}/tokenizer.json")
    assert _snapshot(run) == before
    shutil.copy(run / "data" / "train" / "tokenizer.json", run / "tokenizer.json")  # the fix
    assert main(["fill-mask", str(run), "to be or not to [MASK] ."]) == 0


def test_reading_a_runs_held_out_batches_writes_nothing_into_it(run):
    """`bertjax.data` on a run's data/eval/ (to evaluate it) once cached its NSP pairs there."""
    from bertjax.data import PretrainingBatches

    before = _snapshot(run)
    batches = PretrainingBatches(run / "data" / "eval", seq_len=32, global_batch_size=4,
                                 max_predictions=5, shuffle=False)
    assert next(batches)["input_ids"].shape == (4, 32)
    assert _snapshot(run) == before


def test_convert_names_itself_when_it_refuses_an_output_folder(tmp_path, capsys):
    """It once named `bertjax export`, a name the command no longer has."""
    folder = tmp_path / "thesis"
    folder.mkdir()
    (folder / "chapter1.tex").write_text("\\chapter{Introduction}\n")
    before = _snapshot(tmp_path)
    assert main(["convert", str(tiny_checkpoint()), str(folder)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line == (f"bertjax convert: error: OUT_DIR {folder} already holds files that are not "
                    "a model (chapter1.tex); choose another OUT_DIR (a new or empty directory): "
                    "a directory is replaced only if it holds a model, and only with --force")
    assert _snapshot(tmp_path) == before


def test_choose_warns_when_it_cuts_a_long_context(tmp_path, capsys):
    """Every other command warns when it cuts a text; `choose` cut a 5,000-word context to 128
    tokens silently."""
    from flax import nnx

    from bertjax import BertConfig, BertForMultipleChoice, Tokenizer, save_pretrained

    tokenizer = Tokenizer.load(tiny_checkpoint())
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size,
                                    max_position_embeddings=256, pad_token_id=tokenizer.special.pad)
    model = tmp_path / "choices"
    save_pretrained(BertForMultipleChoice(config, rngs=nnx.Rngs(0)), model, tokenizer)
    before = _snapshot(model)
    context = " ".join(["the king is dead"] * 1250)  # 5,000 words
    assert main(["choose", str(model), "--context", context, "--choice", "long live the king",
                 "--choice", "a fool"]) == 0
    out, err = capsys.readouterr()
    assert err.strip().splitlines() == [
        f"bertjax choose: warning: --context + choice {n} has {cut} more tokens than the 128 "
        "allowed: cut to fit; raise --max-length (the model takes up to 256) or shorten it"
        for n, cut in ((1, 4880), (2, 4879))]
    assert len(out.strip().splitlines()) == 2
    assert _snapshot(model) == before
