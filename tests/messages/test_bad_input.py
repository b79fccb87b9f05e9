"""Bad input to every command, table-driven: exit status 2, one line naming the problem, no
traceback, and the file system untouched (nothing deleted, nothing half-written, a retry possible).

Each row is (command line, a piece of the expected message). `{tmp}` is the test's directory,
`{model}` a tiny Hugging Face BERT directory, `{binary}` a binary file, `{latin1}` a non-UTF-8
text file, `{empty}` an empty file, `{thesis}` a folder of a user's own files, `{pictures}` one
whose files have the names `bertjax attention` writes, `{text}` a UTF-8
text file, `{labels}` labelled examples with mixed label types, `{good}` valid ones,
`{nulllabel}` one with a null label, `{squad}` a SQuAD file, `{corpus}` a folder of texts with a
config.json, `{pairs3}` sentence pairs with a third column.
The command modules' own tests check the finer behaviour of each class.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from use_helpers import tiny_checkpoint

from bertjax.cli.main import main

BAD_INPUT = [
    # option values out of range: refused by the parser, with the allowed range
    (["parity", "--tolerance", "-1"], "--tolerance: expected a number above 0"),
    (["parity", "--train-steps", "-3"], "--train-steps: expected an integer >= 0"),
    (["parity", "--seq-len", "100000"], "--seq-len 100000 is longer than the model's"),
    (["parity", "--seq-len", "1"], "--seq-len: expected an integer >= 2"),
    (["parity", "--batch-size", "0"], "--batch-size: expected a positive integer"),
    (["parity", "--num-predictions", "0"], "--num-predictions: expected a positive integer"),
    (["parity", "--train-steps", "2", "--seq-len", "4"], "need --seq-len 5 or more"),
    (["parity", "--num-predictions", "40", "--seq-len", "32"],
     "--num-predictions 40 is more than the 31 positions after [CLS] of --seq-len 32; pass "
     "--num-predictions 31 or less"),
    (["parity", "--step", "3"], "--step and --revision choose a checkpoint of --hf MODEL"),
    (["parity", "--hf", "{tmp}/missing"], "{tmp}/missing"),
    (["parity", "--hf", "{thesis}"], "{thesis}"),
    (["bench", "train", "--seq", "1"], "--seq: expected an integer >= 2, got '1'"),
    # every number at parse time, finite and in its range, the range named (issue 45): `bench
    # corpus --sizes-mb nan` once wrote a corpus without end, 0 and -5 ended in a traceback
    *[(["bench", "corpus", "--sizes-mb", size],
       f"--sizes-mb: expected a list of numbers from 0.1 to 100,000.0, got '{size}'")
      for size in ("nan", "inf", "0", "-5")],
    (["bench", "corpus", "--seq-len", "3"], "seq_len must be 0 (no pairs) or at least 5 (the "
     "shortest sequence that holds [CLS] a [SEP] b [SEP]), got 3"),
    (["bench", "corpus", "--cpus", "0"], "--cpus: expected a positive integer, got '0'"),
    (["bench", "train", "--seed", "-1"], "--seed: expected an integer >= 0, got '-1'"),
    (["bench", "train", "--set", "layer_norm_eps=nan"],
     "argument --set: layer_norm_eps must be a number above 0, got 'nan'"),
    (["parity", "--seed", "-2"], "--seed: expected an integer >= 0, got '-2'"),
    (["data", "--vocab", "{model}", "--out", "{tmp}/shards", "--seed", "-1"],
     "--seed: expected an integer >= 0"),
    (["pretrain", "--optim.clip-norm=nan", "--output-dir", "{tmp}/run"],
     "argument --optim.clip-norm: expected a number >= 0, got 'nan'"),
    (["pretrain", "--optim.b2=1.5", "--output-dir", "{tmp}/run"],
     "argument --optim.b2: expected a probability in [0, 1), got '1.5'"),
    (["finetune", "{model}", "--train", "{good}", "--optim.learning-rate", "inf", "--output-dir",
      "{tmp}/ft"], "--optim.learning-rate: expected a number above 0, got 'inf'"),
    (["bench", "train", "--batch", "0"], "--batch: expected a positive integer"),
    (["bench", "infer", "--predictions", "0"], "--predictions: expected a positive integer"),
    (["bench", "data", "--batch-size", "0"], "--batch-size: expected a positive integer"),
    (["bench", "data", "--cpu", "99"], "--cpu 99 is not a core this process may use"),
    (["bench", "data", "--seq-len", "1"], "--seq-len: expected an integer >= 5"),
    (["bench", "data", "--corpus", "{binary}"], "{binary}"),
    (["bench", "embed", "--batch-size", "0"], "--batch-size: expected a positive integer"),
    (["bench", "embed", "--file", "{latin1}"], "{latin1}"),
    (["data", "--vocab", "{model}", "--out", "{tmp}/shards", "--short-seq-prob", "2"],
     "--short-seq-prob"),
    (["data", "--vocab", "{model}", "--out", "{tmp}/shards", "--dupe-factor", "0"],
     "--dupe-factor"),
    (["data", "--vocab", "{model}", "--out", "{tmp}/shards", "--seq-len", "3"], "--seq-len"),
    (["data", "--vocab", "{model}", "--out", "{thesis}", "--force"], "{thesis}"),
    (["data", "--vocab", "{model}", "--out", "{text}", "--force"], "{text}"),
    (["data", "--vocab", "{tmp}/missing", "--out", "{tmp}/shards"], "{tmp}/missing"),
    (["data", "--vocab", "{model}", "--out", "{tmp}/shards", "--corpus", "{latin1}"], "{latin1}"),
    (["vocab", "--corpus", "{empty}", "--out", "{tmp}/vocab"], "{empty}"),
    (["vocab", "--corpus", "{tmp}/*.nothing", "--out", "{tmp}/vocab"], "nothing"),
    (["pretrain", "--config", "{latin1}", "--output-dir", "{tmp}/run"], "{latin1}"),
    (["pretrain", "--resume", "--output-dir", "{tmp}/missing"], "{tmp}/missing"),
    (["pretrain", "--output-dir", "{thesis}"], "{thesis}"),
    (["convert", "{tmp}/missing", "{tmp}/out"], "{tmp}/missing"),
    (["convert", "{model}", "{thesis}"], "{thesis}"),
    (["fill-mask", "{model}", "--file", "{binary}"], "{binary}"),
    (["fill-mask", "{model}", "--top-k", "0", "to be [MASK]"], "--top-k"),
    (["fill-mask", "{model}", "to be"], "[MASK]"),
    (["nsp", "{model}", "--file", "{latin1}"], "{latin1}"),
    (["embed", "{model}", "--file", "{binary}", "--out", "{tmp}/e.npy"], "{binary}"),
    (["similarity", "{model}", "--file", "{latin1}", "--query", "a king"], "{latin1}"),
    (["attention", "{model}", "--file", "{binary}", "--out", "{tmp}/att"], "{binary}"),
    (["classify", "{model}", "--file", "{text}"], "bertjax finetune"),
    (["finetune", "{model}", "--task", "shakespeare-genres", "--max-length", "100000",
      "--output-dir", "{tmp}/ft"], "--max-length"),
    (["finetune", "{model}", "--train", "{labels}", "--output-dir", "{tmp}/ft"], "{labels}"),
    (["finetune", "{model}", "--train", "{good}", "--output-dir", "{thesis}"], "{thesis}"),
    (["finetune", "{model}", "--task", "token-classification", "--train", "{latin1}",
      "--output-dir", "{tmp}/ft"], "{latin1}"),
    (["answer", "{model}", "--question", "Who?", "--context-file", "{binary}"], "{binary}"),
    (["answer", "{model}", "--question", "Who?", "--context", "Hamlet.", "--top-k", "0"],
     "--top-k"),
    (["answer", "{model}", "--question", "Who?", "--context", "a", "--context-file", "{text}"],
     "one of them"),
    (["tag", "{model}", " "], "text 1 is empty"),
    (["tag", "{model}", "Hamlet"], "has no weights for token_classifier"),
    (["choose", "{model}", "--context", "c", "--choice", "a"], "give 2 to 16 non-empty choices"),
    (["choose", "{model}", "--context", "c", "--choice", "a", "--choice", "b"],
     "has no weights for choice_classifier"),
    (["finetune", "{model}", "--task", "shakespeare-speakers", "--train", "{good}",
      "--output-dir", "{tmp}/ft"], "brings its own data"),
    # outputs over inputs (issue 29): checked before anything runs; --force never replaces an
    # input, and a folder of the user's files is never written into
    (["embed", "{model}", "--file", "{text}", "--out", "{text}"],
     "--out {text} is the --file this command reads: writing it would replace your input"),
    (["embed", "{model}", "--file", "{text}", "--out", "{text}", "--force"],
     "--out {text} is the --file this command reads"),
    (["embed", "{model}", "--file", "{text}", "--out", "{binary}"],
     "--out {binary} already exists; pass --force to replace it, or choose another --out"),
    (["embed", "{model}", "--file", "{text}", "--out", "{tmp}/adir/"],
     "--out {tmp}/adir/ names a directory (it ends with /); pass a file name such as "
     "{tmp}/adir/vectors.npy"),
    (["embed", "{model}", "--file", "{text}", "--out", "{thesis}"],
     "--out {thesis} is a directory; pass a file name such as {thesis}/vectors.npy"),
    (["classify", "{model}", "--file", "{good}", "--out", "{good}", "--force"],
     "--out {good} is the --file this command reads"),
    (["classify", "{model}", "--file", "{good}", "--out", "{text}"],
     "--out {text} already exists; pass --force"),
    (["attention", "{model}", "the king", "--out", "{thesis}", "--force"],
     "--out {thesis} already holds files that `bertjax attention` did not write"),
    (["attention", "{model}", "the king", "--out", "{pictures}", "--force"],
     "--out {pictures} already holds files that `bertjax attention` did not write "
     "(attention.html, layer_01.png)"),
    (["attention", "{model}", "--file", "{text}", "--out", "{text}"],
     "--out {text} is the --file this command reads"),
    (["attention", "{model}", "the king", "--out", "{text}"], "--out {text} is a file"),
    (["bench", "embed", "--lines", "4", "--json", "{thesis}"], "--json {thesis} is a directory"),
    (["bench", "embed", "--lines", "4", "--json", "{text}"], "--json {text} already exists"),
    (["bench", "embed", "--file", "{text}", "--json", "{text}", "--force"],
     "--json {text} is the --file this command reads"),
    (["bench", "embed", "--lines", "4", "--json", "{text}/out.json"],
     "{text} is a file, not a directory"),
    (["bench", "train", "--json", "{thesis}"], "--json {thesis} is a directory"),
    (["bench", "infer", "--json", "{text}"], "--json {text} already exists"),
    (["bench", "corpus", "--json", "{tmp}/out/"], "--json {tmp}/out/ names a directory"),
    # the "meh" answers (issue 29): the problem and the right fix, options that conflict
    # or do nothing refused
    (["finetune", "{model}", "--train", "{good}", "--validation", "{good}",
      "--validation-fraction", "0.2", "--output-dir", "{tmp}/ft"],
     "validation_fraction holds out a share of train, but validation {good} is the "
     "validation data: leave out one of them"),
    (["finetune", "{model}", "--task", "shakespeare-genres", "--validation-fraction", "0.2",
      "--output-dir", "{tmp}/ft"], "task shakespeare-genres's own validation split"),
    (["finetune", "{model}", "--train", "{good}", "--per-genre", "5", "--output-dir", "{tmp}/ft"],
     "per_genre is read by task shakespeare-genres only, not by task classification: "
     "leave it out"),
    (["finetune", "{model}", "--train", "{good}", "--null-threshold", "1", "--output-dir",
      "{tmp}/ft"], "null_threshold is read by task question-answering only"),
    (["finetune", "{model}", "--task", "question-answering", "--train", "{squad}",
      "--null-threshold", "nan", "--output-dir", "{tmp}/ft"],
     "--null-threshold: expected a finite number, got 'nan'"),
    (["finetune", "{model}", "--train", "{nulllabel}", "--output-dir", "{tmp}/ft"],
     "{nulllabel}:3: the label in field 'label' is null; give this example its label, or leave "
     "the example out"),
    (["finetune", "{model}", "--task", "multiple-choice", "--train", "{squad}", "--output-dir",
      "{tmp}/ft"], "{squad} looks like question-answering data: pass --task question-answering"),
    (["pretrain", "--train.fsdp=2", "--train.parallel=pmap", "--output-dir", "{tmp}/run"],
     "train.fsdp=2 shards parameters over a mesh, which train.parallel='pmap' does not use; "
     "pass --train.parallel mesh or leave out --train.fsdp"),
    (["pretrain", "--train.parallel=mesh", "--train.fsdp=2", "--optim.flatten",
      "--output-dir", "{tmp}/run"],
     "optim.flatten puts every gradient in one vector, which train.fsdp=2 would gather from its "
     "shards on each step; leave one of them out"),
    (["pretrain", "--optim.optimizer=lamb", "--optim.flatten", "--output-dir", "{tmp}/run"],
     "flatten takes adam, adamw or sgd"),
    (["pretrain", "--data.vocab-size=10000000", "--output-dir", "{tmp}/run"],
     "argument --data.vocab-size: expected an integer from 32 to 1,000,000"),
    (["vocab", "--corpus", "{text}", "--vocab-size", "10000000", "--out", "{tmp}/vocab"],
     "--vocab-size: expected an integer from 6 to 1,000,000"),
    (["vocab", "--corpus", "{corpus}", "--out", "{tmp}/vocab"],
     "if config.json is no part of the corpus, name the corpus files instead of the directory "
     "(e.g. '{corpus}/*.txt') or move config.json out"),
    (["nsp", "{model}", "--file", "{pairs3}"],
     "{pairs3}:2 has 2 tabs, not one; write sentence A, one tab, then sentence B"),
]


def _files(root: Path) -> dict[str, tuple[int, int]]:
    """Every path under `root` with its size and modification time: the state to compare."""
    return {str(p.relative_to(root)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(root.rglob("*"))}


@pytest.fixture(scope="module")
def model() -> Path:
    return tiny_checkpoint()


def _workspace(tmp: Path, model: Path) -> dict[str, str]:
    (tmp / "thesis").mkdir()
    (tmp / "thesis" / "chapter1.tex").write_text("\\chapter{Introduction}\n")
    (tmp / "thesis" / "figures").mkdir()
    (tmp / "pictures").mkdir()  # the user's own files, under the names `attention` writes
    (tmp / "pictures" / "attention.html").write_text("<html>my page</html>\n")
    (tmp / "pictures" / "layer_01.png").write_bytes(b"\x89PNG\r\n\x1a\nmine")
    (tmp / "binary.bin").write_bytes(bytes(range(256)) * 8)
    (tmp / "latin1.txt").write_bytes("Ô vérité, où es-tu ?\n".encode("latin-1"))
    (tmp / "empty.txt").write_bytes(b"")
    (tmp / "text.txt").write_text("To be, or not to be.\nGood night, sweet prince.\n")
    labels = [{"text": "a", "label": 0}, {"text": "b", "label": 0.0}, {"text": "c", "label": 1}]
    (tmp / "labels.jsonl").write_text("".join(json.dumps(r) + "\n" for r in labels))
    good = [{"text": f"line {i}", "label": ["comedy", "tragedy"][i % 2]} for i in range(8)]
    (tmp / "good.jsonl").write_text("".join(json.dumps(r) + "\n" for r in good))
    (tmp / "nulllabel.jsonl").write_text("".join(json.dumps(r) + "\n" for r in [
        {"text": "a", "label": "x"}, {"text": "b", "label": "y"}, {"text": "c", "label": None}]))
    squad = {"version": "v2.0", "data": [{"title": "t", "paragraphs": [{
        "context": "Hamlet is a prince.", "qas": [{"id": "1", "question": "Who?", "answers": [
            {"text": "Hamlet", "answer_start": 0}], "is_impossible": False}]}]}]}
    (tmp / "squad.json").write_text(json.dumps(squad))
    (tmp / "corpus").mkdir()  # texts, and a model's config.json beside them
    (tmp / "corpus" / "plays.txt").write_text("To be or not to be.\nThat is the question.\n")
    (tmp / "corpus" / "config.json").write_text('{"hidden_size": 128}\n')
    (tmp / "pairs3.txt").write_text("To be.\tOr not.\nA king.\tA fool.\tA third column.\n")
    names = ("nulllabel.jsonl", "squad.json", "corpus", "pairs3.txt", "thesis", "pictures",
             "binary.bin", "latin1.txt", "empty.txt", "text.txt", "labels.jsonl",
             "good.jsonl")
    places = {Path(n).stem: str(tmp / n) for n in names}
    return {"tmp": str(tmp), "model": str(model), **places}


@pytest.mark.parametrize(("argv", "expected"), BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_is_one_line_exit_2_and_nothing_changes(argv, expected, tmp_path, model, capsys,
                                                          monkeypatch):
    monkeypatch.chdir(tmp_path)
    places = _workspace(tmp_path, model)
    argv = [a.format(**places) for a in argv]
    before, model_before = _files(tmp_path), _files(model)
    try:
        code = main(argv)
    except SystemExit as exit_:  # argparse's errors
        code = exit_.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert "Traceback" not in err
    assert len(lines) == 1 and lines[0].startswith(f"bertjax {argv[0]}"), err
    assert expected.format(**places) in lines[0], err
    assert _files(tmp_path) == before, "the file system changed"
    assert _files(model) == model_before, "the model directory changed"


def test_ctrl_c_while_a_command_is_imported_is_exit_130(monkeypatch, capsys):
    import bertjax.cli.main as cli_main

    def interrupted(name):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_main.importlib, "import_module", interrupted)
    assert main(["fill-mask", "MODEL", "a [MASK]"]) == 130
    assert capsys.readouterr().err.strip() == "bertjax fill-mask: interrupted (Ctrl-C)"
