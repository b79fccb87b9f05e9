"""XLA's programs kept between commands: JAX's persistent compilation cache in the user's cache
directory, so a command run again (`bertjax fill-mask RUN "..."`, a resumed `pretrain`) loads
its compiled steps instead of compiling them anew.

Set at the command line's edge, before JAX is imported, through JAX's own settings (environment
variables it reads at import):

    where        $BERTJAX_COMPILE_CACHE, else $XDG_CACHE_HOME/bertjax/xla, else ~/.cache/bertjax/xla
    off          `--no-compile-cache` (anywhere on the command line), or BERTJAX_COMPILE_CACHE=0
    JAX's own    a JAX_COMPILATION_CACHE_DIR already set wins (empty: no cache)

Every program is kept (no minimum compile time), and the directory is held to `MAX_BYTES` by
JAX's least-recently-used eviction, whose file lock also makes two commands sharing the cache
safe. An entry JAX cannot read (cut short, from another version) is compiled again: JAX's warning
about it is not shown. A directory that cannot be written (read-only) is one warning, and the
cache stays off: JAX would warn once per program it compiles.
"""

from __future__ import annotations

import os
import sys
import tempfile
import warnings
from collections.abc import Mapping
from pathlib import Path

from bertjax.common.caches import user_cache_directory

FLAG = "--no-compile-cache"
ENV = "BERTJAX_COMPILE_CACHE"
MAX_BYTES = 2 * 1024**3  # the cache's size limit (least recently used entries go first)
JAX_DIR = "JAX_COMPILATION_CACHE_DIR"


def cache_directory(environ: Mapping[str, str] = os.environ) -> Path | None:
    """Where the cache is (None: turned off by `ENV`)."""
    return user_cache_directory(ENV, "xla", environ)


def use_compile_cache(argv: list[str]) -> list[str]:
    """Turn the cache on for this process (unless `FLAG` is in `argv`, `ENV` says off, or JAX's
    own directory is set); `argv` without `FLAG`. A directory that cannot be made leaves the
    cache off: it only saves time."""
    rest = [a for a in argv if a != FLAG]
    if len(rest) != len(argv) or JAX_DIR in os.environ:
        return rest
    directory = cache_directory()
    if directory is None:
        return rest
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError:
        return rest
    try:  # JAX writes a lock file beside the entries
        handle, probe = tempfile.mkstemp(prefix=".bertjax-write-check-", dir=directory)
        os.close(handle)
        os.unlink(probe)
    except OSError as err:
        command = next((a for a in rest if not a.startswith("-")), "")
        print(f"bertjax {command}: warning: the compilation cache {directory} cannot be written "
              f"({(err.strerror or str(err)).lower()}): this command compiles its programs "
              f"anew and keeps none; make it writable, or point {ENV} at another directory "
              f"(0 turns the cache off)", file=sys.stderr)
        return rest
    os.environ[JAX_DIR] = str(directory)
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # a command's small programs
    os.environ["JAX_COMPILATION_CACHE_MAX_SIZE"] = str(MAX_BYTES)
    warnings.filterwarnings("ignore", message="Error reading persistent compilation cache entry")
    # one that fails later (a full disk) is left out too: the cache only saves time
    warnings.filterwarnings("ignore", message="Error writing persistent compilation cache entry")
    return rest
