"""Ctrl-C during a training job: stop at the end of a step with a checkpoint, not mid-write.

No framework import: the command line installs the handler before it imports JAX.
"""

from __future__ import annotations

import contextlib
import gc
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class PretrainInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run: the message says what was saved and how to resume."""


class CtrlC:
    """SIGINT while a job runs. `with ctrl_c:` installs the handler (in the main thread; nested
    `with` blocks share it) and puts the previous one back when the outermost block ends.

    The first Ctrl-C sets `requested`. Where the job only reads and writes files (`at_once()`:
    reading the corpus, making the vocabulary and shards) it also raises KeyboardInterrupt at
    once. Elsewhere in the set-up (imports, JAX, Orbax) `poll()` raises it at the next stage:
    a KeyboardInterrupt raised inside XLA's compilation or a C extension's import can crash the
    interpreter as it exits. Once a step has run (`trained`), the loop stops at the end of the
    step with a checkpoint. A second Ctrl-C raises at once, except inside `deferred()` (a
    checkpoint being written): then as soon as the block ends.

    Python swallows an exception raised in a garbage-collection callback or a `__del__` (it
    reports it as "Exception ignored" and goes on), and JAX registers a gc callback that runs
    often while a corpus is read: a Ctrl-C landing there was lost and the run went on. So the
    handler never raises inside one; `poll()` raises it instead.
    """

    def __init__(self) -> None:
        self.count = 0  # Ctrl-Cs so far
        self.step: int | None = None  # the newest step done; None while setting up
        self._at_once = False  # the first Ctrl-C raises in the handler
        self._looping = False  # the loop ends at a step: poll() leaves the first Ctrl-C to it
        self._deferring = False
        self._depth = 0
        self._previous: Any = None

    def __enter__(self) -> CtrlC:
        self._depth += 1
        if self._depth == 1 and threading.current_thread() is threading.main_thread():
            previous = signal.signal(signal.SIGINT, self._handle)
            self._previous = signal.default_int_handler if previous is None else previous
        return self

    def __exit__(self, *exc: Any) -> None:
        self._depth -= 1
        if self._depth == 0 and self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)
            self._previous = None

    @property
    def requested(self) -> bool:
        """Whether Ctrl-C was pressed."""
        return self.count > 0

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if (not self._deferring and (self.count > 1 or self._at_once)
                and not _swallowed_in(frame)):
            raise KeyboardInterrupt

    def poll(self) -> None:
        """Raise KeyboardInterrupt if Ctrl-C was pressed (in the loop: twice)."""
        if self.count > (1 if self._looping else 0) and not self._deferring:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def at_once(self) -> Iterator[None]:
        """Inside the block the first Ctrl-C raises KeyboardInterrupt at once: work with files
        only, which an exception may cut anywhere (they are written aside, then renamed)."""
        self.poll()
        self._at_once = True
        try:
            yield
        finally:
            self._at_once = False
        self.poll()

    def trained(self, step: int) -> None:
        """`step` has run: from now on the first Ctrl-C stops the loop at the end of a step."""
        self.step, self._looping = step, True

    @contextlib.contextmanager
    def deferred(self) -> Iterator[None]:
        """Ctrl-C waits for the block to end (it must not be cut short)."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
        self.poll()


def _swallowed_in(frame: FrameType | None) -> bool:
    """Whether an exception raised in `frame` would be swallowed: it runs (inside) a garbage-
    collection callback or a finalizer (`__del__`)."""
    callbacks = {getattr(cb, "__code__", None) for cb in gc.callbacks}
    while frame is not None:
        if frame.f_code in callbacks or frame.f_code.co_name == "__del__":
            return True
        frame = frame.f_back
    return False
