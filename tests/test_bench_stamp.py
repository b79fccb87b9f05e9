"""A benchmark's stamp (`bertjax.bench.stamp.provenance`): the command that re-measures it."""

from __future__ import annotations

import sys

import pytest

from bertjax.bench.stamp import provenance


def test_the_command_carries_xla_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["/usr/bin/bertjax", "bench", "train", "--impl", "bertjax"])
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    assert provenance("train")["command"] == "bertjax bench train --impl bertjax"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_command_buffer= --xla_dump_to=/tmp/a b")
    assert provenance("train")["command"] == (
        "XLA_FLAGS='--xla_gpu_enable_command_buffer= --xla_dump_to=/tmp/a b' "
        "bertjax bench train --impl bertjax")
