"""Stopping a job when its caller asks (Ctrl-C at the command line), at a point where nothing is
lost. The job installs no signal handler: it says where it is (`phase`) and looks at the request
at its safe points; the caller's handler (`bertjax.cli.interrupts`) calls `press()` for each
Ctrl-C and ends the process at once where `press()` says so.

What a Ctrl-C does, by phase:

    setting up       the job stops at its next `poll()` (files are written aside and renamed, and
                     what a run that never trained wrote is removed again)
    nothing to save  the process ends at once: imports, TensorBoard's, the first step's XLA
                     compilation (which Python cannot interrupt); the run keeps its options
    training         the loop stops at the end of the step, with a checkpoint
    saving           a checkpoint is being written: a second Ctrl-C waits for it to finish

A second Ctrl-C ends the process at once, except while a checkpoint is written (then right
after it). No framework import.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterator

__all__ = ["NOTHING_TO_SAVE", "SAVING", "SETTING_UP", "TRAINING", "Interrupted", "StopRequest"]

SETTING_UP, NOTHING_TO_SAVE, TRAINING, SAVING = ("setting up", "nothing to save", "training",
                                                 "saving")


class Interrupted(KeyboardInterrupt):
    """A job that stopped on its caller's request (Ctrl-C): the message says what was saved
    and how to resume."""


class StopRequest:
    """A caller's request that a job stop, and how far the job has come (see the module
    docstring). `message()` is what to say when the process ends at once (the job sets it)."""

    def __init__(self, phase: str = SETTING_UP,
                 message: Callable[[], str] = lambda: "interrupted (Ctrl-C)") -> None:
        self.count = 0  # Ctrl-Cs so far
        self.step: int | None = None  # the newest step done; None while setting up
        self.phase = phase
        self.message = message
        self._lock = threading.Lock()

    @property
    def requested(self) -> bool:
        """Whether the caller asked the job to stop."""
        return self.count > 0

    def press(self) -> str | None:
        """One more request to stop (the caller's Ctrl-C): the message to end the process with
        at once, or None where the job stops at its next safe point."""
        with self._lock:
            self.count += 1
            at_once = self.phase == NOTHING_TO_SAVE or (self.count > 1 and self.phase != SAVING)
        return self.message() if at_once else None

    def poll(self) -> None:
        """Raise KeyboardInterrupt where the job must stop now: asked while setting up, or asked
        twice (the second came while a checkpoint was written)."""
        if self.count > (1 if self.phase == TRAINING else 0):
            raise KeyboardInterrupt

    def trained(self, step: int) -> None:
        """`step` has run: from now on a Ctrl-C stops the loop at the end of a step."""
        self.step, self.phase = step, TRAINING

    @contextlib.contextmanager
    def entering(self, phase: str) -> Iterator[None]:
        """Inside the block the job is in `phase` (e.g. nothing to save while the first step
        compiles); the phase before it comes back after. A pending stop is raised before and
        after the block."""
        self.poll()
        with self._lock:
            before, self.phase = self.phase, phase
        try:
            yield
        finally:
            with self._lock:
                if self.phase == phase:
                    self.phase = before
        self.poll()
