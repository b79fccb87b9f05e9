"""The --corpus/--split/--text-field options shared by `vocab`, `data` and `bench data`."""

from __future__ import annotations

import argparse

from bertjax.data.corpus import CORPUS_HELP, SPLITS


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", nargs="+", default=["shakespeare"], metavar="SPEC",
                        help=CORPUS_HELP)
    parser.add_argument("--split", default="train", choices=SPLITS,
                        help="Shakespeare plays to use: train (default), eval (the held-out plays) "
                             "or all; ignored for other corpora")
    parser.add_argument("--text-field", default="text",
                        help="field of JSON records, or column of Parquet/Arrow rows, holding "
                             "a document's text (default: text)")
