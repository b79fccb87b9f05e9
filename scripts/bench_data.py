"""Data-pipeline benchmark: `python scripts/bench_data.py [options]` = `bertjax bench data`."""

from __future__ import annotations

import sys

from bertjax.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["bench", "data", *sys.argv[1:]]))
