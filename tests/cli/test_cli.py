"""The `bertjax` command line: dispatch and the parity command's exit codes."""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys

import pytest

from bertjax.cli.main import COMMANDS, main


@pytest.mark.slow
def test_parity_command_prints_a_passing_table(capsys):
    assert main(["parity", "--preset", "tiny", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "bertjax vs bert_torch" in out
    for name in ("mlm_logits", "nsp_logits", "sequence_output", "pooled_output", "attentions.1",
                 "hidden_states.2", "grad.bert.embeddings.word_embeddings.weight"):
        assert name in out
    assert " 0 failed" in out and "FAIL" not in out


@pytest.mark.slow
def test_parity_command_fails_with_exit_code_1_when_a_weight_differs(capsys, monkeypatch):
    """A mirror given one weight moved by 1e-4 (a conversion that is wrong by that much): FAIL,
    exit status 1. (A tiny --tolerance no longer forces failures: the bar is at least the
    mirror's own float32 noise, see tests/parity/test_parity_noise.py.)"""
    import parity.convert
    import parity.tensors

    right = parity.convert.flax_to_torch

    def one_weight_moved(model):
        state = right(model)
        state["bert.embeddings.layer_norm.weight"][0] += 1e-4
        return state

    # the conversion `compare` makes once for both mirrors
    monkeypatch.setattr(parity.tensors, "flax_to_torch", one_weight_moved)
    assert main(["parity", "--preset", "tiny", "--seq-len", "8"]) == 1
    out = capsys.readouterr().out
    assert "FAIL" in out and not out.rstrip().endswith(" 0 failed")


def test_unknown_preset_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["parity", "--preset", "gigantic"])
    assert "invalid choice: 'gigantic'" in capsys.readouterr().err


def test_console_script_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "bertjax.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "parity" in out and "vocab" in out and "data" in out


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_help_formats(command):
    """argparse %-formats help text: a bare "15%" in any option's help breaks `--help` (it did)."""
    parser = argparse.ArgumentParser(prog=f"bertjax {command}")
    importlib.import_module(COMMANDS[command][0]).add_arguments(parser)
    subcommands = parser._subparsers._group_actions if parser._subparsers else []  # bench WHAT
    for each in [parser, *(p for action in subcommands for p in action.choices.values())]:
        assert "--help" in each.format_help()


# Runs the CLI with PyTorch and transformers made unimportable, as after `pip install bertjax`.
NO_TORCH = ("import sys; sys.modules['torch'] = None; sys.modules['transformers'] = None\n"
            "from bertjax.cli.main import main; sys.exit(main(sys.argv[1:]))\n")


@pytest.mark.slow
def test_pretrain_needs_no_torch(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-c", NO_TORCH, "pretrain", "--model.preset=tiny", "--data.vocab-size=200",
         "--data.seq-len=32", "--data.max-predictions=5", "--data.batch-size=4",
         "--data.eval-batches=1", "--train.steps=2", "--train.eval-every=2", "--no-progress",
         f"--output-dir={tmp_path / 'run'}"], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "done: 2 steps" in proc.stdout


def test_parity_without_torch_says_how_to_install_it():
    proc = subprocess.run([sys.executable, "-c", NO_TORCH, "parity"], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 2
    assert "bertjax parity compares bertjax with its PyTorch mirror, which needs PyTorch" in proc.stderr
    assert "pip install 'bertjax[torch]'" in proc.stderr


def test_a_bug_keeps_its_traceback_and_exits_1_while_bad_input_is_one_line(
        tmp_path, monkeypatch, capsys):
    """A ValueError from deep inside (as a shape bug in JAX would raise) is no user's mistake:
    its traceback, a line asking for a report, exit status 1. The same command given bad input
    still answers in one line with exit status 2, and the bug writes nothing."""
    from bertjax.cli.errors import BUG_REPORT
    from bertjax.data.tokenizer import Tokenizer

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("to be or not to be\nthat is the question\n\nwhether tis nobler\n")

    def shape_bug(*args, **kwargs):
        raise ValueError("dot_general requires contracting dimensions to have the same shape")

    monkeypatch.setattr(Tokenizer, "train", shape_bug)
    assert main(["vocab", "--corpus", str(corpus), "--out", str(tmp_path / "vocab")]) == 1
    err = capsys.readouterr().err
    assert "Traceback (most recent call last)" in err and "in shape_bug" in err
    assert err.rstrip().endswith(f"bertjax vocab: error: {BUG_REPORT}")
    assert not (tmp_path / "vocab").exists()
    monkeypatch.undo()
    assert main(["vocab", "--corpus", str(tmp_path / "missing.txt"), "--out",
                 str(tmp_path / "vocab")]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert err.startswith("bertjax vocab: error: ") and "missing.txt" in err
