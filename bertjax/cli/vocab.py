"""`bertjax vocab`: train a WordPiece vocabulary on a corpus (vocab.txt + tokenizer.json)."""

from __future__ import annotations

import argparse

from bertjax.cli.corpus_options import add_corpus_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_corpus_arguments(parser)
    parser.add_argument("--vocab-size", type=int, default=8000, help="tokens in the vocabulary")
    parser.add_argument("--min-frequency", type=int, default=2,
                        help="minimum count of a merged piece (default: 2)")
    parser.add_argument("--cased", action="store_true",
                        help="keep case and accents (default: lower-case, strip accents)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for vocab.txt and tokenizer.json")


def run(args: argparse.Namespace) -> int:
    from bertjax.data import WordPieceTokenizer, corpus_documents

    documents = corpus_documents(args.corpus, text_field=args.text_field, split=args.split)
    tokenizer = WordPieceTokenizer.train(
        (sentence for doc in documents for sentence in doc), args.vocab_size,
        lowercase=not args.cased, min_frequency=args.min_frequency, show_progress=True,
    )
    tokenizer.save(args.out)
    s = tokenizer.special
    print(f"vocabulary of {tokenizer.vocab_size} tokens ({'cased' if args.cased else 'uncased'}) "
          f"written to {args.out}/vocab.txt and tokenizer.json")
    print(f"special tokens: [PAD]={s.pad} [UNK]={s.unk} [CLS]={s.cls} [SEP]={s.sep} "
          f"[MASK]={s.mask}")
    return 0
