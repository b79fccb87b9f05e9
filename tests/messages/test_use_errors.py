"""Bad input to the commands that use a model on text (finetune, classify, fill-mask, nsp, embed,
similarity, attention): one line `bertjax COMMAND: error: ...` naming the problem and the fix,
exit status 2 (130 for Ctrl-C), no traceback, and the file system as it was (nothing deleted,
nothing half-written, a retry works)."""

from __future__ import annotations

import functools
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest
from flax import nnx
from use_helpers import tiny_checkpoint

import bertjax
from bertjax import BertForSequenceClassification
from bertjax.cli.main import main
from bertjax.data.labelled import label_names, read_examples
from bertjax.viz import attention as viz_attention

LONG = "the king is dead " * 60  # ~240 tokens: longer than the tiny model's 128 positions


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under `root` (hidden ones too) and its bytes: the file system to compare."""
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*"))
            if p.is_file()}


def error_line(err: str, command: str) -> str:
    """The one error line of a command's stderr (warnings may come before it), no traceback."""
    assert "Traceback" not in err, err
    errors = [line for line in err.splitlines() if line.startswith(f"bertjax {command}: error: ")]
    assert len(errors) == 1 and err.rstrip().endswith(errors[0]), err
    return errors[0]


def refused_by_parser(argv: list[str], capsys) -> str:
    """argparse's refusal: exit status 2 and one line; returns it."""
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    return err


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@functools.cache
def classifier() -> Path:
    """A tiny sequence classifier (random weights, labels "neg" and "pos") as a Hugging Face
    directory, with the tiny checkpoint's tokenizer."""
    model, tokenizer = bertjax.from_pretrained(tiny_checkpoint())
    config = model.config.replace(id2label=("neg", "pos"))
    out = tiny_checkpoint().parent / "classifier"
    bertjax.save_pretrained(BertForSequenceClassification(config, rngs=nnx.Rngs(0)), out,
                            tokenizer)
    return out


def two_labels(n: int = 32) -> list[dict]:
    return [{"text": f"{'the king' if i % 2 else 'a fool'} speaks {i}", "label": i % 2}
            for i in range(n)]


# --- labels: strings or integers, one type per file --------------------------------------------


@pytest.mark.parametrize(("labels", "message"), [
    ([0, 0.0], r":2: the label in field 'label' is a float \(0\.0\); labels are strings or "
               r"integers \(write 0 or \"0\.0\"\)"),
    ([1, "1"], r":2: the label '1' is a string but the label at .*:1 is an integer; use one type"),
    (["a", 2], r":2: the label 2 is an integer but the label at .*:1 is a string"),
    ([[1], 0], r":1: the label in field 'label' is a list; labels are strings or integers"),
    ([{"a": 1}], r":1: the label in field 'label' is an object"),
    ([True, False], r":1: the label in field 'label' is a boolean \(true\)"),
])
def test_labels_that_are_not_strings_or_integers_of_one_type_are_refused(labels, message,
                                                                         tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": f"t{i}", "label": label}
                                                  for i, label in enumerate(labels)])
    with pytest.raises(ValueError, match=re.escape(str(path)) + message):
        read_examples(path)


def test_integer_labels_keep_their_order_and_strings_stay_strings(tmp_path):
    ints = write_jsonl(tmp_path / "ints.jsonl", [{"text": "a", "label": 10},
                                                 {"text": "b", "label": 2}])
    assert label_names(read_examples(ints)) == ("2", "10")  # by value: id 0 is label 2
    csv = tmp_path / "labels.csv"
    csv.write_text("text,label\na,1\nb,1.0\nc,1\n")  # a CSV's labels are strings: "1.0" is not 1
    assert label_names(read_examples(csv)) == ("1", "1.0")


@pytest.mark.parametrize(("record", "message"), [
    ({"txt": "a", "label": "x"}, r":2: no text in field 'text' \(fields: txt, label\); set "
                                 "--text-field"),
    ({"text": 7, "label": "x"}, r":2: field 'text' is an integer \(7\), not text"),
    ({"text": "a", "lbl": "x"}, r":2: no label in field 'label' \(fields: text, lbl\); set "
                                "--label-field"),
    ({"text": "a", "text_pair": ["b"], "label": "x"}, r":2: field 'text_pair' is a list, not text"),
])
def test_a_record_without_its_fields_is_named_by_file_and_line(record, message, tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"text": "fine", "label": "y"}, record])
    with pytest.raises(ValueError, match=re.escape(str(path)) + message):
        read_examples(path)


# --- finetune: options, the output directory, failure --------------------------------------------


@pytest.mark.parametrize(("option", "value", "expected"), [
    ("--epochs", "0", "expected a positive integer, got '0'"),
    ("--batch-size", "-3", "expected a positive integer, got '-3'"),
    ("--optim.learning-rate", "0", "expected a number above 0, got '0'"),
    ("--optim.learning-rate", "nan", "expected a number above 0, got 'nan'"),
    ("--optim.warmup-fraction", "1", "expected a probability in [0, 1), got '1'"),
    ("--optim.weight-decay", "-0.1", "expected a number >= 0, got '-0.1'"),
    ("--optim.grad-accum-steps", "0", "expected a positive integer, got '0'"),
    ("--max-length", "2", "expected an integer >= 3, got '2'"),
    ("--seed", "-1", "expected an integer >= 0, got '-1'"),
    ("--validation-fraction", "0", "expected a number in (0, 1), got '0'"),
    ("--validation-fraction", "1", "expected a number in (0, 1), got '1'"),
    ("--dropout", "1", "expected a probability in [0, 1), got '1'"),
    ("--per-genre", "0", "expected a positive integer, got '0'"),
])
def test_finetune_options_out_of_range_are_refused_by_the_parser(option, value, expected,
                                                                  tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", two_labels())
    err = refused_by_parser(["finetune", str(tiny_checkpoint()), "--train", str(train),
                             "--output-dir", str(tmp_path / "out"), option, value], capsys)
    assert f"argument {option}: {expected}" in err
    assert not (tmp_path / "out").exists()


def test_finetune_max_length_is_checked_against_the_model_before_anything_is_written(
        tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", two_labels())
    before = snapshot(tmp_path)
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                 str(tmp_path / "out"), "--max-length", "100000"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == error_line(err, "finetune")  # no "freshly initialised" noise either
    assert err.strip().endswith("--max-length 100000 is longer than the model's 128 positions; "
                                "pass --max-length 128 or less")
    assert snapshot(tmp_path) == before and sorted(os.listdir(tmp_path)) == ["train.jsonl"]


def test_finetune_refuses_an_output_dir_that_holds_files_and_leaves_it_alone(tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", two_labels())
    out = tmp_path / "results"
    out.mkdir()
    (out / "notes.txt").write_text("my notes")
    (out / "old-model").mkdir()
    before = snapshot(tmp_path)
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                 str(out)]) == 2
    line = error_line(capsys.readouterr().err, "finetune")
    assert (f"--output-dir {out} already holds files that bertjax finetune did not write "
            "(notes.txt, old-model)") in line
    assert "choose another --output-dir" in line
    assert snapshot(tmp_path) == before and (out / "old-model").is_dir()
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                 str(train)]) == 2
    assert (f"--output-dir {train} is the --train this command reads: writing it would replace "
            "your input" in error_line(capsys.readouterr().err, "finetune"))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize(("rows", "message"), [
    ([{"text": "a", "label": 0}, {"text": "b", "label": 1.0}],
     ":2: the label in field 'label' is a float (1.0)"),
    ([{"text": "a", "label": 0}, {"body": "b", "label": 1}], ":2: no text in field 'text'"),
])
def test_finetune_refuses_bad_labels_naming_file_and_line(rows, message, tmp_path, capsys):
    train = write_jsonl(tmp_path / "train.jsonl", rows * 10)
    assert main(["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir",
                 str(tmp_path / "out")]) == 2
    assert f"{train}{message}" in error_line(capsys.readouterr().err, "finetune")
    assert sorted(os.listdir(tmp_path)) == ["train.jsonl"]


@pytest.mark.slow
def test_finetune_interrupted_leaves_nothing_and_a_retry_works(tmp_path, capsys, monkeypatch):
    import bertjax.jobs.finetune.job as job

    train = write_jsonl(tmp_path / "train.jsonl", two_labels(24))
    out = tmp_path / "out"
    argv = ["finetune", str(tiny_checkpoint()), "--train", str(train), "--output-dir", str(out),
            "--epochs", "1", "--batch-size", "8", "--max-length", "16", "--no-progress"]
    real_epoch = job._train_epoch

    def interrupted(run, *args, **kwargs):
        assert run.out != out and run.out.parent == out.parent  # written aside, not in place
        (run.out / "partial.bin").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(job, "_train_epoch", interrupted)
    assert main(argv) == 130
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["train.jsonl"]  # no output dir, no leftovers
    monkeypatch.setattr(job, "_train_epoch", real_epoch)
    assert main(argv) == 0
    assert f"model in {out}/model" in capsys.readouterr().out
    assert sorted(os.listdir(tmp_path)) == ["out", "train.jsonl"]
    assert {"summary.json", "model", "metrics.jsonl"} <= set(os.listdir(out))
    assert json.loads((out / "summary.json").read_text())["output_dir"] == str(out)


# --- classify ------------------------------------------------------------------------------------


def test_classify_label_field_absent_from_every_record(tmp_path, capsys):
    file = write_jsonl(tmp_path / "texts.jsonl", [{"text": "a fool"}, {"text": "the king"}])
    assert main(["classify", str(classifier()), "--file", str(file), "--label-field", "nope"]) == 2
    line = error_line(capsys.readouterr().err, "classify")
    assert f"--label-field 'nope': no record of --file {file} has a label there" in line
    # without --label-field: the predictions, and a note that they are not scored
    assert main(["classify", str(classifier()), "--file", str(file)]) == 0
    captured = capsys.readouterr()
    assert f"note: --file {file} has no 'label' field: the predictions are not scored" in captured.err
    assert len(captured.out.splitlines()) == 2 and "accuracy" not in captured.out


def test_classify_label_field_absent_from_some_records_names_the_line(tmp_path, capsys):
    file = write_jsonl(tmp_path / "texts.jsonl", [{"text": "a", "label": "pos"}, {"text": "b"}])
    assert main(["classify", str(classifier()), "--file", str(file)]) == 2
    assert (f"{file}:2: no label in field 'label', though {file}:1 has one; label every example "
            "or none") in error_line(capsys.readouterr().err, "classify")


def test_classify_out_that_cannot_be_written_is_refused_before_the_model_runs(tmp_path, capsys):
    file = write_jsonl(tmp_path / "texts.jsonl", [{"text": "a", "label": "pos"}])
    (tmp_path / "results").mkdir()
    before = snapshot(tmp_path)
    for out, message in [
        (tmp_path / "results", " is a directory; pass a file name such as "
                               f"{tmp_path / 'results' / 'predictions.jsonl'}"),
        (file / "p.jsonl", f": {file} is a file, not a directory; choose another --out"),
    ]:
        assert main(["classify", str(classifier()), "--file", str(file), "--out", str(out)]) == 2
        assert f"--out {out}{message}" in error_line(capsys.readouterr().err, "classify")
        assert snapshot(tmp_path) == before


def test_classify_keeps_an_earlier_out_unless_forced_and_writes_atomically(tmp_path, capsys):
    out = tmp_path / "predictions.jsonl"
    out.write_text("earlier predictions\n")
    unseen = write_jsonl(tmp_path / "unseen.jsonl", [{"text": "a", "label": "maybe"}])
    assert main(["classify", str(classifier()), "--file", str(unseen), "--out", str(out),
                 "--force"]) == 2  # fails after the check, while predicting
    assert "labels the model was not trained on: maybe" in error_line(capsys.readouterr().err,
                                                                       "classify")
    assert out.read_text() == "earlier predictions\n"
    good = write_jsonl(tmp_path / "good.jsonl", [{"text": "a", "label": "pos"}])
    assert main(["classify", str(classifier()), "--file", str(good), "--out", str(out)]) == 2
    assert (f"--out {out} already exists; pass --force to replace it"
            in error_line(capsys.readouterr().err, "classify"))
    assert out.read_text() == "earlier predictions\n"
    assert main(["classify", str(classifier()), "--file", str(good), "--out", str(out),
                 "--force"]) == 0
    assert [json.loads(line)["where"] for line in out.read_text().splitlines()] == [f"{good}:1"]
    assert sorted(os.listdir(tmp_path)) == ["good.jsonl", "predictions.jsonl", "unseen.jsonl"]


def test_classify_options_are_checked(tmp_path, capsys):
    file = write_jsonl(tmp_path / "texts.jsonl", [{"text": "a", "label": "pos"}])
    err = refused_by_parser(["classify", str(classifier()), "--file", str(file), "--batch-size",
                             "0"], capsys)
    assert "argument --batch-size: expected a positive integer, got '0'" in err
    assert main(["classify", str(classifier()), "--file", str(file), "--max-length", "999"]) == 2
    assert error_line(capsys.readouterr().err, "classify").endswith(
        "--max-length 999 is longer than the model's 128 positions; pass --max-length 128 or less")


# --- --file that is not UTF-8 text ---------------------------------------------------------------


@pytest.mark.parametrize("command", ["fill-mask", "nsp", "embed", "similarity", "classify",
                                     "attention"])
@pytest.mark.parametrize(("content", "kind"), [(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary"),
                                               ("caf\xe9 [MASK]\n".encode("latin-1"), "not UTF-8")])
def test_a_file_that_is_not_utf8_text_is_named(command, content, kind, tmp_path, capsys):
    file = tmp_path / "input.txt"
    file.write_bytes(content)
    extra = {"embed": ["--out", str(tmp_path / "v.npy")], "similarity": ["--query", "a"],
             "attention": ["--out", str(tmp_path / "pictures")]}
    assert main([command, str(tiny_checkpoint()), "--file", str(file),
                 *extra.get(command, [])]) == 2
    line = error_line(capsys.readouterr().err, command)
    assert f"--file {file} is {kind} (" in line and line.endswith("give a UTF-8 text file")
    assert sorted(os.listdir(tmp_path)) == ["input.txt"]


# --- a text longer than the model allows: named as the user gave it, with the limit and the fix ---


def cut_warnings(err: str, command: str) -> list[str]:
    return [line.removeprefix(f"bertjax {command}: warning: ") for line in err.splitlines()
            if line.startswith(f"bertjax {command}: warning: ") and "cut to fit" in line]


def test_similarity_names_a_long_query_and_a_long_line(tmp_path, capsys):
    file = tmp_path / "lines.txt"
    file.write_text(f"a short line\n{LONG}\n")
    assert main(["similarity", str(tiny_checkpoint()), "--file", str(file), "--query", LONG,
                 "--max-length", "64"]) == 0
    cut = cut_warnings(capsys.readouterr().err, "similarity")
    assert len(cut) == 2 and not any(w.startswith("line ") for w in cut), cut
    assert re.fullmatch(rf"{re.escape(str(file))}:2 has \d+ more tokens than the 64 allowed: cut "
                        r"to fit; raise --max-length \(the model takes up to 128\) or shorten it",
                        cut[0]), cut
    assert re.fullmatch(r"--query has \d+ more tokens than the 64 allowed: .*", cut[1]), cut


def test_fill_mask_nsp_and_classify_name_a_long_text(tmp_path, capsys):
    assert main(["fill-mask", str(tiny_checkpoint()), "a [MASK]", LONG + " [MASK]"]) == 2
    captured = capsys.readouterr().err
    assert cut_warnings(captured, "fill-mask")[0].startswith(
        "text 2 has ") and "than the model's 128 positions allow: cut to fit; shorten it" in captured
    assert "text 2: 1 of its 1 [MASK] tokens were cut off" in error_line(captured, "fill-mask")
    assert main(["nsp", str(tiny_checkpoint()), LONG, "and then?"]) == 0
    assert re.fullmatch(r"the pair A \+ B has \d+ more tokens than the model's 128 positions "
                        r"allow: cut to fit; shorten it to keep all of it",
                        cut_warnings(capsys.readouterr().err, "nsp")[0])
    file = write_jsonl(tmp_path / "texts.jsonl", [{"text": "short"}, {"text": LONG}])
    assert main(["classify", str(classifier()), "--file", str(file), "--max-length", "32"]) == 0
    assert cut_warnings(capsys.readouterr().err, "classify")[0].startswith(
        f"{file}:2 has ")


@pytest.mark.slow
def test_nsp_and_attention_take_a_file_and_name_its_lines(tmp_path, capsys):
    pairs = tmp_path / "pairs.txt"
    pairs.write_text(f"To be.\tThat is the question.\n\n{LONG}\tand then?\n")
    assert main(["nsp", str(tiny_checkpoint()), "--file", str(pairs)]) == 0
    captured = capsys.readouterr()
    assert [line.split(": P(IsNext) = ")[0] for line in captured.out.splitlines()] == [
        f"{pairs}:1", f"{pairs}:3"]
    assert cut_warnings(captured.err, "nsp")[0].startswith(f"{pairs}:3 has ")
    pairs.write_text("To be.\tThat is the question.\nno tab here\n")
    assert main(["nsp", str(tiny_checkpoint()), "--file", str(pairs)]) == 2
    assert error_line(capsys.readouterr().err, "nsp").endswith(
        f"{pairs}:2 has no tab; write sentence A, a tab, then sentence B on each line")
    speech = tmp_path / "speech.txt"
    speech.write_text(LONG)
    out = tmp_path / "pictures"
    assert main(["attention", str(tiny_checkpoint()), "--file", str(speech), "--out", str(out),
                 "--layers", "1"]) == 0
    captured = capsys.readouterr()
    assert cut_warnings(captured.err, "attention")[0].startswith(f"--file {speech} has ")
    assert captured.out.startswith("128 tokens: [CLS] the king is dead")
    assert main(["attention", str(tiny_checkpoint()), "a king", "--file", str(speech)]) == 2
    assert "give SENTENCE_A or --file, not both" in error_line(capsys.readouterr().err,
                                                                "attention")


# --- attention: the HTML page is capped ----------------------------------------------------------


def test_html_limit_comes_from_the_measured_page_size():
    assert viz_attention.html_token_limit(6, 12) == 182  # all-MiniLM-L6-v2: 250 MB at 512 tokens
    assert viz_attention.html_token_limit(12, 12) == 129  # BERT-base
    assert viz_attention.html_token_limit(2, 2) > 128  # tiny: every input fits


def test_attention_writes_only_the_pngs_when_the_page_would_be_too_large(tmp_path, capsys,
                                                                         monkeypatch):
    monkeypatch.setattr(viz_attention, "HTML_MAX_WEIGHTS", 4 * 24 * 24)  # tiny: 24 tokens
    short, long = tmp_path / "short", tmp_path / "long"
    assert main(["attention", str(tiny_checkpoint()), "the king is dead", "--out",
                 str(short)]) == 0
    assert sorted(os.listdir(short)) == ["attention.html", "layer_01.png", "layer_02.png"]
    capsys.readouterr()
    assert main(["attention", str(tiny_checkpoint()), "the king is dead " * 10, "--out",
                 str(long), "--layers", "2"]) == 0
    captured = capsys.readouterr()
    assert sorted(os.listdir(long)) == ["layer_02.png"]
    assert captured.out.splitlines()[1:] == [str(long / "layer_02.png")]
    notes = [line for line in captured.err.splitlines() if line.strip()]
    assert len(notes) == 1 and re.fullmatch(
        r"bertjax attention: warning: \d+ tokens would make an HTML page of about \d+ MB; it "
        r"shows at most 24 tokens of a model with 2 layers x 2 heads \(about \d+ MB\): wrote the "
        r"PNGs only, no attention.html \(shorten the text for the page\)", notes[0]), notes
    maps = viz_attention.AttentionMaps(["a"] * 30, None, np.full((2, 2, 30, 30), 1 / 30,
                                                                 np.float32))
    with pytest.raises(ValueError, match="30 tokens would make an HTML page"):
        viz_attention.write_html(maps, tmp_path / "page.html")
    assert not (tmp_path / "page.html").exists()


def test_attention_out_that_is_a_file_is_refused(tmp_path, capsys):
    out = tmp_path / "pictures"
    out.write_text("not a directory")
    assert main(["attention", str(tiny_checkpoint()), "the king", "--out", str(out)]) == 2
    assert f"--out {out} is a file" in error_line(capsys.readouterr().err, "attention")
    assert out.read_text() == "not a directory"


# --- options between MODEL and TEXT; Ctrl-C -------------------------------------------------------


def test_options_between_and_before_positional_arguments(tmp_path, capsys):
    assert main(["fill-mask", str(tiny_checkpoint()), "--top-k", "3", "to be or [MASK]"]) == 0
    out = capsys.readouterr().out
    assert "[MASK] 1: " in out and out.split("[MASK] 1: ")[1].count(",") == 2  # 3 predictions
    file = tmp_path / "lines.txt"
    file.write_text("the king\na fool\nthe queen\n")
    assert main(["similarity", "--top-k", "2", str(tiny_checkpoint()), "--file", str(file),
                 "--query", "the king"]) == 0
    ranked = capsys.readouterr().out.split("(cosine similarity):\n")[1].splitlines()
    assert len(ranked) == 2


def test_embed_interrupted_writes_nothing(tmp_path, capsys, monkeypatch):
    import bertjax.use.embed

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(bertjax.use.embed, "embed", interrupted)
    file = tmp_path / "lines.txt"
    file.write_text("the king\n")
    assert main(["embed", str(tiny_checkpoint()), "--file", str(file), "--out",
                 str(tmp_path / "v.npy")]) == 130
    assert "interrupted (Ctrl-C)" in capsys.readouterr().err
    assert sorted(os.listdir(tmp_path)) == ["lines.txt"]
