"""What the commands write, checked before any work by one rule (`bertjax.common.files`):

- a file (`embed --out`, `classify --out`, `bench ... --json`) is new, or an existing file that
  `--force` replaces; never one of the command's inputs (its `--file`), even with `--force`, and
  never a directory (a name ending in "/" names one);
- a directory (`attention --out`, `vocab --out`, `data --out`) is new, empty, or - with `--force`
  - one the command wrote and nothing else; a directory holding a user's files is never touched.

Outputs are written aside and renamed into place, so a failure or Ctrl-C leaves the old one.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping

from bertjax.common.files import check_output_file


def add_force_argument(parser: argparse.ArgumentParser, what: str = "--out",
                       kind: str = "file") -> None:
    """`--force`: replace an existing output `what` (a file, or a directory the command wrote)."""
    mine = "" if kind == "file" else " that this command wrote (and nothing else)"
    parser.add_argument("--force", action="store_true",
                        help=f"replace an existing {what} {kind}{mine}; never one of the "
                             "command's inputs")


def check_output_path(path: str | os.PathLike, option: str, *, force: bool = False,
                      inputs: Mapping[str, str | os.PathLike | None] | None = None,
                      example: str = "out.txt") -> None:
    """Refuse, before anything is computed, an output file `path` (given as `option`) that would
    replace an input, an existing file without `force`, a directory, or that cannot be written
    (a parent is a file, a directory is not writable). A missing parent is made when it is
    written."""
    check_output_file(path, what=option, force=force, inputs=inputs, example=example)
