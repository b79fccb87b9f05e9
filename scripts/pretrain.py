#!/usr/bin/env python
"""Thin entry point: `python scripts/pretrain.py [options]` is `bertjax pretrain [options]`."""

import sys

from bertjax.cli.main import main

if __name__ == "__main__":
    sys.exit(main(["pretrain", *sys.argv[1:]]))
