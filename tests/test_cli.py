"""The `bertjax` command line: dispatch and the parity command's exit codes."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bertjax.cli import main


def test_parity_command_prints_a_passing_table(capsys):
    assert main(["parity", "--preset", "tiny", "--seq-len", "16"]) == 0
    out = capsys.readouterr().out
    assert "bertjax vs bert_torch" in out
    for name in ("mlm_logits", "nsp_logits", "sequence_output", "pooled_output", "attentions.1",
                 "hidden_states.2", "grad.bert.embeddings.word_embeddings.weight"):
        assert name in out
    assert " 0 failed" in out and "FAIL" not in out


def test_parity_command_fails_with_exit_code_1_when_a_tolerance_is_missed(capsys):
    # 1e-12 is below float32 round-off, so real differences must show up as failures
    assert main(["parity", "--preset", "tiny", "--seq-len", "8", "--tolerance", "1e-12"]) == 1
    assert "FAIL" in capsys.readouterr().out


def test_unknown_preset_is_rejected(capsys):
    with pytest.raises(SystemExit):
        main(["parity", "--preset", "gigantic"])
    assert "invalid choice: 'gigantic'" in capsys.readouterr().err


def test_console_script_help_lists_commands():
    out = subprocess.run([sys.executable, "-m", "bertjax.cli", "--help"], capture_output=True,
                         text=True, check=True).stdout
    assert "parity" in out and "vocab" in out and "data" in out
