"""Bad MODEL arguments (issue 18): damaged `bertjax pretrain` run directories, damaged Hugging Face
directories, a model without the head a command needs, `bench embed` on a run, and `export`'s
output directory. Each ends as one line on stderr and exit status 2 (130 for Ctrl-C), or, for a
damaged checkpoint that has a readable one beside it, one warning line; and nothing is lost.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from use_helpers import sentences, tiny_checkpoint, tiny_run

import bertjax
from bertjax import BertConfig
from bertjax.cli.main import main
from bertjax.io.weights import model_to_numpy
from bertjax.model import BertModel
from bertjax.train.saved import CheckpointCorruptWarning, best_step, finished_steps

ROOT = Path(__file__).resolve().parents[1]
TEXT = "to be or not to be : that is the [MASK] ."


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    """A `bertjax pretrain` run of 6 steps with checkpoints at 3 and 6 (evaluated at both)."""
    run = tiny_run(tmp_path_factory.mktemp("run") / "run")
    assert finished_steps(run / "checkpoints") == [3, 6]
    return run


def _damage(step_dir: Path, how: str = "truncate") -> None:
    """What a full disk, a killed copy or a bad sector leaves: the largest array-data file of the
    state item cut in half, or Orbax's OCDBT manifest overwritten with garbage."""
    if how == "truncate":
        target = max((step_dir / "state" / "d").iterdir(), key=lambda p: p.stat().st_size)
        with open(target, "r+b") as f:
            f.truncate(target.stat().st_size // 2)
    else:
        target = step_dir / "state" / "manifest.ocdbt"
        target.write_bytes(b"\x17garbage" * (target.stat().st_size // 8 + 1))


def _damaged_copy(run_dir: Path, tmp_path: Path, *steps: int, how: str = "truncate") -> Path:
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    for step in steps:
        _damage(run / "checkpoints" / str(step), how)
    return run


def _best_and_other(run: Path) -> tuple[int, int]:
    best = best_step(run / "checkpoints")
    return best, ({3, 6} - {best}).pop()


def _snapshot(root: Path) -> dict[str, bytes | None]:
    """Every path under `root` with its bytes (None for a directory)."""
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _one_line(err: str, command: str, kind: str = "error") -> str:
    """The one line a command printed on stderr (no traceback, no Orbax/absl logging)."""
    lines = err.strip().splitlines()
    assert len(lines) == 1, err[-3000:]
    assert lines[0].startswith(f"bertjax {command}: {kind}: "), lines[0]
    assert "Traceback" not in err and "absl" not in err
    return lines[0]


# --- a damaged checkpoint in a run directory ------------------------------------------------------


@pytest.mark.parametrize("command", ["fill-mask", "embed", "convert"])
def test_damaged_best_checkpoint_falls_back_with_one_warning(run_dir, tmp_path, capsys, command):
    run = _damaged_copy(run_dir, tmp_path, best_step(run_dir / "checkpoints"))
    best, other = _best_and_other(run)
    before = _snapshot(run)
    lines = tmp_path / "lines.txt"
    lines.write_text("a storm at sea\nthe king is dead\n")
    argv = {"fill-mask": [str(run), TEXT],
            "embed": [str(run), "--file", str(lines), "--out", str(tmp_path / "v.npy")],
            "convert": [str(run), str(tmp_path / "hf")]}[command]
    assert main([command, *argv]) == 0
    warning = _one_line(capsys.readouterr().err, command, "warning")
    assert f"checkpoint step {best} is damaged" in warning and f"loaded step {other}" in warning
    assert _snapshot(run) == before  # nothing moved aside, created or cleaned up in the run
    if command == "convert":  # the step that was loaded is the readable one
        exported, _ = bertjax.from_pretrained(tmp_path / "hf")
        expected, _ = bertjax.from_pretrained(run_dir, step=other)
        np.testing.assert_array_equal(np.asarray(exported.mlm_head.bias[...]),
                                      np.asarray(expected.mlm_head.bias[...]))


def test_from_pretrained_warns_with_the_class_resume_uses(run_dir, tmp_path):
    run = _damaged_copy(run_dir, tmp_path, best_step(run_dir / "checkpoints"))
    best, other = _best_and_other(run)
    with pytest.warns(CheckpointCorruptWarning, match=rf"step {best} is damaged .* step {other}"):
        bertjax.from_pretrained(run)


@pytest.mark.parametrize("how", ["truncate", "garbage"])
def test_console_shows_only_our_lines(run_dir, tmp_path, how):
    """In a fresh process, as a user runs it: Orbax, absl and TensorStore print nothing."""
    run = _damaged_copy(run_dir, tmp_path, best_step(run_dir / "checkpoints"), how=how)
    best, other = _best_and_other(run)
    command = [sys.executable, "-m", "bertjax.cli", "fill-mask", str(run), TEXT]
    fallback = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    assert fallback.returncode == 0, fallback.stderr[-3000:]
    assert f"loaded step {other}" in _one_line(fallback.stderr, "fill-mask", "warning")
    chosen = subprocess.run([*command, "--step", str(best)], capture_output=True, text=True,
                            cwd=ROOT)
    assert chosen.returncode == 2
    assert f"--step {other}" in _one_line(chosen.stderr, "fill-mask")


def test_a_damaged_chosen_step_names_the_readable_steps(run_dir, tmp_path, capsys):
    run = _damaged_copy(run_dir, tmp_path, 6)
    assert main(["nsp", str(run), "--step", "6", "To be.", "Or not."]) == 2
    line = _one_line(capsys.readouterr().err, "nsp")
    assert "checkpoint step 6 is damaged" in line and "choose a readable step: --step 3" in line
    with pytest.raises(ValueError, match=r"step 6 is damaged .*readable: \[3\]"):
        bertjax.from_pretrained(run, step=6)


def test_every_step_damaged_is_one_line(run_dir, tmp_path, capsys):
    run = _damaged_copy(run_dir, tmp_path, 3, 6)
    assert main(["fill-mask", str(run), TEXT]) == 2
    line = _one_line(capsys.readouterr().err, "fill-mask")
    assert "no checkpoint of" in line and "steps [3, 6] are all damaged" in line


def test_missing_step_and_no_checkpoint_name_the_steps(run_dir, tmp_path, capsys):
    assert main(["fill-mask", str(run_dir), "--step", "5", TEXT]) == 2
    assert "has no checkpoint step 5; it has steps [3, 6]" in _one_line(
        capsys.readouterr().err, "fill-mask")
    with pytest.raises(SystemExit) as exit_:  # argparse refuses a negative step
        main(["fill-mask", str(run_dir), "--step", "-1", TEXT])
    assert exit_.value.code == 2
    assert "expected an integer >= 0" in _one_line(capsys.readouterr().err, "fill-mask")
    untrained = tmp_path / "untrained"
    untrained.mkdir()
    for name in ("run_config.json", "tokenizer.json", "vocab.txt"):
        shutil.copy(run_dir / name, untrained / name)
    assert main(["embed", str(untrained), "--file", str(untrained / "vocab.txt"),
                 "--out", str(tmp_path / "v.npy")]) == 2
    line = _one_line(capsys.readouterr().err, "embed")
    assert "has no checkpoint yet" in line and "bertjax pretrain --resume" in line
    assert sorted(p.name for p in untrained.iterdir()) == [
        "run_config.json", "tokenizer.json", "vocab.txt"]  # loading created nothing


def test_loading_a_run_leaves_a_save_in_progress_alone(run_dir, tmp_path):
    """A run may still be training: its unfinished step (Orbax's temporary directory) and its
    checkpoint list are not touched by a command that loads the run."""
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    in_progress = run / "checkpoints" / "9.orbax-checkpoint-tmp-1234"
    shutil.copytree(run / "checkpoints" / "6", in_progress)
    bertjax.from_pretrained(run)
    assert in_progress.is_dir()


def test_a_damaged_run_config_is_named(run_dir, tmp_path, capsys):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run, ignore=shutil.ignore_patterns("checkpoints", "data"))
    (run / "run_config.json").write_bytes(b'{"model": {"preset": "ti')
    assert main(["fill-mask", str(run), TEXT]) == 2
    line = _one_line(capsys.readouterr().err, "fill-mask")
    assert str(run / "run_config.json") in line and "JSON" in line


# --- a model without the head a command needs ---------------------------------------------------


def test_classify_on_a_pretraining_run_says_to_fine_tune(run_dir, tmp_path, capsys):
    examples = tmp_path / "examples.txt"
    examples.write_text("a storm at sea\n")
    assert main(["classify", str(run_dir), "--file", str(examples)]) == 2
    line = _one_line(capsys.readouterr().err, "classify")
    assert "has no weights for classifier, which BertForSequenceClassification needs" in line
    assert "bertjax finetune MODEL" in line and "pre-trained with that head" not in line


def test_fill_mask_on_a_bare_encoder_says_where_the_heads_come_from(tmp_path, capsys):
    from bertjax.data import Tokenizer

    tokenizer = Tokenizer.train(sentences(100), vocab_size=200)
    config = BertConfig.from_preset("tiny", vocab_size=tokenizer.vocab_size)
    bare = tmp_path / "bare"
    bertjax.save_pretrained(BertModel(config, rngs=nnx.Rngs(0)), bare, tokenizer)
    assert main(["fill-mask", str(bare), TEXT]) == 2
    line = _one_line(capsys.readouterr().err, "fill-mask")
    assert "which BertForMaskedLM needs here" in line and "bertjax pretrain" in line


# --- bench embed --------------------------------------------------------------------------------


def test_bench_embed_accepts_a_run_directory(run_dir, tmp_path, monkeypatch):
    pytest.importorskip("transformers")
    from bertjax.bench.embed import run_embed_benchmark

    # A temp root of this test's own: another worker's benchmarks make bertjax-bench-* in /tmp too.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    result = run_embed_benchmark(sentences(8), model=run_dir, batch_size=8, repeats=1, quiet=True)
    assert result["lines"] == 8 and result["max_abs_diff"] < 1e-4  # the same weights in both rows
    assert list(scratch.glob("bertjax-bench-*")) == []  # the export for transformers' row was removed


def test_bench_embed_refuses_a_directory_that_is_no_model(tmp_path, capsys):
    assert main(["bench", "embed", "--model", str(tmp_path), "--lines", "4"]) == 2
    line = _one_line(capsys.readouterr().err, "bench embed")
    assert "neither config.json" in line and "run_config.json" in line


# --- a damaged Hugging Face directory -----------------------------------------------------------


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _to_pytorch_bin(model: Path) -> None:
    import torch
    from safetensors.torch import load_file

    torch.save(load_file(model / "model.safetensors"), model / "pytorch_model.bin")
    (model / "model.safetensors").unlink()


def _larger_tokenizer(model: Path) -> None:
    """Another model's tokenizer, with more tokens than these weights have embeddings."""
    from bertjax.data import Tokenizer

    Tokenizer.train(sentences(), vocab_size=800).save(model)


def _shard(model: Path) -> None:
    from safetensors.numpy import load_file, save_file

    tensors = load_file(model / "model.safetensors")
    names = sorted(tensors)
    halves = {"a.safetensors": names[::2], "b.safetensors": names[1::2]}
    for file, keys in halves.items():
        save_file({k: tensors[k] for k in keys}, model / file)
    index = {"weight_map": {k: file for file, keys in halves.items() for k in keys}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    (model / "model.safetensors").unlink()


DAMAGES = {
    "config truncated": ("config.json", lambda m: _truncate(m / "config.json")),
    "config not UTF-8": ("config.json", lambda m: (m / "config.json").write_bytes(b"{\xff\xfe}")),
    "config a list": ("config.json", lambda m: (m / "config.json").write_text("[1, 2]")),
    "config bad value": ("config.json", lambda m: (m / "config.json").write_text(
        '{"hidden_size": "big", "vocab_size": 400}')),
    "weights truncated": ("model.safetensors", lambda m: _truncate(m / "model.safetensors")),
    "weights garbage": ("model.safetensors",
                        lambda m: (m / "model.safetensors").write_bytes(os.urandom(4096))),
    "weights empty": ("model.safetensors", lambda m: (m / "model.safetensors").write_bytes(b"")),
    "tokenizer of another model": ("tokenizer.json", lambda m: _larger_tokenizer(m)),
    "tokenizer truncated": ("tokenizer.json", lambda m: _truncate(m / "tokenizer.json")),
    "pytorch_model.bin truncated": ("pytorch_model.bin", lambda m: (
        _to_pytorch_bin(m), _truncate(m / "pytorch_model.bin"))),
    "index damaged": ("model.safetensors.index.json", lambda m: (
        _shard(m), _truncate(m / "model.safetensors.index.json"))),
    "index shard missing": ("b.safetensors", lambda m: (_shard(m), (m / "b.safetensors").unlink())),
}


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_file_of_a_hugging_face_directory_is_named(tmp_path, capsys, damage):
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint(), model)
    file, spoil = DAMAGES[damage]
    spoil(model)
    before = _snapshot(model)
    assert main(["fill-mask", str(model), TEXT]) == 2
    line = _one_line(capsys.readouterr().err, "fill-mask")
    assert file in line, line
    assert _snapshot(model) == before


def test_weights_that_do_not_fit_config_json_are_one_line(tmp_path, capsys):
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint(), model)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps({**config, "num_hidden_layers": 3}))
    assert main(["embed", str(model), "--file", str(model / "vocab.txt"),
                 "--out", str(tmp_path / "v.npy")]) == 2
    line = _one_line(capsys.readouterr().err, "embed")
    assert "does not match the model config" in line and "num_hidden_layers=3" in line
    assert "and 13 more" in line  # 16 missing weights of layer 2: three named, the rest counted


# --- export's output directory ------------------------------------------------------------------


def _refuse_loading(monkeypatch) -> None:
    """OUT_DIR must be checked before the model is loaded (a slow step for a large model)."""
    def load(*args, **kwargs):
        raise AssertionError("the model was loaded before OUT_DIR was checked")

    monkeypatch.setattr("bertjax.pretrained.from_pretrained", load)


@pytest.mark.parametrize("occupant", ["file", "notes", "vocabulary", "under a file"])
def test_export_refuses_what_is_not_a_model(tmp_path, capsys, monkeypatch, occupant):
    out = tmp_path / "out"
    if occupant == "file":
        out.write_text("mine")
    elif occupant == "notes":
        out.mkdir()
        (out / "config.json").write_text("{}")
        (out / "notes.txt").write_text("mine")
    elif occupant == "vocabulary":  # a `bertjax vocab` directory: export files' names, no model
        out.mkdir()
        (out / "vocab.txt").write_text("[PAD]\n")
    else:
        (tmp_path / "file").write_text("mine")
        out = tmp_path / "file" / "out"
    before = _snapshot(tmp_path)
    _refuse_loading(monkeypatch)
    assert main(["convert", str(tiny_checkpoint()), str(out)]) == 2
    line = _one_line(capsys.readouterr().err, "convert")
    assert f"OUT_DIR {out}" in line and "choose another OUT_DIR" in line
    if occupant in ("notes", "vocabulary"):
        assert "already holds files that are not a model" in line
        assert "notes.txt" in line or "vocab.txt" in line
    assert _snapshot(tmp_path) == before


@pytest.mark.parametrize("failure", ["disk full", "Ctrl-C"])
@pytest.mark.parametrize("earlier", [False, True], ids=["new", "over an earlier export"])
def test_export_failing_half_way_leaves_nothing_and_a_retry_works(tmp_path, capsys, monkeypatch,
                                                                 failure, earlier):
    import safetensors.numpy

    out = tmp_path / "out"
    if earlier:
        assert main(["convert", str(tiny_checkpoint(1)), str(out)]) == 0
    before = _snapshot(tmp_path)
    capsys.readouterr()

    def crash(*args, **kwargs):
        if failure == "Ctrl-C":
            raise KeyboardInterrupt
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as m:
        m.setattr(safetensors.numpy, "save_file", crash)
        code = main(["convert", str(tiny_checkpoint()), str(out), *(["--force"] * earlier)])
    err = capsys.readouterr().err
    if failure == "Ctrl-C":
        assert code == 130 and "interrupted" in err and "Traceback" not in err
    else:
        assert code == 2 and "No space left on device" in _one_line(err, "convert")
    assert _snapshot(tmp_path) == before  # no half-made OUT_DIR, no temporary beside it
    retry = ["--force"] if earlier else []
    assert main(["convert", str(tiny_checkpoint()), str(out), *retry]) == 0  # the retry works
    words = "bert.embeddings.word_embeddings.weight"
    reloaded, expected = (model_to_numpy(bertjax.from_pretrained(m)[0])[words]
                          for m in (out, tiny_checkpoint()))
    np.testing.assert_array_equal(reloaded, expected)


@pytest.mark.parametrize("command", ["fill-mask", "convert"])
def test_weights_holding_nan_are_named_not_computed(tmp_path, capsys, command):
    """Flipped bytes in a float can make NaN: refused at load, naming the weight, instead of
    `[PAD] nan` (fill-mask) or "differs by nan" (convert's check)."""
    from safetensors.numpy import load_file, save_file

    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint(), model)
    tensors = load_file(model / "model.safetensors")
    name = next(k for k in tensors if k.endswith("query.weight"))
    tensors[name][0, 0] = np.nan
    save_file(tensors, model / "model.safetensors", metadata={"format": "pt"})
    before = _snapshot(tmp_path)
    argv = {"fill-mask": [str(model), TEXT], "convert": [str(model), str(tmp_path / "out")]}
    assert main([command, *argv[command]]) == 2
    line = _one_line(capsys.readouterr().err, command)
    assert f"the checkpoint {model} has NaN or Inf in 1 weight(s) (bert.layers.0." in line
    assert "download, convert or train it again" in line and "differs by" not in line
    assert _snapshot(tmp_path) == before
