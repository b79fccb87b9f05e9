"""`bertjax data`: tokenise a corpus once into memory-mapped shards (and its NSP pairs)."""

from __future__ import annotations

import argparse

from bertjax.cli.corpus_options import add_corpus_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_corpus_arguments(parser)
    parser.add_argument("--vocab", required=True, metavar="PATH",
                        help="vocab.txt, tokenizer.json or a directory from `bertjax vocab`")
    parser.add_argument("--cased", action="store_true",
                        help="with a bare vocab.txt: do not lower-case (tokenizer.json knows)")
    parser.add_argument("--out", required=True, metavar="DIR", help="shard directory to create")
    parser.add_argument("--force", action="store_true", help="replace an existing --out")
    parser.add_argument("--seq-len", type=int, default=128,
                        help="also make the NSP pairs for this sequence length (0: skip)")
    parser.add_argument("--short-seq-prob", type=float, default=0.1,
                        help="probability of a shorter target length (default: 0.1)")
    parser.add_argument("--dupe-factor", type=int, default=1,
                        help="passes over the corpus with different pairs (default: 1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the pair creation")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from bertjax.data import Shards, WordPieceTokenizer, corpus_documents, write_shards
    from bertjax.data.pairs import load_or_create_pairs

    tokenizer = WordPieceTokenizer.load(args.vocab, lowercase=not args.cased)
    documents = corpus_documents(args.corpus, text_field=args.text_field, split=args.split)
    name = ",".join(args.corpus) + (f":{args.split}" if "shakespeare" in args.corpus else "")
    meta = write_shards(documents, tokenizer, args.out, corpus=name, overwrite=args.force,
                        min_documents=2, progress=not args.no_progress)
    print(f"{args.out}: {meta['documents']:,} documents, {meta['sentences']:,} sentences, "
          f"{meta['tokens']:,} tokens, unknown-token rate {meta['unknown_rate']:.4%} "
          f"({meta['bytes'] / 1e6:.1f} MB in {meta['seconds']:.1f} s, "
          f"{meta['mb_per_s']:.2f} MB/s)")
    if args.seq_len:
        pairs = load_or_create_pairs(Shards(args.out), args.seq_len,
                                     short_seq_prob=args.short_seq_prob,
                                     dupe_factor=args.dupe_factor, seed=args.seed)
        not_next = float(pairs[:, 4].mean()) if len(pairs) else 0.0
        print(f"{len(pairs):,} sentence pairs for seq_len {args.seq_len} "
              f"({not_next:.1%} NotNext)")
    return 0
