"""The run directory of `bertjax pretrain`: the one place that names every file in it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

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


class RunDir:
    """Paths of one run directory; nothing is created until a writer asks."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        self.config = self.root / "run_config.json"
        self.tokenizer = self.root / "tokenizer.json"
        self.vocab = self.root / "vocab.txt"
        self.checkpoints = self.root / "checkpoints"
        self.corrupt_checkpoints = self.root / "checkpoints_corrupt"
        self.metrics = self.root / "metrics.jsonl"
        self.tensorboard = self.root / "tensorboard"
        self.curves = self.root / "curves.png"
        self.summary = self.root / "summary.json"

    def data(self, split: str) -> Path:
        """Shard directory of a corpus split ("train" or "eval")."""
        return self.root / "data" / split

    def saved_config(self) -> dict[str, Any] | None:
        """The run configuration saved by an earlier start, if any."""
        return json.loads(self.config.read_text()) if self.config.is_file() else None

    def __str__(self) -> str:
        return str(self.root)


def describe(indent: str = "  ") -> str:
    """The run directory's contents as an indented listing."""
    width = max(len(name) for name, _ in CONTENTS)
    return "\n".join(f"{indent}{name:<{width}}  {what}" for name, what in CONTENTS)
