"""Host-to-device prefetch: the next batches are made and put on the devices by a background
thread while the current step runs, so the training loop never waits on its input."""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

from bertjax.errors import InputError

_END = object()


class Prefetch:
    """Iterate `place(item)` for the items of `source`, made up to `size` items ahead in a
    background thread. An exception in the thread is raised by the `next` that would have
    returned its item; `close` (or leaving a `with` block) stops the thread."""

    def __init__(self, source: Iterator[Any], place: Callable[[Any], Any], size: int = 2):
        if size < 1:
            raise InputError(f"prefetch size must be at least 1, got {size}")
        self._queue: queue.Queue = queue.Queue(maxsize=size)
        self._stop = threading.Event()
        self._finished: BaseException | None = None  # set once the end or an error was handed out
        self._thread = threading.Thread(target=self._fill, args=(source, place), daemon=True,
                                        name="bertjax-prefetch")
        self._thread.start()

    def _fill(self, source: Iterator[Any], place: Callable[[Any], Any]) -> None:
        try:
            for item in source:
                if not self._put(("item", place(item))):
                    return
            self._put(("end", _END))
        except BaseException as err:  # noqa: BLE001 - handed to the consumer, raised there
            self._put(("error", err))

    def _put(self, entry: tuple[str, Any]) -> bool:
        while not self._stop.is_set():
            try:
                self._queue.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def __iter__(self) -> Prefetch:
        return self

    def __next__(self) -> Any:
        if self._finished is not None:  # the thread is gone: nothing more will come
            raise self._finished
        kind, value = self._queue.get()
        if kind == "error":
            self._finished = StopIteration()
            raise value
        if kind == "end":
            self._finished = StopIteration()
            raise StopIteration
        return value

    def close(self) -> None:
        self._stop.set()
        while self._thread.is_alive():
            try:
                self._queue.get(timeout=0.1)  # unblock a producer waiting on a full queue
            except queue.Empty:
                pass
            self._thread.join(timeout=0.1)

    def __enter__(self) -> Prefetch:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
