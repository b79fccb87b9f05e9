"""Run metrics: one JSON-lines file (the record), TensorBoard events (to browse) and a PNG of curves.

Every record is one line `{"kind": "train" | "eval" | ..., "step": int, <name>: number, ...}`.
`step` is the number of optimizer updates done when the record was made (train record `s` describes
update `s`). On resume the file is cut back to the restored step, so a resumed run's log reads
exactly like an uninterrupted one.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from bertjax.files import atomic_file, write_text_atomic


def _plain(value: Any) -> Any:
    """JSON-safe scalar: numpy / jax scalars become floats or ints; NaN and Inf become strings."""
    if isinstance(value, bool | str) or value is None:
        return value
    if isinstance(value, int):
        return value
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    if hasattr(value, "dtype") and getattr(value.dtype, "kind", "f") in "iu":
        return int(value)
    if not math.isfinite(number):
        return str(number)  # "nan", "inf", "-inf": valid JSON, unlike NaN
    return number


def read_jsonl(path: str | Path, kind: str | None = None) -> list[dict[str, Any]]:
    """The records of a metrics file (of one kind if given); a torn last line is skipped."""
    path = Path(path)
    if not path.is_file():
        return []
    records = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue  # a line cut short by a kill
        if kind is None or record.get("kind") == kind:
            records.append(record)
    return records


def truncate_jsonl(path: str | Path, last_step: int) -> int:
    """Drop records made after `last_step` (the restored checkpoint); return how many were kept."""
    path = Path(path)
    if not path.is_file():
        return 0
    kept = [r for r in read_jsonl(path) if int(r.get("step", 0)) <= last_step]
    write_text_atomic(path, "".join(json.dumps(r, sort_keys=True) + "\n" for r in kept))
    return len(kept)


class MetricsWriter:
    """Appends records to a JSON-lines file and mirrors numbers to TensorBoard events.

    `enabled=False` (non-zero processes in a multi-host run) makes every call a no-op.
    `resume_step` cuts the existing log back to that step and tells TensorBoard to purge later
    events, so curves do not double back after a resume.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        tensorboard_dir: str | Path | None = None,
        enabled: bool = True,
        resume_step: int | None = None,
    ):
        self.path = Path(path)
        self.enabled = enabled
        self._file = None
        self._tb = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if resume_step is not None:
            truncate_jsonl(self.path, resume_step)
        elif self.path.exists():
            self.path.unlink()
        self._file = self.path.open("a")
        if tensorboard_dir is not None:
            from tensorboardX import SummaryWriter

            purge = None if resume_step is None else resume_step + 1
            self._tb = SummaryWriter(str(tensorboard_dir), purge_step=purge)

    def log(self, kind: str, step: int, metrics: Mapping[str, Any], *, flush: bool = False,
            tensorboard: bool = True) -> None:
        """Write one record; numeric values also go to TensorBoard as `<kind>/<name>` (unless
        `tensorboard=False`: the JSON-lines file holds every record, TensorBoard a sample)."""
        if not self.enabled:
            return
        record = {"kind": kind, "step": int(step)}
        record.update({k: _plain(v) for k, v in metrics.items()})
        self._file.write(json.dumps(record, sort_keys=True) + "\n")
        if flush:
            self._file.flush()
        if self._tb is not None and tensorboard:
            for name, value in record.items():
                if name in ("kind", "step") or isinstance(value, bool | str) or value is None:
                    continue
                self._tb.add_scalar(f"{kind}/{name}", value, int(step))

    def flush(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
        if self._tb is not None:
            self._tb.flush()

    def close(self) -> None:
        if self._file is not None:
            self.flush()
            self._file.close()
            self._file = None
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def _series(records: Iterable[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    steps, values = [], []
    for r in records:
        value = r.get(key)
        if isinstance(value, int | float) and not isinstance(value, bool):
            steps.append(int(r["step"]))
            values.append(float(value))
    return steps, values


def _smooth(values: list[float], window: int) -> list[float]:
    if window <= 1 or len(values) < window:
        return values
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out


def plot_curves(jsonl_path: str | Path, png_path: str | Path, *, title: str = "") -> Path:
    """Training and evaluation curves (losses, MLM accuracy vs baseline, NSP accuracy) as a PNG."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    train = read_jsonl(jsonl_path, "train")
    evals = read_jsonl(jsonl_path, "eval")
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    window = max(1, len(train) // 50)

    ax = axes[0]
    for key, label in (("mlm_loss", "train MLM loss"), ("nsp_loss", "train NSP loss")):
        steps, values = _series(train, key)
        if steps:
            ax.plot(steps, _smooth(values, window), label=f"{label} (avg {window})", alpha=0.8)
    for key, label in (("mlm_loss", "eval MLM loss"), ("nsp_loss", "eval NSP loss")):
        steps, values = _series(evals, key)
        if steps:
            ax.plot(steps, values, "o-", label=label)
    ax.set_xlabel("step")
    ax.set_ylabel("loss")
    ax.set_title("losses")
    ax.legend(fontsize=8)

    ax = axes[1]
    steps, values = _series(train, "mlm_accuracy")
    if steps:
        ax.plot(steps, _smooth(values, window), label="train MLM accuracy", alpha=0.8)
    steps, values = _series(evals, "mlm_accuracy")
    if steps:
        ax.plot(steps, values, "o-", label="eval MLM accuracy")
    steps, values = _series(evals, "baseline_accuracy")
    if steps:
        ax.plot(steps, values, "--", color="gray", label="most-frequent-token baseline")
    ax.set_xlabel("step")
    ax.set_title("masked-LM accuracy")
    ax.legend(fontsize=8)

    ax = axes[2]
    steps, values = _series(train, "nsp_accuracy")
    if steps:
        ax.plot(steps, _smooth(values, window), label="train NSP accuracy", alpha=0.8)
    steps, values = _series(evals, "nsp_accuracy")
    if steps:
        ax.plot(steps, values, "o-", label="eval NSP accuracy")
    steps, values = _series(train, "learning_rate")
    if steps:
        peak = max(values) or 1.0
        ax.plot(steps, [v / peak for v in values], ":", color="gray", label="LR / peak LR")
    ax.set_xlabel("step")
    ax.set_title("next-sentence accuracy")
    ax.legend(fontsize=8)

    if title:
        fig.suptitle(title)
    fig.tight_layout()
    with atomic_file(png_path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return Path(png_path)


def plot_confusion(matrix: Any, labels: Iterable[str], png_path: str | Path, *, title: str = "") -> Path:
    """A confusion matrix (rows: true label, columns: predicted) as a PNG heat map with counts."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    matrix = np.asarray(matrix)
    labels = list(labels)
    size = 1.2 + 0.7 * len(labels)
    fig, ax = plt.subplots(figsize=(size + 1.5, size))
    shares = matrix / np.maximum(matrix.sum(1, keepdims=True), 1)  # each true label's row sums to 1
    image = ax.imshow(shares, cmap="Blues", vmin=0.0, vmax=1.0)
    for (i, j), count in np.ndenumerate(matrix):
        ax.text(j, i, str(count), ha="center", va="center",
                color="white" if shares[i, j] > 0.5 else "black", fontsize=8)
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    fig.colorbar(image, ax=ax, label="share of the true label")
    if title:
        ax.set_title(title)
    fig.tight_layout()
    with atomic_file(png_path) as tmp:
        fig.savefig(tmp, dpi=100)
    plt.close(fig)
    return Path(png_path)
