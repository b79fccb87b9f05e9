"""Answers that were right but said the wrong thing (issue 62, "Vague"), about runs, `parity`
and the caches: each now names the real problem and a fix that exists, once, and leaves every
input as it was."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from message_checks import refused, snapshot
from use_helpers import tiny_checkpoint, tiny_run

from bertjax.cli.main import main
from bertjax.data import corpus_documents
from bertjax.jobs.pretrain.data_cache import unusable

TEXT = "To be or not to [MASK]."


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A real 6-step run (checkpoints at 3 and 6), shared; tests work on copies."""
    return tiny_run(tmp_path_factory.mktemp("vague-runs") / "run")


@pytest.fixture
def run(trained, tmp_path) -> Path:
    return Path(shutil.copytree(trained, tmp_path / "run"))


def test_a_run_without_run_config_names_the_resume_that_restores_it(run, capsys):
    """It said "holds neither config.json nor run_config.json", with no way back; the resume
    that restores the file then said "nothing was trained or written"."""
    (run / "run_config.json").unlink()
    before = snapshot(run)
    line = refused(["fill-mask", str(run), TEXT], capsys)
    assert line == (f"bertjax fill-mask: error: {run} holds a `bertjax pretrain` run's "
                    "checkpoints but not its run_config.json; run `bertjax pretrain --resume "
                    f"--output-dir {run}` (it writes the file again from the newest checkpoint's "
                    "copy, and trains on only if the run had not finished), or pass another model")
    assert snapshot(run) == before
    assert main(["pretrain", "--resume", "--output-dir", str(run)]) == 0  # the fix, followed
    out = capsys.readouterr().out
    assert (f"the run in {run} had already finished (6 steps); nothing was trained; wrote back "
            "run_config.json, which was missing. Its summary:") in out
    assert (run / "run_config.json").is_file()
    assert main(["fill-mask", str(run), TEXT]) == 0


def test_parity_refuses_a_preset_beside_a_model(run, capsys):
    """`parity --hf RUN --preset base` compared RUN and ignored --preset silently."""
    before = snapshot(run)
    line = refused(["parity", "--hf", str(run), "--preset", "base"], capsys)
    assert line == (f"bertjax parity: error: --preset sets the size of a randomly initialised "
                    f"model; --hf {run} is compared at its own size: leave out --preset (or --hf)")
    assert snapshot(run) == before



def test_parity_refuses_a_family_beside_a_model(run, capsys):
    """--model-type names a random preset's family; a model given by --hf has its own."""
    line = refused(["parity", "--hf", str(run), "--model-type", "modernbert"], capsys)
    assert line == (f"bertjax parity: error: --model-type sets the family of a randomly "
                    f"initialised model; --hf {run} has its own: leave out --model-type (or --hf)")


def test_parity_refuses_train_steps_on_a_preset_without_next_sentence(capsys):
    """--train-steps trains MLM + NSP; a ModernBERT preset is pre-trained as a masked LM."""
    line = refused(["parity", "--preset", "tiny", "--model-type", "modernbert",
                    "--train-steps", "2"], capsys)
    assert line == ("bertjax parity: error: --train-steps trains BERT's pre-training objective "
                    "(masked LM and next sentence); the modernbert preset is a ModernBertForMaskedLM: "
                    "leave out --train-steps, or pass a BERT pre-training checkpoint (a `bertjax "
                    "pretrain` run)")

def test_parity_on_a_damaged_run_warns_in_one_line(run, capsys):
    """It printed Python's raw warning with a source line under it."""
    target = max((run / "checkpoints" / "6" / "state").rglob("d/*"),
                 key=lambda p: p.stat().st_size)
    target.write_bytes(target.read_bytes()[:10])
    before = snapshot(run)
    assert main(["parity", "--hf", str(run)]) == 0
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"bertjax parity: warning: in {run}, checkpoint step 6 is damaged (")
    assert line.endswith("skipped, loaded step 3 instead (the newest readable step)")
    assert snapshot(run) == before


def test_a_data_cache_that_cannot_be_written_is_one_warning(tmp_path, unwritable_dir,
                                                            monkeypatch, capsys):
    """A read-only BERTJAX_DATA_CACHE (or a file there) was silently unused."""
    cache = unwritable_dir / "data"
    monkeypatch.setenv("BERTJAX_DATA_CACHE", str(cache))
    corpus = tmp_path / "plays.txt"  # forty held-out documents: quick to make data of
    docs = itertools.islice(corpus_documents("shakespeare", split="eval"), 40)
    corpus.write_text("\n\n".join("\n".join(doc) for doc in docs) + "\n", encoding="utf-8")
    assert main(["pretrain", "--model.preset=tiny", f"--data.corpus={corpus}",
                 "--data.vocab-size=200", "--data.seq-len=32", "--data.batch-size=4",
                 "--data.eval-batches=1", "--train.steps=1", "--no-progress",
                 f"--output-dir={tmp_path / 'run'}"]) == 0
    warnings = [w for w in capsys.readouterr().err.splitlines() if "warning" in w]
    assert warnings == [f"warning: the data cache {cache} cannot be written (permission denied): "
                        "this run keeps its vocabulary and shards for no later run; point "
                        "BERTJAX_DATA_CACHE (data_cache= in Python) at a writable directory, or "
                        "set it to 0 to turn the cache off"]
    assert os.listdir(unwritable_dir) == []
    a_file = tmp_path / "cache"
    a_file.write_text("mine")  # a file where the cache should be: the same warning, its words
    assert unusable(a_file).startswith(f"the data cache {a_file} is a file, not a directory: ")
    assert unusable(a_file / "data").startswith(f"the data cache {a_file / 'data'} lies under "
                                                f"{a_file}, a file, not a directory")
    assert unusable(tmp_path / "new" / "data") is None and a_file.read_text() == "mine"


def _read_only(directory: Path) -> list[str] | None:
    """The command prefix that runs a command with `directory` read-only: nothing as a user
    chmod stops, a private read-only bind mount as root (who ignores modes); None if neither."""
    if os.geteuid() != 0:
        directory.chmod(0o555)
        return []
    wrap = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" "$0" && mount -o remount,bind,ro '
            '"$0" && exec "$@"', str(directory)]
    if shutil.which("unshare") is None or subprocess.run(
            [*wrap, "touch", str(directory / "probe")], capture_output=True).returncode == 0:
        return None  # no mount namespace here, or the mount did not hold
    return wrap


def test_a_read_only_compilation_cache_is_one_warning_per_process(tmp_path):
    """It printed "Error writing persistent compilation cache entry" once per program: 8 for
    fill-mask."""
    cache = tmp_path / "xla"
    cache.mkdir()
    wrap = _read_only(cache)
    if wrap is None:
        pytest.skip("no way to make a directory read-only here (root without mount namespaces)")
    env = {k: v for k, v in os.environ.items() if k != "JAX_COMPILATION_CACHE_DIR"}
    done = subprocess.run([*wrap, sys.executable, "-m", "bertjax.cli", "fill-mask",
                           str(tiny_checkpoint()), TEXT], capture_output=True, text=True,
                          timeout=300, env={**env, "BERTJAX_COMPILE_CACHE": str(cache)})
    cache.chmod(0o755)
    assert done.returncode == 0, done.stderr[-3000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith(f"bertjax fill-mask: warning: the compilation cache {cache} cannot be "
                           "written (")
    assert line.endswith("this command compiles its programs anew and keeps none; make it "
                         "writable, or point BERTJAX_COMPILE_CACHE at another directory (0 turns "
                         "the cache off)")
    assert os.listdir(cache) == []
