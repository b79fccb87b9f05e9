"""Ctrl-C during a training job: stop at the end of a step with a checkpoint, not mid-write.

No framework import: the command line installs the handler before it imports JAX.
"""

from __future__ import annotations

import contextlib
import gc
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")


class PretrainInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a run: the message says what was saved and how to resume. `abandoned`:
    work was left running in a thread (`abandonable`), so the process must end with `exit_now`."""

    def __init__(self, message: str = "", *, abandoned: bool = False):
        super().__init__(message)
        self.abandoned = abandoned


class Abandoned(KeyboardInterrupt):
    """Ctrl-C before or while `abandonable` work ran: it may still run in its daemon thread."""


class CtrlC:
    """SIGINT while a job runs. `with ctrl_c:` installs the handler (in the main thread; nested
    `with` blocks share it) and puts the previous one back when the outermost block ends.

    The first Ctrl-C sets `requested`. Where the job only reads and writes files (`at_once()`:
    reading the corpus, making the vocabulary and shards) it also raises KeyboardInterrupt at
    once. Elsewhere in the set-up (imports, JAX, Orbax) `poll()` raises it at the next stage:
    a KeyboardInterrupt raised inside XLA's compilation or a C extension's import can crash the
    interpreter as it exits; the first step's compilation runs in a thread (`abandonable`) that
    Ctrl-C abandons at once. Once a step has run (`trained`), the loop stops at the end of the
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


POLL_S = 0.05  # how often the main thread looks up from waiting for abandonable work


def abandonable(ctrl_c: CtrlC, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """`fn(*args, **kwargs)`, run in a daemon thread while this (main) thread waits for it or
    for Ctrl-C.

    For work that Ctrl-C cannot interrupt safely while there is nothing to save yet: the first
    training step, whose XLA compilation takes seconds to minutes (a KeyboardInterrupt raised
    inside it can crash the interpreter), and the imports before it. Ctrl-C before or during the
    call raises Abandoned at once: the thread is left to run, and the process must end with
    `exit_now` (an interpreter shutting down while a thread is inside XLA can crash). `fn` must
    leave files whole wherever it stops (written aside, then renamed). An exception of `fn` is
    raised here."""
    if ctrl_c.requested:
        raise Abandoned
    result: list[T] = []
    error: list[BaseException] = []

    def call() -> None:
        try:
            result.append(fn(*args, **kwargs))
        except BaseException as err:  # noqa: BLE001 - raised in the waiting thread
            error.append(err)

    worker = threading.Thread(target=call, name="bertjax-abandonable", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            worker.join(POLL_S)
            if ctrl_c.requested and worker.is_alive():
                raise Abandoned
    except KeyboardInterrupt:  # a second Ctrl-C, raised by the handler while waiting
        if worker.is_alive():
            raise Abandoned from None
        raise
    if error:
        raise error[0]
    return result[0]


def exit_now(status: int) -> None:
    """End the process with `status` at once, after flushing what was printed: no interpreter
    shutdown, which abandoned work in a thread (`abandonable`) could crash."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(status)
