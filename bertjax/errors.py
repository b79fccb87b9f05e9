"""The error bertjax raises for a user's mistake, as opposed to a bug.

`InputError` is a `ValueError`: a wrong argument, a missing or damaged file, an option out of
range, a model without the head a task needs. Its message names the problem and the fix. The
command line prints it as one line (`bertjax COMMAND: error: ...`) with exit status 2; any other
exception is a bug in bertjax or a dependency and keeps its traceback (exit status 1).

No framework import: every layer, `bertjax.data` included, may raise it.
"""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """A user's mistake (bad argument, file or option); the message says what to do instead."""
