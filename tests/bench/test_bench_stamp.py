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


def test_a_named_commit_is_shortened_as_git_shortens_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """BERTJAX_COMMIT (a copy without git, on a lent GPU) reads as the tables' other commits."""
    monkeypatch.setenv("BERTJAX_COMMIT", "ad8d7c52eee3676de5bc37e9e717ad4d5180efb8")
    assert provenance("train")["commit"] == "ad8d7c52eee3"
    monkeypatch.setenv("BERTJAX_COMMIT", "AD8D7C52EEE3676DE5BC37E9E717AD4D5180EFB8-dirty")
    assert provenance("train")["commit"] == "ad8d7c52eee3-dirty"
    monkeypatch.setenv("BERTJAX_COMMIT", "baseline tree")  # a name, not a hash: kept as it is
    assert provenance("train")["commit"] == "baseline tree"
