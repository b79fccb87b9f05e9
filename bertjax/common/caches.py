"""Where bertjax's caches live (XLA's compiled programs, pre-training's prepared data).

Imports nothing but the standard library: the command line asks before it blocks Ctrl-C for its
watcher thread, and a library that starts threads (NumPy's BLAS) must not be imported by then.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

OFF = ("0", "off", "false", "no")


def user_cache_directory(variable: str, name: str,
                         environ: Mapping[str, str] = os.environ) -> Path | None:
    """$`variable` where set (None where it says 0, off, false or no), else
    $XDG_CACHE_HOME/bertjax/`name`, else ~/.cache/bertjax/`name`."""
    chosen = environ.get(variable, "")
    if chosen.lower() in OFF:
        return None
    if chosen:
        return Path(chosen).expanduser()
    return Path(environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "bertjax" / name
