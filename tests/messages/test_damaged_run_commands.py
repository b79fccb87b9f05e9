"""A damaged checkpoint in a `bertjax pretrain` run, read by every command that takes a MODEL
(issue 29): bytes flipped in a data file, a file truncated, a file missing. Each command makes
the choice `pretrain --resume` makes, stated once: the damaged best step is skipped for the
newest readable one with ONE warning line (and the command's results are those of that step), or
the command's own one-line error; no traceback, and the run directory is left as it was.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from use_helpers import tiny_run

from bertjax.cli.main import main
from bertjax.train.saved import best_step, finished_steps

TEXT = "to be or not to be : that is the [MASK] ."
READABLE = 3  # the step loaded once the best one (6) is damaged


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    run = tiny_run(tmp_path_factory.mktemp("run") / "run")
    assert finished_steps(run / "checkpoints") == [3, 6]
    assert best_step(run / "checkpoints") == 6
    return run


def _data_files(step_dir: Path) -> list[Path]:
    """The array-data files of a step's state item, largest first."""
    files = [p for p in (step_dir / "state").rglob("*") if p.is_file() and p.parent.name == "d"]
    return sorted(files, key=lambda p: -p.stat().st_size)


def _flip(step_dir: Path) -> None:
    target = _data_files(step_dir)[0]
    data = bytearray(target.read_bytes())
    for i in (len(data) // 3, len(data) // 2):  # the size stays: only a digest can tell
        data[i] ^= 0xFF
    target.write_bytes(bytes(data))


def _truncate(step_dir: Path) -> None:
    target = _data_files(step_dir)[0]
    target.write_bytes(target.read_bytes()[: target.stat().st_size // 2])


def _remove(step_dir: Path) -> None:
    _data_files(step_dir)[0].unlink()


DAMAGES = {"bytes flipped": _flip, "truncated": _truncate, "missing": _remove}


def _workspace(tmp: Path) -> dict[str, str]:
    (tmp / "lines.txt").write_text("a storm at sea\nthe king is dead\n")
    (tmp / "texts.txt").write_text("a storm at sea\n")
    rows = [{"text": f"{'the king' if i % 2 else 'a fool'} speaks {i}", "label": i % 2}
            for i in range(16)]
    (tmp / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return {"tmp": str(tmp)}


# command -> (arguments after MODEL, exit status, what the line of a refusal says, outputs)
COMMANDS = {
    "fill-mask": ([TEXT], 0, None, ()),
    "nsp": (["To be.", "Or not."], 0, None, ()),
    "embed": (["--file", "{tmp}/lines.txt", "--out", "{tmp}/v.npy"], 0, None, ("v.npy",)),
    "similarity": (["--file", "{tmp}/lines.txt", "--query", "the king"], 0, None, ()),
    "attention": (["the king is dead", "--out", "{tmp}/att"], 0, None, ("att/attention.html",)),
    "convert": (["{tmp}/hf"], 0, None, ("hf/model.safetensors",)),
    "finetune": (["--train", "{tmp}/train.jsonl", "--output-dir", "{tmp}/ft", "--epochs", "1",
                  "--batch-size", "8", "--max-length", "16", "--no-progress"], 0, None,
                 ("ft/model/model.safetensors",)),
    "classify": (["--file", "{tmp}/texts.txt"], 2, "bertjax finetune", ()),
    "tag": (["Hamlet"], 2, "bertjax finetune", ()),
    "choose": (["--context", "c", "--choice", "a", "--choice", "b"], 2, "bertjax finetune", ()),
    "answer": (["--question", "Who?", "--context", "Hamlet."], 2, "bertjax finetune", ()),
}


def _snapshot(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None)
            for p in sorted(root.rglob("*"))}


def _run(command: str, model: Path, tmp: Path, capsys, *extra: str) -> tuple[int, str, str]:
    """(exit status, stdout, stderr) of `command` on `model` in the workspace `tmp`."""
    places = {"tmp": str(tmp)}
    args = [a.format(**places) for a in COMMANDS[command][0]]
    code = main([command, str(model), *args, *extra])
    out, err = capsys.readouterr()
    return code, out.replace(str(model), "MODEL").replace(str(tmp), "TMP"), err


def _results(command: str, model: Path, tmp: Path, out: str) -> dict[str, bytes | str]:
    """What a command produced: its output (timings removed) and the bytes of its files."""
    kept = "\n".join(line for line in out.splitlines() if " s, " not in line and "/s" not in line)
    return {"stdout": kept if command != "finetune" else "",
            **{name: (tmp / name).read_bytes().replace(str(model).encode(), b"MODEL")
               for name in COMMANDS[command][3] if command not in ("finetune", "convert")}}


@pytest.mark.slow
@pytest.mark.parametrize("damage", sorted(DAMAGES))
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_a_damaged_best_step_is_stated_once_by_every_command(run_dir, tmp_path, capsys,
                                                             command, damage):
    run = tmp_path / "run"
    shutil.copytree(run_dir, run)
    DAMAGES[damage](run / "checkpoints" / "6")
    work = tmp_path / "work"
    work.mkdir()
    _workspace(work)
    before_run, before_work = _snapshot(run), _snapshot(work)
    code, out, err = _run(command, run, work, capsys)
    _, status, refusal, outputs = COMMANDS[command]
    assert code == status, err[-3000:]
    assert "Traceback" not in err and "absl" not in err and "pybind11" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    warnings = [line for line in lines if line.startswith(f"bertjax {command}: warning: ")]
    if status == 0:
        assert len(warnings) == 1, err
        assert all(line in warnings or not line.startswith("bertjax") for line in lines), err
        assert "checkpoint step 6 is damaged" in warnings[0], warnings
        assert f"loaded step {READABLE} instead" in warnings[0], warnings
        if command not in ("finetune", "convert"):  # the readable step's results
            reference = tmp_path / "reference"
            reference.mkdir()
            _workspace(reference)
            code, ref_out, ref_err = _run(command, run_dir, reference, capsys, "--step",
                                          str(READABLE))
            assert code == 0, ref_err
            assert (_results(command, run, work, out)
                    == _results(command, run_dir, reference, ref_out))
        if command == "convert":
            assert f"run, step {READABLE}" in out, out
        for name in outputs:
            assert (work / name).is_file(), name
        new = set(_snapshot(work)) - set(before_work)
        assert all(any(n == o or n.startswith(o.split("/")[0]) for o in outputs) for n in new), new
    else:
        assert len(lines) == 1 and lines[0].startswith(f"bertjax {command}: error: "), err
        assert refusal in lines[0], lines[0]
        assert _snapshot(work) == before_work
    assert _snapshot(run) == before_run  # nothing moved aside, created or cleaned up in the run
