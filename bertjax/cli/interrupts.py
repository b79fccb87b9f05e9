"""Ctrl-C for a job at the command line: the one SIGINT handler bertjax installs.

Why a thread: Python runs a signal handler only in the main thread and only between bytecodes,
and a job's main thread spends seconds to minutes where none run: inside XLA's compiler (the
first step) or importing a C extension, where a KeyboardInterrupt can also crash the interpreter
on its way out. So for a job's command SIGINT is blocked first thing (`ctrl_c_blocked`, before
any import: threads inherit the mask when they start, native ones such as `tokenizers'` too, and
a thread that does not block it would hand it to Python's handler in the main thread), and while
the job runs one daemon thread waits for it (`signal.sigwait`). For each Ctrl-C it asks the
job's `StopRequest` what to do (`bertjax.jobs.stop`): end the process at once with the job's
one-line message (exit status 130) where nothing is left to save, or leave the request for the
job to honour at its next safe point.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Iterator

from bertjax.cli.errors import EXIT_INTERRUPTED
from bertjax.jobs.stop import StopRequest


@contextlib.contextmanager
def ctrl_c_blocked() -> Iterator[None]:
    """SIGINT blocked in this thread and every thread started inside the block; the mask comes
    back after (a Ctrl-C still pending then is Python's KeyboardInterrupt)."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: Python's own KeyboardInterrupt
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


@contextlib.contextmanager
def ctrl_c_stops(stop: StopRequest, command: str) -> Iterator[StopRequest]:
    """While the block runs, each Ctrl-C goes to `stop.press()` (see the module docstring); the
    signal mask and the previous behaviour come back when it ends."""
    if not hasattr(signal, "pthread_sigmask"):  # not POSIX: Python's own KeyboardInterrupt
        yield stop
        return
    done = threading.Event()
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    watcher = threading.Thread(target=_watch, args=(stop, command, done), daemon=True,
                               name="bertjax-ctrl-c")
    watcher.start()
    try:
        yield stop
    finally:
        done.set()
        assert watcher.ident is not None  # started above
        signal.pthread_kill(watcher.ident, signal.SIGINT)  # wakes it from sigwait: it returns
        watcher.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _watch(stop: StopRequest, command: str, done: threading.Event) -> None:
    while True:
        signal.sigwait({signal.SIGINT})
        if done.is_set():
            return
        try:
            message = stop.press()
        except Exception as err:  # noqa: BLE001 - the job's message failed: still end at once
            message = f"interrupted (Ctrl-C) ({type(err).__name__}: {err})"
        if message is not None:
            print(f"bertjax {command}: {message}", file=sys.stderr, flush=True)
            sys.stdout.flush()
            os._exit(EXIT_INTERRUPTED)  # the main thread may be inside XLA: no shutdown
