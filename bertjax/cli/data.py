"""`bertjax data`: tokenise a corpus once into memory-mapped shards (and its NSP pairs).

Everything is checked before anything is written: the option ranges (by the parser), `--out` (new,
empty, or with --force a shard directory: nothing else is ever replaced), the vocabulary and the
corpus. The shards and their pairs are written aside and renamed into place together, so a failure
or Ctrl-C leaves `--out` as it was.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bertjax.cli.argtypes import fraction, non_negative_int, positive_int
from bertjax.cli.corpus_options import add_corpus_arguments
from bertjax.data.corpus import corpus_paths
from bertjax.data.pairs import MIN_SEQ_LEN


def seq_len_or_zero(text: str) -> int:
    """--seq-len: 0 (no pairs) or a length that holds a pair ([CLS] a [SEP] b [SEP])."""
    expected = (f"0 (no pairs) or an integer >= {MIN_SEQ_LEN} (the shortest sequence that holds "
                "[CLS] a [SEP] b [SEP])")
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}") from None
    if value != 0 and value < MIN_SEQ_LEN:
        raise argparse.ArgumentTypeError(f"expected {expected}, got {text!r}")
    return value


seq_len_or_zero.__name__ = "int"  # argparse's metavar and messages


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_corpus_arguments(parser)
    parser.add_argument("--vocab", required=True, metavar="PATH",
                        help="vocab.txt, tokenizer.json or a directory from `bertjax vocab`")
    parser.add_argument("--cased", action="store_true",
                        help="with a bare vocab.txt: do not lower-case (tokenizer.json knows)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="shard directory to create (new or empty)")
    parser.add_argument("--force", action="store_true",
                        help="replace an existing --out that `bertjax data` wrote (never any other "
                             "directory)")
    parser.add_argument("--seq-len", type=seq_len_or_zero, default=128,
                        help=f"also make the NSP pairs for this sequence length, at least "
                             f"{MIN_SEQ_LEN} (0: skip; default: 128)")
    parser.add_argument("--short-seq-prob", type=fraction, default=0.1,
                        help="probability in [0, 1] of a shorter target length (default: 0.1)")
    parser.add_argument("--dupe-factor", type=positive_int, default=1,
                        help="passes over the corpus with different pairs (default: 1)")
    parser.add_argument("--seed", type=non_negative_int, default=0,
                        help="seed of the pair creation (default: 0)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from bertjax.data import Shards, Tokenizer, corpus_documents, write_shards
    from bertjax.data.pairs import load_or_create_pairs
    from bertjax.data.shards import check_shard_output

    check_shard_output(args.out, args.force,
                       inputs={"--corpus": corpus_paths(args.corpus), "--vocab": args.vocab})
    tokenizer = Tokenizer.load(args.vocab, lowercase=not args.cased)
    documents = corpus_documents(args.corpus, text_field=args.text_field, split=args.split)
    name = ",".join(args.corpus) + (f":{args.split}" if "shakespeare" in args.corpus else "")
    made: dict = {}

    def make_pairs(directory: Path) -> None:  # before the shards go into place: both or neither
        made["pairs"] = load_or_create_pairs(Shards(directory), args.seq_len,
                                             short_seq_prob=args.short_seq_prob,
                                             dupe_factor=args.dupe_factor, seed=args.seed,
                                             cache=True)

    meta = write_shards(documents, tokenizer, args.out, corpus=name, overwrite=args.force,
                        min_documents=2, progress=not args.no_progress,
                        then=make_pairs if args.seq_len else None)
    print(f"{args.out}: {meta['documents']:,} documents, {meta['sentences']:,} sentences, "
          f"{meta['tokens']:,} tokens, unknown-token rate {meta['unknown_rate']:.4%} "
          f"({meta['bytes'] / 1e6:.1f} MB in {meta['seconds']:.1f} s, "
          f"{meta['mb_per_s']:.2f} MB/s)")
    if "pairs" in made:
        pairs = made["pairs"]
        not_next = float(pairs[:, 4].mean()) if len(pairs) else 0.0
        print(f"{len(pairs):,} sentence pairs for seq_len {args.seq_len} "
              f"({not_next:.1%} NotNext)")
    return 0
