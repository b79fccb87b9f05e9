"""The --corpus/--split/--text-field options shared by `vocab`, `data` and `bench data`."""

from __future__ import annotations

import argparse

from bertjax.data.corpus import SPLITS


def add_corpus_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--corpus", nargs="+", default=["shakespeare"], metavar="SPEC",
                        help="'shakespeare' (default), files, directories or globs (quoted) of "
                             "UTF-8 BERT-format text (one sentence per line, blank line between "
                             "documents), JSON lines (.jsonl: one record per line), JSON (.json: "
                             "one document, a list of records or one record; read whole), "
                             "Parquet (.parquet) or Arrow (.arrow; a directory `datasets` saved "
                             "with save_to_disk); text, JSON lines and JSON also compressed "
                             "(.gz, .bz2, .zst, e.g. wiki.jsonl.zst); a directory gives its files "
                             "of these suffixes. Parquet, Arrow and .zst need pip install "
                             "'bertjax[corpora]'")
    parser.add_argument("--split", default="train", choices=SPLITS,
                        help="Shakespeare plays to use: train (default), eval (the held-out plays) "
                             "or all; ignored for other corpora")
    parser.add_argument("--text-field", default="text",
                        help="field of JSON records, or column of Parquet/Arrow rows, holding "
                             "a document's text (default: text)")
