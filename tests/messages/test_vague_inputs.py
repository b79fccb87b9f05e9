"""Answers that were right but said the wrong thing (issue 62, "Vague"), about the files and
arguments a user gives: each now names the real problem and a fix that exists, at the command
line (exit status 2, the message's first line) and in Python, and leaves every input as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from message_checks import refused, snapshot
from use_helpers import tiny_checkpoint

import bertjax
from bertjax.cli.main import main
from bertjax.data.labelled import read_examples
from bertjax.use.embed import read_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "families"


def test_a_nul_byte_in_a_text_file_is_binary_not_text(tmp_path, capsys):
    """It was accepted and echoed raw, where the corpus reader calls NUL binary."""
    lines = tmp_path / "lines.txt"
    lines.write_bytes(b"to be or not to [MASK].\nhello\x00world [MASK]\n")
    before = snapshot(tmp_path)
    line = refused(["fill-mask", str(tiny_checkpoint()), "--file", str(lines)], capsys)
    assert line == (f"bertjax fill-mask: error: --file {lines} is binary, not text (a NUL byte "
                    "on line 2, at byte 29); give a UTF-8 text file, or remove the NUL bytes "
                    "(tr -d '\\000' < IN > OUT)")
    with pytest.raises(bertjax.InputError, match=r"file .* is binary, not text \(a NUL byte on "
                                                 r"line 2"):
        read_lines(lines)
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("others", [(), ("vocab.json", "merges.txt")])
def test_a_model_without_a_tokenizer_is_named_as_a_model(others, tmp_path, capsys):
    """It was called "a vocabulary directory", with `bertjax vocab` as the fix: wrong for
    pretrained weights. Tokenizer files of another format name transformers' conversion."""
    model = tmp_path / "model"
    shutil.copytree(tiny_checkpoint(), model, ignore=shutil.ignore_patterns(
        "tokenizer.json", "vocab.txt", "tokenizer_config.json", "special_tokens_map.json"))
    for name in others:
        (model / name).write_text("{}\n")
    before = snapshot(tmp_path)
    expected = (f"the model {model} has no tokenizer beside its weights (neither tokenizer.json "
                "nor vocab.txt); ")
    fix = ("it has vocab.json, merges.txt, which bertjax does not read: have transformers write "
           "a tokenizer.json beside them: python -c \"from transformers import AutoTokenizer; "
           f"AutoTokenizer.from_pretrained('{model}').save_pretrained('{model}')\"" if others
           else "copy in the tokenizer of the model these weights came from (its tokenizer.json "
           "or vocab.txt)")
    line = refused(["fill-mask", str(model), "To be or not to [MASK]."], capsys)
    assert line == f"bertjax fill-mask: error: {expected}{fix}"
    with pytest.raises(bertjax.InputError) as raised:
        bertjax.from_pretrained(model)
    assert str(raised.value) == expected + fix and "bertjax vocab" not in str(raised.value)
    assert snapshot(tmp_path) == before


def test_a_headerless_csv_says_its_first_row_was_read_as_the_header(tmp_path, capsys):
    """It said "no text in field 'text' (fields: hello, happy)"."""
    train = tmp_path / "train.csv"
    train.write_text("hello,happy\nthe king is dead,sad\n")
    before = snapshot(tmp_path)
    line = refused(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                    str(tmp_path / "out")], capsys)
    expected = (f"{train}:1: the first row (hello, happy) was read as the header, and it names "
                "no 'text' or 'label' field: a CSV file's first row names its fields; add a "
                "header row (text,label) above the examples, or set --text-field and "
                "--label-field to the names it has")
    assert line == f"bertjax finetune: error: {expected}"
    with pytest.raises(bertjax.InputError, match="was read as the header"):
        read_examples(train)
    assert snapshot(tmp_path) == before


@pytest.fixture(scope="module")
def reader(tmp_path_factory) -> Path:
    """A tiny BertForQuestionAnswering (random head) of 128 positions."""
    from flax import nnx

    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    out = tmp_path_factory.mktemp("reader") / "reader"
    bertjax.save_pretrained(bertjax.BertForQuestionAnswering(model.config, rngs=nnx.Rngs(0)),
                            out, tokenizer)
    return out


def test_a_question_longer_than_any_window_says_the_question_alone_does_not_fit(reader,
                                                                              capsys):
    """3,000 words: raising max_seq_len or lowering doc_stride, as it suggested, cannot help."""
    before = snapshot(reader)
    question = " ".join(["who"] * 3000)
    line = refused(["answer", str(reader), "--question", question, "--context",
                    "The king is dead."], capsys)
    assert line == ("bertjax answer: error: the question alone does not fit: it takes 3000 "
                    "pieces, and a window of the model's 128 positions holds at most 124 question "
                    "pieces beside one piece of context; shorten the question")
    model, tokenizer = bertjax.from_pretrained(reader)
    with pytest.raises(bertjax.InputError, match="the question alone does not fit"):
        bertjax.answer(model, tokenizer, question, "The king is dead.")
    with pytest.raises(bertjax.InputError, match=r"takes 100 pieces: with max_seq_len 128 a window "
                                                 r"holds 25 context pieces, not more than "
                                                 r"doc_stride 64; lower doc_stride \(--doc-stride\)"
                                                 r" to 24 or less$"):
        bertjax.answer(model, tokenizer, " ".join(["who"] * 100), "The king is dead.")
    assert bertjax.answer(model, tokenizer, " ".join(["who"] * 100), "The king is dead.",
                          doc_stride=24)  # the fix it names works
    assert snapshot(reader) == before


def test_fill_mask_on_an_electra_discriminator_names_the_generator(capsys):
    electra = FIXTURES / "electra" / "ElectraForPreTraining"
    line = refused(["fill-mask", str(electra), "To be or not to [MASK]."], capsys)
    assert line == (f"bertjax fill-mask: error: the checkpoint {electra} has no weights for "
                    "mlm_head, which BertForMaskedLM needs here: an ELECTRA discriminator "
                    "(ElectraForPreTraining) has no masked-LM head; ELECTRA's generator has it: "
                    "pass an ElectraForMaskedLM checkpoint (such as "
                    "google/electra-small-generator)")


def test_convert_as_takes_transformers_class_names_of_the_models_family(tmp_path, capsys):
    """`--as ElectraForPreTraining` (transformers' name, used in the docs) got a bare list of
    invalid choices."""
    electra = FIXTURES / "electra" / "ElectraForMaskedLM"
    out = tmp_path / "discriminator"
    assert main(["convert", str(electra), str(out), "--as", "ElectraForPreTraining"]) == 0
    assert "written: BertForReplacedTokenDetection" in capsys.readouterr().out
    assert json.loads((out / "config.json").read_text())["architectures"] == [
        "ElectraForPreTraining"]
    before = snapshot(tmp_path)
    line = refused(["convert", str(tiny_checkpoint()), str(tmp_path / "x"), "--as",
                    "RobertaForMaskedLM"], capsys)
    assert line == (f"bertjax convert: error: --as RobertaForMaskedLM is a class of the roberta "
                    f"family, but {tiny_checkpoint()} is a bert model, and convert keeps the "
                    "model's family: pass --as BertForMaskedLM")
    line = refused(["convert", str(tiny_checkpoint()), str(tmp_path / "x"), "--as",
                    "ElectraForPreTraining"], capsys)
    assert line.endswith("a bert model has no such class: choose another --as")
    line = refused(["convert", str(electra), str(tmp_path / "x"), "--as", "BertForQA"], capsys)
    assert "invalid choice: 'BertForQA' (choose from 'BertModel', " in line
    assert "or transformers' name of one in the model's family" in line
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("call", "message"), [
    (lambda: bertjax.from_pretrained(123),
     "from_pretrained(path=123): path is a Hugging Face directory, a Hub id (owner/name) or a "
     "`bertjax pretrain` run directory, as a str or a pathlib.Path; got int"),
    (lambda: bertjax.load_hf(None),
     "load_hf(path=None): path is a Hugging Face directory, a Hub id (owner/name) or a `bertjax "
     "pretrain` run directory, as a str or a pathlib.Path; got NoneType"),
    (lambda: bertjax.save_pretrained(object(), 7),
     "save_pretrained(directory=7): directory is where to write the model, as a str or a "
     "pathlib.Path; got int"),
])
def test_a_path_argument_of_another_type_is_named(call, message):
    """`from_pretrained(123)` was pathlib's "expected str, bytes or os.PathLike object, not
    int", naming no argument."""
    with pytest.raises(TypeError) as raised:
        call()
    assert str(raised.value) == message


def test_vocab_force_names_only_what_it_did_not_write(tmp_path, capsys):
    """A vocabulary folder that gained shards/ listed tokenizer.json and vocab.txt among the
    files `bertjax vocab` "did not write"."""
    out = tmp_path / "vocab"
    assert main(["vocab", "--vocab-size", "200", "--out", str(out)]) == 0
    (out / "shards").mkdir()
    (out / "shards" / "part-0.npy").write_bytes(b"\x93NUMPY")
    capsys.readouterr()
    before = snapshot(tmp_path)
    line = refused(["vocab", "--vocab-size", "200", "--out", str(out), "--force"], capsys)
    assert line == (f"bertjax vocab: error: --out {out} already holds files that `bertjax "
                    "vocab` did not write (shards); choose another --out (a new or empty "
                    "directory): only a directory written by `bertjax vocab` is ever replaced")
    assert snapshot(tmp_path) == before
