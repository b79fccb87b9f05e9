"""Reading an Orbax checkpoint step quietly and in one piece: what Orbax, absl and TensorStore
print while a step is read is held back (a damaged step is reported once, by bertjax), and only
for the duration of the read — nothing is installed at import or left behind.

Steps are checked before Orbax opens them, so a damaged one never reaches Orbax: against their
file manifest (`bertjax.io.manifest`), or, saved without one, by reading every array once
through TensorStore's synchronous API (`bertjax.io.step_arrays`: a failed read of Orbax's own
would leave TensorStore reads in flight that report into its closed event loop).
"""

from __future__ import annotations

import contextlib
import io
import logging
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orbax.checkpoint as ocp

from bertjax.io.manifest import StepDamagedError, has_manifest, verify_manifest
from bertjax.io.step_arrays import read_every_array


class StepReadError(ValueError):
    """A checkpoint step that cannot be read: damaged or incomplete (`reason` in a few words)."""

    def __init__(self, step: int, reason: str):
        super().__init__(f"checkpoint step {step} is damaged ({reason})")
        self.step, self.reason = step, reason


@contextlib.contextmanager
def quiet_orbax() -> Iterator[None]:
    """While the block runs: absl's records dropped, stderr held back, unraisable errors of
    TensorStore's callbacks dropped. Everything is restored when it ends."""
    absl, hook = logging.getLogger("absl"), sys.unraisablehook
    was = absl.disabled
    absl.disabled = True
    sys.unraisablehook = lambda unraisable: None
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    finally:
        absl.disabled = was
        sys.unraisablehook = hook


@contextlib.contextmanager
def quiet_saves() -> Iterator[None]:
    """While the block runs, Orbax's warning that a step was saved without metrics is dropped:
    steps saved between evaluations carry no loss on purpose."""
    absl = logging.getLogger("absl")
    absl.addFilter(_untracked_save)
    try:
        yield
    finally:
        absl.removeFilter(_untracked_save)


def _untracked_save(record: logging.LogRecord) -> bool:
    return "did not provide metrics" not in record.getMessage()


def reason(err: BaseException) -> str:
    """A failed read's error in a few words: its first line, without TensorStore's spec."""
    lines = str(err).strip().splitlines()
    text = (lines[0] if lines else "").split(" [tensorstore_spec")[0] or type(err).__name__
    return text if len(text) <= 160 else f"{text[:40]} ... {text[-110:]}"


def check_step_files(step_dir: Path, step: int) -> None:
    """StepReadError if `step_dir` has a manifest its files do not match, or, without one, if
    an array of its state cannot be read (the state digest is checked after reading)."""
    if has_manifest(step_dir):
        try:
            verify_manifest(step_dir)
        except StepDamagedError as err:
            raise StepReadError(step, str(err)) from None
    elif (step_dir / "state").is_dir():
        try:
            read_every_array(step_dir / "state")
        except (ValueError, OSError) as err:  # TensorStore's errors are ValueErrors
            raise StepReadError(step, reason(err)) from None


def read_state_item(step_dir: Path, step: int) -> Any:
    """Step `step`'s `state` item as nested dicts (no target), its files checked first; any
    failure is a StepReadError."""
    check_step_files(step_dir, step)
    try:
        with quiet_orbax(), ocp.StandardCheckpointer() as reader:
            return reader.restore(step_dir.absolute() / "state")
    except Exception as err:  # noqa: BLE001 - any read error means this step is unusable
        raise StepReadError(step, reason(err)) from err
