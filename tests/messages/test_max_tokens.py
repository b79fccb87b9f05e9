"""No --max-tokens crashes (issue 62): a packed batch is sized by the inputs, not by the option; a
value whose batch can never fit in the memory the process may use is refused when it is read,
naming the largest that can; one whose batch of these inputs would not fit beside what is in use
is refused before any work, naming the largest that fits; an allocation that still fails is one
line naming the option, exit status 2, not a bug report. The command line and the Python API.

Measured (tiny preset, one 9-token text, `fill-mask --max-tokens 2000000`): peak resident memory
14.4 GB before (31,250 rows of 64 tokens for one row of input), 0.35 GB after.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
from flax import nnx
from message_checks import snapshot
from use_helpers import tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.common import memory
from bertjax.use import packed

PROBE = Path(__file__).with_name("max_tokens_probe.py")
LIMIT = 4 * 1024**3  # RLIMIT_DATA of the probe: a command answers in well under 1 GiB
TEXT = "To be or not to [MASK]."



@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """The probe's inputs: the tiny checkpoint and a classifier, a tagger and a reader of its
    size (random heads), a few lines, a few labelled examples."""
    root = tmp_path_factory.mktemp("max-tokens")
    shutil.copytree(tiny_checkpoint(), root / "model")
    base, tokenizer = bertjax.from_pretrained(root / "model")
    heads = {"classifier": (bertjax.BertForSequenceClassification, ("neg", "pos")),
             "tagger": (bertjax.BertForTokenClassification, ("O", "B-PER", "I-PER")),
             "reader": (bertjax.BertForQuestionAnswering, ("LABEL_0", "LABEL_1"))}
    for name, (cls, labels) in heads.items():
        config = base.config.replace(id2label=labels)
        bertjax.save_pretrained(cls(config, rngs=nnx.Rngs(0)), root / name, tokenizer)
    (root / "lines.txt").write_text("a storm at sea\nthe king is dead\nlong live the king\n")
    (root / "train.jsonl").write_text("".join(
        json.dumps({"text": f"{'the king' if i % 2 else 'a fool'} {i}", "label": i % 2}) + "\n"
        for i in range(16)))
    (root / "out").mkdir()
    return root


def test_every_packing_command_answers_or_refuses_any_value_in_one_line(work):
    """Hypothesis draws (command, value) in one process under a 4 GiB memory limit: before
    the fix, `embed --max-tokens 2000000` died there of "RESOURCE_EXHAUSTED: Out of memory
    allocating 17456000000 bytes", a traceback and a bug report (fill-mask 99999999999,
    classify 10^12 and similarity 10^9 too)."""
    inputs = {name: snapshot(work / name) for name in ("model", "classifier", "tagger",
                                                         "reader")}
    texts = {name: (work / name).read_bytes() for name in ("lines.txt", "train.jsonl")}
    done = subprocess.run([sys.executable, str(PROBE), str(work), str(LIMIT)],
                          capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert done.returncode == 0, (done.returncode, done.stdout[-3000:], done.stderr[-3000:])
    ran = done.stdout.splitlines()
    assert len(ran) >= 7 and any(": exit 0" in r for r in ran) and any(": exit 2" in r
                                                                        for r in ran), ran
    assert {name: snapshot(work / name) for name in inputs} == inputs
    assert {name: (work / name).read_bytes() for name in texts} == texts


def test_a_batch_is_as_large_as_its_inputs_not_the_option():
    layouts = packed.packed_layouts(np.array([9]), max_tokens=10**7, limit=128)
    (_, layout), = layouts
    assert (layout.num_rows, layout.seq_len) == (1, 64)  # was 156,250 rows
    lengths = np.array([40] * 10)  # one text a row of 64: ten rows, or four a batch at 256
    assert [sub.num_rows for _, sub in packed.packed_layouts(lengths, max_tokens=10**7,
                                                             limit=128)] == [10]
    assert [sub.num_rows for _, sub in packed.packed_layouts(lengths, max_tokens=256,
                                                             limit=128)] == [4, 4, 4]


def test_a_value_no_batch_can_hold_is_refused_by_the_parser_naming_the_largest(tmp_path,
                                                                                capsys):
    largest = memory.largest_max_tokens()
    assert largest == memory.memory_limit() // memory.TOKEN_BYTES_FLOOR
    with pytest.raises(SystemExit) as exited:
        main(["fill-mask", str(tmp_path / "no-model"), TEXT, "--max-tokens", str(10**12)])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bertjax fill-mask: error: argument --max-tokens: 1000000000000 is "
                           "more token slots than a batch can hold in the memory this process "
                           "may use (")
    assert f"pass {largest} or less" in line


def test_the_python_api_refuses_the_same_values_and_answers_the_rest():
    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    largest = memory.largest_max_tokens()
    with pytest.raises(bertjax.InputError, match=rf"max_tokens \(--max-tokens\) {largest + 1} is "
                                                 rf"more token slots .* pass max_tokens "
                                                 rf"\(--max-tokens\) {largest} or less"):
        bertjax.fill_mask(model, tokenizer, [TEXT], max_tokens=largest + 1)
    packed_ = bertjax.fill_mask(model, tokenizer, [TEXT], max_tokens=largest)
    assert packed_[0][0][0].token == bertjax.fill_mask(model, tokenizer, [TEXT])[0][0][0].token


def test_a_batch_of_these_inputs_that_cannot_fit_beside_what_is_in_use_is_refused(monkeypatch):
    """With 64 MiB left, 2,000 lines in one batch (about 1.3 GB) are refused before any work,
    naming the largest budget that fits; that one answers, the same vectors."""
    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    lines = [f"the king is dead {i}" for i in range(2000)]
    unpacked = bertjax.embed(model, tokenizer, lines[:64])
    monkeypatch.setattr(packed, "available_memory", lambda: 64 * 1024**2)
    with pytest.raises(bertjax.InputError) as refused:
        bertjax.embed(model, tokenizer, lines, max_tokens=10**6)
    message = str(refused.value)
    assert message.startswith("max_tokens (--max-tokens) 1000000: batches of these inputs (")
    assert "more than half the 0.1 GiB this process can still use; pass max_tokens (--max-tokens) " \
        in message
    fits = int(message.rsplit("(--max-tokens) ", 1)[1].split()[0])
    assert fits % 64 == 0 and 64 <= fits < 10**6
    vectors = bertjax.embed(model, tokenizer, lines, max_tokens=fits)
    assert np.abs(vectors[:64] - unpacked).max() <= 1e-5


@pytest.mark.parametrize(("error", "option"), [
    (MemoryError("Unable to allocate 373. GiB"), ["--max-tokens", "4096"]),
    (jax.errors.JaxRuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 5149000080 bytes."),
     []),
])
def test_an_allocation_that_still_fails_is_one_line_naming_the_option(error, option, capsys,
                                                                     monkeypatch):
    from bertjax.use import fill_mask

    def exhausted(*args, **kwargs):
        raise error

    monkeypatch.setattr(fill_mask, "_mlm_logits", exhausted)
    before = snapshot(tiny_checkpoint())
    assert main(["fill-mask", str(tiny_checkpoint()), TEXT, *option]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("bertjax fill-mask: error: ran out of memory (")
    assert line.endswith("lower --max-tokens (it is 4096)" if option
                         else "give fewer or shorter inputs, or a smaller model")
    assert snapshot(tiny_checkpoint()) == before
