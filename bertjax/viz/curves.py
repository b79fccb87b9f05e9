"""Training pictures: pre-training curves from a run's metrics log, and confusion matrices.

Matplotlib is used through its Agg canvas directly (no pyplot, no global backend switch).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from bertjax.common.files import atomic_file


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


def _panel(ax: Axes, title: str, lines: list[tuple[list[dict[str, Any]], str, str, str, int]]) -> None:
    """One panel: each line is (records, key, label, style, smoothing window); absent keys skipped."""
    for records, key, label, style, window in lines:
        steps, values = _series(records, key)
        if not steps:
            continue
        if key == "learning_rate":
            peak = max(values) or 1.0
            values = [v / peak for v in values]
        kwargs: dict[str, Any] = {"color": "gray"} if style in ("--", ":") else {}
        if window > 1:
            label, kwargs["alpha"] = f"{label} (avg {window})", 0.8
        ax.plot(steps, _smooth(values, window), style, label=label, **kwargs)
    ax.set_xlabel("step")
    ax.set_title(title)
    ax.legend(fontsize=8)


def _save(fig: Figure, png_path: str | Path, dpi: int = 100) -> Path:
    FigureCanvasAgg(fig)
    with atomic_file(png_path) as tmp:
        fig.savefig(tmp, format="png", dpi=dpi)
    return Path(png_path)


def plot_curves(records: Iterable[dict[str, Any]], png_path: str | Path, *, title: str = "",
                masking: tuple[float, float] | None = None) -> Path:
    """Training and evaluation curves (losses, MLM accuracy vs baseline, NSP accuracy) as a PNG,
    from a run's metrics records (`bertjax.train.metrics.read_jsonl`). A run of masked LM alone
    has no NSP lines: its third panel shows the learning rate alone, and says so; an ELECTRA
    run's shows its discriminator (replaced-token accuracy, precision, recall) instead, its MLM
    lines the generator's. `masking` (training, evaluation) rates label the two MLM accuracies,
    which differ with them."""
    records = list(records)
    train = [r for r in records if r.get("kind") == "train"]
    evals = [r for r in records if r.get("kind") == "eval"]
    w = max(1, len(train) // 50)
    fig = Figure(figsize=(15, 4.2), layout="tight")
    losses, mlm, nsp = fig.subplots(1, 3)
    _panel(losses, "losses", [
        (train, "mlm_loss", "train MLM loss", "-", w), (train, "nsp_loss", "train NSP loss", "-", w),
        (train, "rtd_loss", "train replaced-token loss", "-", w),
        (evals, "mlm_loss", "eval MLM loss", "o-", 1), (evals, "nsp_loss", "eval NSP loss", "o-", 1),
        (evals, "rtd_loss", "eval replaced-token loss", "o-", 1)])
    losses.set_ylabel("loss")
    at = [f", {rate:.0%} masked" for rate in masking] if masking else ["", ""]
    _panel(mlm, "masked-LM accuracy", [
        (train, "mlm_accuracy", f"train MLM accuracy{at[0]}", "-", w),
        (evals, "mlm_accuracy", f"eval MLM accuracy{at[1]}", "o-", 1),
        (evals, "baseline_accuracy", "most-frequent-token baseline", "--", 1)])
    if any("rtd_accuracy" in r for r in records):
        _panel(nsp, "discriminator (replaced-token detection)", [
            (train, "rtd_accuracy", "train accuracy", "-", w),
            (evals, "rtd_accuracy", "eval accuracy", "o-", 1),
            (evals, "rtd_precision", "eval precision", "s--", 1),
            (evals, "rtd_recall", "eval recall", "^--", 1),
            (train, "learning_rate", "LR / peak LR", ":", 1)])
        if title:
            fig.suptitle(title)
        return _save(fig, png_path)
    next_sentence = any("nsp_accuracy" in r for r in records)
    _panel(nsp, "next-sentence accuracy" if next_sentence else "learning rate (masked LM alone)", [
        (train, "nsp_accuracy", "train NSP accuracy", "-", w),
        (evals, "nsp_accuracy", "eval NSP accuracy", "o-", 1),
        (train, "learning_rate", "LR / peak LR", ":", 1)])
    if title:
        fig.suptitle(title)
    return _save(fig, png_path)


def plot_confusion(matrix: Any, labels: Iterable[str], png_path: str | Path, *, title: str = "") -> Path:
    """A confusion matrix (rows: true label, columns: predicted) as a PNG heat map with counts."""
    matrix = np.asarray(matrix)
    labels = list(labels)
    size = 1.2 + 0.7 * len(labels)
    fig = Figure(figsize=(size + 1.5, size), layout="tight")
    ax = fig.subplots()
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
    return _save(fig, png_path)
