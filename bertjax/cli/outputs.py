"""What the commands write, checked before any work by one rule (`bertjax.common.files`,
`bertjax.common.input_overlap`):

- no output is, lies inside or holds one of the command's inputs - MODEL (a model or run
  directory and every file in it; a Hub id's cache folder), `--file`, a corpus, a vocabulary -
  however the path is spelt (`..`, symbolic links, hard links, a trailing "/"), with or without
  `--force`;
- a file (`embed --out`, `classify --out`, `bench ... --json`) is new, or an existing file that
  `--force` replaces; never a directory (a name ending in "/" names one);
- a directory (`attention --out`, `convert OUT_DIR`, `vocab --out`, `data --out`, `finetune
  --output-dir`) is new, empty, or - with `--force` - one the command wrote and nothing else; a
  directory holding a user's files is never touched.

Outputs are written aside and renamed into place, so a failure or Ctrl-C leaves the old one.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from bertjax.common.files import check_output_file
from bertjax.common.input_overlap import Inputs


def add_force_argument(parser: argparse.ArgumentParser, what: str = "--out",
                       kind: str = "file") -> None:
    """`--force`: replace an existing output `what` (a file, or a directory the command wrote)."""
    mine = "" if kind == "file" else " that this command wrote (and nothing else)"
    parser.add_argument("--force", action="store_true",
                        help=f"replace an existing {what} {kind}{mine}; never one of the "
                             "command's inputs")


def check_output_path(path: str | os.PathLike, option: str, *, force: bool = False,
                      inputs: Inputs | None = None, example: str = "out.txt") -> None:
    """Refuse, before anything is computed, an output file `path` (given as `option`) that would
    replace, lie in or hold an input, an existing file without `force`, a directory, or that
    cannot be written (a parent is a file, a directory is not writable). A missing parent is
    made when it is written."""
    check_output_file(path, what=option, force=force, inputs=inputs, example=example)


def model_input(model: str | None) -> Path | None:
    """Where a MODEL argument (a directory, a run or a Hub id) lies, found without the network
    (`bertjax.io.source.local_place`); None when not given."""
    if model is None:
        return None
    from bertjax.io.source import local_place  # no framework import

    return local_place(model)
