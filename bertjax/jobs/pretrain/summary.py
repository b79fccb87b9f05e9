"""A pre-training run's summary: `PretrainResult`, what `pretrain` returns and writes to
summary.json (with the loss curves beside it), and reading it back, e.g. for `--resume` of a
finished run. summary.json is strict JSON: a number the run does not have yet (no evaluation ran)
is null, read back as NaN.
"""

from __future__ import annotations

import dataclasses
import json
import math
from typing import Any

from bertjax.common.files import write_json_atomic
from bertjax.jobs.pretrain.data import EVAL_MASK_PROB
from bertjax.runs.layout import RunDir
from bertjax.train.metrics import read_jsonl
from bertjax.viz.curves import plot_curves


@dataclasses.dataclass
class PretrainResult:
    """What a finished (or stopped) run reports; also written to summary.json."""

    run_dir: str
    steps: int
    resumed_from: int | None
    wall_time_s: float
    train_time_s: float  # steady-state training: no compilation, evaluation or checkpoints
    tokens_per_s: float  # padded tokens per second of train_time_s
    first_step_s: float  # the run's first step, compilation included
    eval: dict[str, float]
    baseline_accuracy: float
    baseline_token: str
    accuracy_ratio: float
    stopped_early: str | None = None
    # --resume of a run that had finished: nothing was trained, this is its saved summary
    # (not written to summary.json)
    already_finished: bool = False

    def summary(self) -> dict[str, Any]:
        """What summary.json holds."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k != "already_finished"}


def write_summary(run: RunDir, result: PretrainResult, preset: str, *, mask_prob: float,
                  curves: bool = True) -> None:
    """summary.json (and, with `curves`, curves.png from the metrics log) of `run`, which trains
    masking `mask_prob` of the pieces."""
    write_json_atomic(run.summary, result.summary())
    if curves:
        plot_curves(read_jsonl(run.metrics), run.curves,
                    title=f"bertjax pretrain: {preset}, {run.root.name}",
                    masking=(mask_prob, EVAL_MASK_PROB))


def read_summary(run: RunDir) -> PretrainResult | None:
    """summary.json as a PretrainResult; None if it is missing or not one."""
    try:
        saved = json.loads(run.summary.read_bytes())
        fields = {f.name: f.type for f in dataclasses.fields(PretrainResult)}
        values: dict[str, Any] = {k: math.nan if v is None and fields[k] == "float" else v
                                  for k, v in saved.items() if k in fields}  # null: NaN
        return PretrainResult(**values)
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def last_eval_record(run: RunDir) -> dict[str, float]:
    """The newest evaluation record of the run's metrics log ({} if none)."""
    records = read_jsonl(run.metrics, "eval")
    return {k: v for k, v in (records[-1] if records else {}).items() if isinstance(v, float)}
