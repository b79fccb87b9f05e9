"""The output rule (issue 45): no command writes over, into or around one of its inputs - the
model directory and every file in it, a run, `--file`, the training files, a corpus, a
vocabulary - however the output is spelt (directly, through `..`, through a symbolic link, as a
hard link), with or without `--force`. Each refusal is exit status 2, one line naming the output
and the input, before any work, and every file stays byte-identical.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
from pathlib import Path

import pytest
from use_helpers import tiny_checkpoint

from bertjax.cli.main import main


def _snapshot(root: Path) -> dict[str, bytes | str | None]:
    """Every entry under `root`: a file's bytes, a link's target, None for a directory."""
    return {str(p.relative_to(root)): (os.readlink(p) if p.is_symlink() else
                                       p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _run_shaped(run: Path, model: Path) -> Path:
    """A directory laid out as a `bertjax pretrain` run (the rule looks at paths only: every
    refusal comes before anything is read)."""
    run.mkdir()
    for name in ("tokenizer.json", "vocab.txt"):
        shutil.copy(model / name, run / name)
    (run / "run_config.json").write_text('{"model": {}, "data": {}, "optim": {}, "train": {}}\n')
    (run / "checkpoints" / "3" / "state").mkdir(parents=True)
    (run / "checkpoints" / "3" / "state" / "_METADATA").write_text("{}\n")
    (run / "metrics.jsonl").write_text('{"step": 3, "loss": 5.0}\n')
    return run


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("rule")
    model = tmp / "model"
    shutil.copytree(tiny_checkpoint(), model)
    (tmp / "lines.txt").write_text("a storm at sea\nthe king is dead\n")
    rows = [{"text": f"{'the king' if i % 2 else 'a fool'} speaks {i}", "label": i % 2}
            for i in range(8)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp / "valid.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (tmp / "corpus").mkdir()
    (tmp / "corpus" / "plays.txt").write_text("To be or not to be.\nThat is the question.\n\n"
                                              "Good night, sweet prince.\n")
    (tmp / "corpus" / "more.jsonl").write_text('{"text": "A horse! A horse!"}\n')
    (tmp / "vocab.txt").write_bytes((model / "vocab.txt").read_bytes())
    _run_shaped(tmp / "run", model)
    (tmp / "links").mkdir()
    (tmp / "hard").mkdir()
    return {"tmp": tmp, "model": model, "run": tmp / "run", "lines": tmp / "lines.txt",
            "train": tmp / "train.jsonl", "valid": tmp / "valid.jsonl", "corpus": tmp / "corpus",
            "vocab": tmp / "vocab.txt"}


# command -> (its arguments, `{out}` where the output goes; the inputs it reads; has --force)
WRITERS = {
    "embed": (["embed", "{model}", "--file", "{lines}", "--out", "{out}"], ("model", "lines"),
              True),
    "embed RUN": (["embed", "{run}", "--file", "{lines}", "--out", "{out}"], ("run",), True),
    "classify": (["classify", "{model}", "--file", "{train}", "--out", "{out}"],
                 ("model", "train"), True),
    "attention": (["attention", "{model}", "--file", "{lines}", "--out", "{out}"],
                  ("model", "lines"), True),
    "convert": (["convert", "{model}", "{out}", "--as", "BertForMaskedLM"], ("model",), True),
    "finetune": (["finetune", "{model}", "--train", "{train}", "--validation", "{valid}",
                  "--output-dir", "{out}"], ("model", "train", "valid"), False),
    "pretrain": (["pretrain", "--data.corpus={corpus}", "--output-dir", "{out}"], ("corpus",),
                 False),
    "vocab": (["vocab", "--corpus", "{corpus}", "--out", "{out}"], ("corpus",), True),
    "data": (["data", "--corpus", "{corpus}", "--vocab", "{vocab}", "--out", "{out}"],
             ("corpus", "vocab"), True),
    "bench data": (["bench", "data", "--corpus", "{corpus}", "--vocab", "{vocab}", "--json",
                    "{out}"], ("corpus", "vocab"), True),
    "bench embed": (["bench", "embed", "--model", "{model}", "--file", "{lines}", "--json",
                     "{out}"], ("model", "lines"), True),
    "bench finetune": (["bench", "finetune", "--model", "{model}", "--json", "{out}"],
                       ("model",), True),
    "bench corpus": (["bench", "corpus", "--vocab", "{vocab}", "--json", "{out}"], ("vocab",),
                     True),
}
SPELLINGS = ("direct", "dot-dot", "symlink", "hard link")


def _targets(path: Path) -> list[Path]:
    """An input and, for a directory, every file in it."""
    return [path] + (sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [])


def _cases() -> list[tuple[str, str, str, str]]:
    """(command, input, file of it relative to the input, spelling)."""
    files = {"model": ["", "config.json", "model.safetensors", "tokenizer.json", "vocab.txt",
                       "tokenizer_config.json", "special_tokens_map.json"],
             "run": ["", "tokenizer.json", "vocab.txt", "run_config.json", "metrics.jsonl",
                     "checkpoints/3/state/_METADATA"],
             "corpus": ["", "plays.txt", "more.jsonl"],
             "lines": [""], "train": [""], "valid": [""], "vocab": [""]}
    return [(command, source, name, spelling)
            for command, (_, inputs, _) in WRITERS.items() for source in inputs
            for name, spelling in itertools.product(files[source], SPELLINGS)
            if not (spelling == "hard link" and (name == "" and source in ("model", "run",
                                                                             "corpus")))]


def _spell(target: Path, spelling: str, links: Path, hard: Path, key: str) -> str:
    """`target` as `spelling` gives it (making the link it needs)."""
    if spelling == "direct":
        return str(target)
    if spelling == "dot-dot":
        return f"{target.parent}/../{target.parent.name}/{target.name}"
    if spelling == "symlink":
        link = links / key
        if not link.is_symlink():
            link.symlink_to(target)
        return str(link)
    link = hard / key
    if not link.exists():
        os.link(target, link)
    return str(link)


CASES = _cases()


@pytest.mark.parametrize(("command", "source", "name", "spelling"), CASES,
                         ids=["-".join(c).replace("/", "_") or "x" for c in CASES])
def test_no_output_lands_on_an_input(workspace, capsys, monkeypatch, command, source, name,
                                     spelling):
    template, _, has_force = WRITERS[command]
    target = workspace[source] / name if name else workspace[source]
    key = f"{command}-{source}-{name}".replace("/", "_").replace(" ", "_")
    out = _spell(target, spelling, workspace["tmp"] / "links", workspace["tmp"] / "hard", key)
    places = {k: str(v) for k, v in workspace.items()} | {"out": out}
    argv = [a.format(**places) for a in template] + (["--force"] if has_force else [])
    monkeypatch.chdir(workspace["tmp"])
    before = _snapshot(workspace["tmp"])
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    option = next(a for a in reversed(template) if a.startswith("--") or a == "{model}")
    option = "OUT_DIR" if command == "convert" else option
    assert code == 2, err
    assert len(lines) == 1, err
    assert lines[0].startswith(f"bertjax {argv[0] if argv[0] != 'bench' else ' '.join(argv[:2])}"
                               f": error: {option} {out} "), lines[0]
    assert "which this command reads" in lines[0] or "this command reads:" in lines[0], lines[0]
    assert _snapshot(workspace["tmp"]) == before


# The issue's own cases, each with the line it now answers.


def _refused(argv: list[str], capsys) -> str:
    code = main(argv)
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


def test_embed_force_never_replaces_the_weights(workspace, capsys):
    model, before = workspace["model"], _snapshot(workspace["model"])
    line = _refused(["embed", str(model), "--file", str(workspace["lines"]), "--out",
                     f"{model}/model.safetensors", "--force"], capsys)
    assert line == (f"bertjax embed: error: --out {model}/model.safetensors lies inside MODEL "
                    f"{model}, which this command reads: writing there would change your input; "
                    "choose another --out, outside it")
    assert _snapshot(model) == before


def test_embed_of_a_run_never_replaces_its_tokenizer(workspace, capsys):
    run, before = workspace["run"], _snapshot(workspace["run"])
    line = _refused(["embed", str(run), "--file", str(workspace["lines"]), "--out",
                     f"{run}/tokenizer.json", "--force"], capsys)
    assert line.startswith(f"bertjax embed: error: --out {run}/tokenizer.json lies inside MODEL "
                           f"{run}, which this command reads")
    assert _snapshot(run) == before


def test_classify_force_never_replaces_config_json(workspace, capsys):
    model, before = workspace["model"], _snapshot(workspace["model"])
    line = _refused(["classify", str(model), "--file", str(workspace["train"]), "--out",
                     f"{model}/config.json", "--force"], capsys)
    assert line.startswith(f"bertjax classify: error: --out {model}/config.json lies inside MODEL")
    assert _snapshot(model) == before


def test_bench_json_on_the_model_is_refused_before_the_benchmark(workspace, capsys,
                                                                  monkeypatch):
    def never(*args, **kwargs):
        raise AssertionError("the benchmark ran before --json was checked")

    monkeypatch.setattr("bertjax.bench.embed.run_embed_benchmark", never)
    model, before = workspace["model"], _snapshot(workspace["model"])
    line = _refused(["bench", "embed", "--model", str(model), "--json", f"{model}/config.json",
                     "--force"], capsys)
    assert line.startswith(f"bertjax bench embed: error: --json {model}/config.json lies inside "
                           f"--model {model}")
    assert _snapshot(model) == before


def test_convert_refuses_to_write_its_own_source(workspace, capsys):
    model, before = workspace["model"], _snapshot(workspace["model"])
    line = _refused(["convert", str(model), str(model), "--as", "BertForMaskedLM"], capsys)
    assert line == (f"bertjax convert: error: OUT_DIR {model} is the MODEL this command reads: "
                    "writing it would replace your input; choose another OUT_DIR")
    line = _refused(["convert", str(model), str(model.parent)], capsys)
    assert line.startswith(f"bertjax convert: error: OUT_DIR {model.parent} holds MODEL {model}, "
                           "which this command reads: writing OUT_DIR would replace your input")
    assert _snapshot(model) == before


def test_a_hard_link_is_told_apart_from_a_copy(workspace, tmp_path, capsys):
    """A copy of an input's file is no input: `--force` replaces it; a hard link is one."""
    model = workspace["model"]
    copy = tmp_path / "copy.json"
    shutil.copy(model / "config.json", copy)
    argv = ["classify", str(model), "--file", str(workspace["train"]), "--force", "--out"]
    os.link(model / "config.json", tmp_path / "linked.json")
    line = _refused([*argv, str(tmp_path / "linked.json")], capsys)
    assert line == (f"bertjax classify: error: --out {tmp_path}/linked.json is a hard link to "
                    f"{model}/config.json, which this command reads (MODEL): writing it would "
                    "replace your input; choose another --out")
    code = main([*argv, str(copy)])
    assert code == 2  # the tiny model has no classifier: refused later, for that reason
    assert "bertjax finetune" in capsys.readouterr().err
    assert copy.read_bytes() == (model / "config.json").read_bytes()
