"""Where commands write (issue 29), beside the refusals in test_bad_input.py: `--force` replaces
an earlier output file whole, `attention --force` replaces a directory it wrote (and nothing
else), and a `--json` that cannot be written is refused before the benchmark runs."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from use_helpers import tiny_checkpoint

from bertjax.cli.main import main


def _one_error(err: str, command: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"bertjax {command}: error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_force_replaces_an_earlier_output_file_and_leaves_nothing_beside_it(tmp_path, capsys):
    lines = tmp_path / "lines.txt"
    lines.write_text("the king\na fool\n")
    out = tmp_path / "vectors.npy"
    out.write_bytes(b"an earlier file")
    argv = ["embed", str(tiny_checkpoint()), "--file", str(lines), "--out", str(out)]
    assert main(argv) == 2
    assert "already exists; pass --force" in _one_error(capsys.readouterr().err, "embed")
    assert out.read_bytes() == b"an earlier file"
    assert main([*argv, "--force"]) == 0
    assert np.load(out).shape[0] == 2
    assert sorted(os.listdir(tmp_path)) == ["lines.txt", "vectors.npy"]  # no temporary left


def test_attention_force_replaces_the_directory_it_wrote_whole(tmp_path, capsys):
    out = tmp_path / "att"
    argv = ["attention", str(tiny_checkpoint()), "the king is dead", "--out", str(out)]
    assert main(argv) == 0
    assert sorted(os.listdir(out)) == ["attention.html", "layer_01.png", "layer_02.png"]
    capsys.readouterr()
    assert main([*argv, "--layers", "1"]) == 2
    assert (f"--out {out} already exists (written by `bertjax attention`); pass --force"
            in _one_error(capsys.readouterr().err, "attention"))
    assert main([*argv, "--layers", "1", "--force"]) == 0
    # this run's files only: the earlier layer_02.png is not left to pass for this run's
    assert sorted(os.listdir(out)) == ["attention.html", "layer_01.png"]
    assert sorted(os.listdir(tmp_path)) == ["att"]
    (out / "notes.txt").write_text("mine")  # once the user's file is there, never again
    assert main([*argv, "--force"]) == 2
    assert "did not write" in _one_error(capsys.readouterr().err, "attention")
    assert (out / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize(("argv", "runner"), [
    (["bench", "train"], "bertjax.bench.run.run_benchmark"),
    (["bench", "infer"], "bertjax.bench.run.run_benchmark"),
    (["bench", "embed", "--lines", "4"], "bertjax.bench.embed.run_embed_benchmark"),
    (["bench", "corpus"], "bertjax.bench.corpus.run_corpus_benchmark"),
])
def test_bench_json_that_cannot_be_written_is_refused_before_the_benchmark(
        argv, runner, unwritable_dir, monkeypatch, capsys):
    def never(*args, **kwargs):
        raise AssertionError("the benchmark ran before --json was checked")

    monkeypatch.setattr(runner, never)
    path = Path(unwritable_dir) / "bench.json"
    assert main([*argv, "--json", str(path)]) == 2
    line = _one_error(capsys.readouterr().err, " ".join(argv[:2]))
    assert f"--json {path}: cannot write in {unwritable_dir}" in line
    assert "check its permissions or choose another --json" in line
    assert ".tmp" not in line  # the user's path, not a temporary one
