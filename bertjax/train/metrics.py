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
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from bertjax.common.files import write_text_atomic


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


class TensorBoardScalars:
    """Scalars in a TensorBoard event file, through TensorBoard's own writer (as
    `torch.utils.tensorboard` uses it; it imports no ML framework). `purge_step` (a resumed run's
    first step) starts a new session there: TensorBoard drops the earlier run's events from that
    step on, so a curve does not double back."""

    def __init__(self, logdir: str | Path, *, purge_step: int | None = None):
        from tensorboard.compat.proto.event_pb2 import Event, SessionLog
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        self._writer = EventFileWriter(str(logdir))
        if purge_step is not None:
            self._writer.add_event(Event(wall_time=time.time(), step=purge_step,
                                         session_log=SessionLog(status=SessionLog.START)))

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        summary = self._summary(value=[self._summary.Value(tag=tag, simple_value=float(value))])
        self._writer.add_event(self._event(wall_time=time.time(), step=step, summary=summary))

    def flush(self) -> None:
        self._writer.flush()

    def close(self) -> None:
        self._writer.close()


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
            purge = None if resume_step is None else resume_step + 1
            self._tb = TensorBoardScalars(tensorboard_dir, purge_step=purge)

    def log(self, kind: str, step: int, metrics: Mapping[str, Any], *, flush: bool = False,
            tensorboard: bool = True) -> None:
        """Write one record; numeric values also go to TensorBoard as `<kind>/<name>` (unless
        `tensorboard=False`: the JSON-lines file holds every record, TensorBoard a sample)."""
        if not self.enabled:
            return
        record: dict[str, Any] = {"kind": kind, "step": int(step)}
        record.update({k: _plain(v) for k, v in metrics.items()})
        assert self._file is not None  # enabled
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
