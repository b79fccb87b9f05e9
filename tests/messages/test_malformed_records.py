"""CSV and JSON-lines files that are malformed (issue 45): reading stops at the first bad record
and names its line and cause - an unclosed quote at the line where it opened - from the command
line (exit status 2, one line, the file untouched) and from Python (an InputError).

A lenient CSV reader took `"broken,LABEL_1` on the first data row as the start of one field
running to the end of the file: `classify` predicted one example for the whole file and said it
had no 'label' field; `finetune` blamed line 41 ("the label is null") for a quote opened at 22.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from use_helpers import tiny_checkpoint

from bertjax.cli.main import main
from bertjax.data.labelled import read_examples
from bertjax.errors import InputError

QUOTE_FIX = 'close it, or write a quote inside a quoted field as two ("")'


def _csv(path: Path, rows: list[str]) -> Path:
    path.write_text("text,label\n" + "".join(row + "\n" for row in rows))
    return path


def _quote_at_22(tmp_path: Path) -> Path:
    """Rows 2-21 good, a quote opened at line 22 and 'closed' by the first quote of line 41."""
    rows = [f"line {n},{['comedy', 'tragedy'][n % 2]}" for n in range(2, 22)]
    rows += ['"broken,comedy'] + [f"line {n},tragedy" for n in range(23, 41)]
    rows += ['"quoted, text",comedy', "last,tragedy"]
    return _csv(tmp_path / "quote22.csv", rows)


CASES = {
    "unclosed at the first data row": (
        lambda tmp: _csv(tmp / "first.csv", ['"broken,LABEL_1', "ok,LABEL_0", "fine,LABEL_1"]),
        "{file}:2: the quote opened on this line is never closed (the file ends inside it); "
        + QUOTE_FIX),
    "opened at 22, closed at 41": (
        _quote_at_22,
        "{file}:22: the quote opened on this line runs on to line 41, taking the lines between "
        "into one field; " + QUOTE_FIX),
    "a comma outside quotes": (
        lambda tmp: _csv(tmp / "comma.csv", ["fine,comedy", "hello, world,comedy"]),
        "{file}:3 has 3 fields, but the header has 2 (text, label); put a field that holds a "
        "comma in double quotes"),
    "a field missing": (
        lambda tmp: _csv(tmp / "short.csv", ["fine,comedy", "no label here"]),
        "{file}:3 has 1 field, but the header has 2 (text, label); give every row the header's "
        "fields (an empty one as nothing between two commas)"),
    "text after a closing quote": (
        lambda tmp: _csv(tmp / "after.csv", ["fine,comedy", '"abc"x,comedy']),
        "{file}:3 is not a CSV row (',' expected after '\"'); a quoted field must end with its "
        "closing quote, followed by a comma or the end of the line"),
    "an unterminated JSON string": (
        lambda tmp: _write(tmp / "cut.jsonl", '{"text": "a", "label": "x"}\n{"text": "b", "l\n'),
        "{file}:2 is not a JSON object: Unterminated string starting at (column 15); write one "
        "JSON object per line"),
    "a JSON list, not an object": (
        lambda tmp: _write(tmp / "list.jsonl", '{"text": "a", "label": "x"}\n["b", "y"]\n'),
        "{file}:2 is not a JSON object but list JSON; write one JSON object per line"),
}


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("command", ["classify", "finetune"])
def test_the_first_malformed_record_is_named_by_the_command_line(tmp_path, capsys, case,
                                                                 command):
    make, expected = CASES[case]
    file = make(tmp_path)
    before = file.read_bytes()
    argv = ([command, str(tiny_checkpoint()), "--file", str(file)] if command == "classify" else
            [command, str(tiny_checkpoint()), "--train", str(file), "--output-dir",
             str(tmp_path / "ft")])
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert lines == [f"bertjax {command}: error: " + expected.format(file=file)], err
    assert file.read_bytes() == before
    assert not (tmp_path / "ft").exists()


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_first_malformed_record_is_named_by_python(tmp_path, case):
    make, expected = CASES[case]
    file = make(tmp_path)
    with pytest.raises(InputError) as raised:
        read_examples(file)
    assert str(raised.value) == expected.format(file=file)


def test_quoted_fields_over_several_lines_are_still_read(tmp_path):
    """A CSV field may hold line breaks (and doubled quotes): only a quote left open is refused,
    and a later one is named, not the legitimate field before it."""
    good = _csv(tmp_path / "good.csv", ['"two\nlines, one field",comedy', 'say ""hi"",tragedy',
                                        '"a ""quoted"" word",comedy'])
    examples = read_examples(good)
    assert [(e.text, e.label, e.where) for e in examples] == [
        ("two\nlines, one field", "comedy", f"{good}:2"),
        ('say ""hi""', "tragedy", f"{good}:4"),  # quotes inside an unquoted field are literal
        ('a "quoted" word', "comedy", f"{good}:5")]
    bad = _csv(tmp_path / "bad.csv", ['"two\nlines",comedy', "fine,tragedy",
                                      '"open at 5,comedy', "more,comedy"])
    with pytest.raises(InputError, match=rf"^{bad}:5: the quote opened on this line is never "):
        read_examples(bad)


def test_a_bom_and_json_records_still_read(tmp_path):
    csv = tmp_path / "excel.csv"
    csv.write_text("\ufefftext,label\nfine,comedy\n")
    assert [(e.text, e.label) for e in read_examples(csv)] == [("fine", "comedy")]
    lines = tmp_path / "ok.jsonl"
    lines.write_text(json.dumps({"text": "a", "label": 1}) + "\n\n" +
                     json.dumps({"text": "b", "label": 2}) + "\n")
    assert [e.where for e in read_examples(lines)] == [f"{lines}:1", f"{lines}:3"]
