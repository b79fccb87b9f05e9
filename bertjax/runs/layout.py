"""The run directory of `bertjax pretrain`: the one place that names every file in it, and what a
directory holds before a run starts in it (read only: nothing here writes)."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

from bertjax.data.tokenizer import Tokenizer
from bertjax.errors import InputError
from bertjax.runs.config import RunConfig, complete_saved

# What a run directory holds, in the order a run makes it (also printed by `bertjax pretrain
# --help`).
CONTENTS: tuple[tuple[str, str], ...] = (
    ("run_config.json", "the configuration (checked again on --resume)"),
    ("tokenizer.json, vocab.txt", "WordPiece vocabulary trained on the training split (cached)"),
    ("data/train/, data/eval/", "the tokenised training and held-out splits (cached)"),
    ("checkpoints/<step>/", "Orbax steps (state, data position, config): newest N + best"),
    ("checkpoints_corrupt/", "steps that failed to restore, moved aside for inspection"),
    ("metrics.jsonl", "one record per train step and per evaluation"),
    ("tensorboard/", "the same numbers as TensorBoard events"),
    ("curves.png", "training and evaluation curves, written at the end"),
    ("summary.json", "wall time, tokens/s, final held-out metrics and the baseline ratio"),
)


def _names(level: int) -> frozenset[str]:
    """The names CONTENTS lists at one depth: 0 the run directory's own entries, 1 those of its
    sub-directories (data/train -> "train")."""
    parts = [Path(entry).parts for listed, _ in CONTENTS for entry in listed.split(", ")]
    return frozenset(p[level] for p in parts if len(p) > level and not p[level].startswith("<"))


ENTRIES = _names(0)  # run_config.json, tokenizer.json, vocab.txt, data, checkpoints, ...
DATA_ENTRIES = frozenset({"train", "eval"})


def _is_temporary(name: str, of: frozenset[str]) -> bool:
    """Whether `name` is what an interrupted atomic write of one of `of` leaves beside it
    (`.metrics.tmp-123.jsonl`, `.data.tmp-123`, `.data.old-123`; see bertjax.common.files)."""
    match = re.fullmatch(r"\.(.+?)\.(?:tmp|old)-[0-9]+(\.[A-Za-z0-9]+)?", name)
    return match is not None and (match[1] + (match[2] or "") in of or match[1] in of)


def foreign_entries(root: str | Path) -> list[str]:
    """What `root` holds that a run does not write (its own names and their temporary files),
    sorted; [] for a missing directory. data/ is looked into: it holds only train/ and eval/."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = [p.name for p in root.iterdir() if not (p.name in ENTRIES
                                                    or _is_temporary(p.name, ENTRIES))]
    data = root / "data"
    if data.is_dir():
        found += [f"data/{p.name}" for p in data.iterdir()
                  if not (p.name in DATA_ENTRIES or _is_temporary(p.name, DATA_ENTRIES))]
    elif data.exists():
        found.append("data (a file)")
    return sorted(found)


def _has_content(path: Path) -> bool:
    """A file, or a directory with anything in it (an empty directory is nothing)."""
    return path.is_file() or (path.is_dir() and any(path.iterdir()))


class RunDir:
    """Paths of one run directory; nothing is created until a writer asks."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "run_config.json"
        self.tokenizer = self.root / "tokenizer.json"
        self.vocab = self.root / "vocab.txt"
        self.data_root = self.root / "data"
        self.checkpoints = self.root / "checkpoints"
        self.corrupt_checkpoints = self.root / "checkpoints_corrupt"
        self.metrics = self.root / "metrics.jsonl"
        self.tensorboard = self.root / "tensorboard"
        self.curves = self.root / "curves.png"
        self.summary = self.root / "summary.json"

    def data(self, split: str) -> Path:
        """Shard directory of a corpus split ("train" or "eval")."""
        return self.data_root / split

    def saved_config(self, *, reading: bool = False) -> dict[str, Any] | None:
        """The run configuration saved by an earlier start, if any; a ValueError naming the file
        and the fix if it is not a JSON object of sections (`reading`: the fix for a command
        that reads the run, which has no --output-dir to change, rather than for pretrain)."""
        if not self.config.exists():
            return None
        try:
            saved = json.loads(self.config.read_bytes())
        except (OSError, ValueError) as err:  # JSONDecodeError, UnicodeDecodeError
            reason = err.strerror if isinstance(err, OSError) and err.strerror else str(err)
            raise InputError(f"{self.config} cannot be read as JSON ({reason}); "
                             f"{self.config_fix(reading)}") from None
        if not isinstance(saved, dict) or not all(isinstance(v, dict) for v in saved.values()):
            raise InputError(f"{self.config} is not a JSON object of option sections; "
                             f"{self.config_fix(reading)}")
        return complete_saved(saved)

    def finished_config(self, config: RunConfig | None = None) -> tuple[RunConfig, Tokenizer]:
        """The configuration (`config`, when the caller has read it already) and tokenizer of a
        run that has started: what reading a trained run (its model, its batches) needs. A
        ValueError if the directory holds no run."""
        if config is None:
            saved = self.saved_config(reading=True)  # damaged: an error naming how to restore it
            if not isinstance(saved, dict):
                raise InputError(f"{self.config} is missing or not a JSON object; pass a "
                                 "`bertjax pretrain` run directory or a Hugging Face model")
            config = RunConfig.from_dict(saved, source=str(self.config))
        if not self.tokenizer.is_file():
            raise InputError(f"{self.root} is a run without its tokenizer: "
                             f"{self.tokenizer} is missing; {self._tokenizer_fix()}")
        return config, Tokenizer.load(self.tokenizer, family=config.family)

    def _tokenizer_fix(self) -> str:
        """How to put back a run's tokenizer.json: its shards keep a copy."""
        copies = [p for p in (self.data(split) / "tokenizer.json" for split in ("train", "eval"))
                  if p.is_file()]
        if copies:
            return f"restore it from the copy its shards keep: cp {copies[0]} {self.tokenizer}"
        return "copy it back from where the run was made (the run cannot be read without it)"

    def config_fix(self, reading: bool = False, missing: bool = False) -> str:
        """How to restore run_config.json, damaged (or, to a reader, `missing`), for a reader of
        the run or for a job that would write in it."""
        if reading:
            first = "run" if missing else "delete it and run"
            return (f"{first} `bertjax pretrain --resume --output-dir {self.root}` (it writes the "
                    "file again from the newest checkpoint's copy, and trains on only if the "
                    "run had not finished), or pass another model")
        return (f"delete it: `bertjax pretrain --resume --output-dir {self.root}` writes it again "
                "from the newest checkpoint's copy (a run without a checkpoint starts afresh), or "
                "choose another --output-dir")

    def survey(self, steps: list[int]) -> Survey:
        """What the directory holds now (see `Survey`), given its finished checkpoint `steps`
        (`bertjax.train.saved.finished_steps`: the checkpoint format is not this layer's)."""
        present = sorted(name for name in ENTRIES - {self.config.name}
                         if _has_content(self.root / name))
        return Survey(exists=self.root.exists(), is_dir=self.root.is_dir(),
                      saved=self.saved_config() if self.root.is_dir() else None,
                      steps=list(steps), run_files=present,
                      foreign=foreign_entries(self.root))

    def __str__(self) -> str:
        return str(self.root)


@dataclasses.dataclass(frozen=True)
class Survey:
    """A run directory before a job starts in it."""

    exists: bool
    is_dir: bool
    saved: dict[str, Any] | None  # run_config.json, written once the run's data is ready
    steps: list[int]  # finished checkpoint steps
    run_files: list[str]  # other names of CONTENTS with something in them
    foreign: list[str]  # entries a run does not write

    @property
    def started(self) -> bool:
        """Whether a run has trained here (a run with a configuration but no checkpoint has not:
        it stopped in its set-up or before its first checkpoint)."""
        return bool(self.steps)


def describe(indent: str = "  ") -> str:
    """The run directory's contents as an indented listing."""
    width = max(len(name) for name, _ in CONTENTS)
    return "\n".join(f"{indent}{name:<{width}}  {what}" for name, what in CONTENTS)
