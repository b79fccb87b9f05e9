"""The files bertjax writes follow the umask (issue 29): a model `convert`, `finetune` or
`save_pretrained` writes is as readable as any file the user makes (0644 under umask 022), and as
private as they ask (0600 under 077). safetensors creates its file 0600 whatever the umask; the
atomic rename would keep that mode, and another user or a serving process could not read the
model."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from flax import nnx
from use_helpers import tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.common.files import umask


@pytest.fixture(params=[0o022, 0o077], ids=["umask 022", "umask 077"])
def mask(request):
    previous = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(previous)


def _modes(root: Path) -> dict[str, str]:
    """Every path under `root` (itself too) with its permission bits, in octal."""
    return {str(p.relative_to(root)): oct(stat.S_IMODE(p.stat().st_mode))
            for p in [root, *sorted(root.rglob("*"))]}


def _expected(root: Path, mask: int) -> dict[str, str]:
    return {name: oct((0o777 if (root / name).is_dir() else 0o666) & ~mask)
            for name in _modes(root)}


def test_umask_is_read_without_changing_it(mask):
    assert umask() == mask
    assert os.umask(mask) == mask  # it was left as it was


@pytest.mark.slow
def test_convert_follows_the_umask(tmp_path, mask, capsys):
    out = tmp_path / "hf"
    assert main(["convert", str(tiny_checkpoint()), str(out)]) == 0
    assert (out / "model.safetensors").is_file()
    assert _modes(out) == _expected(out, mask)


def test_save_pretrained_follows_the_umask(tmp_path, mask):
    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    config = model.config.replace(id2label=("neg", "pos"))
    out = tmp_path / "classifier"
    bertjax.save_pretrained(bertjax.BertForSequenceClassification(config, rngs=nnx.Rngs(0)),
                            out, tokenizer)
    assert _modes(out) == _expected(out, mask)


@pytest.mark.slow
def test_finetune_follows_the_umask(tmp_path, mask, capsys):
    rows = [{"text": f"{'the king' if i % 2 else 'a fool'} speaks {i}", "label": i % 2}
            for i in range(16)]
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ft"
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                 str(out), "--epochs", "1", "--batch-size", "8", "--max-length", "16",
                 "--no-progress"]) == 0
    assert (out / "model" / "model.safetensors").is_file()
    assert _modes(out) == _expected(out, mask)
