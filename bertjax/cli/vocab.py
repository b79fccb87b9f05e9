"""`bertjax vocab`: train a WordPiece vocabulary on a corpus (vocab.txt + tokenizer.json).

`--out` is checked before training: a new or empty directory, or with --force one that holds
only a vocabulary (vocab.txt, tokenizer.json); nothing else is ever replaced. The two files are
written aside and renamed into place together.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
from pathlib import Path

from bertjax.cli.argtypes import int_range, non_negative_int
from bertjax.cli.corpus_options import add_corpus_arguments
from bertjax.common.files import atomic_directory, check_output_directory, temporary_name
from bertjax.config import MAX_VOCAB_SIZE
from bertjax.data.corpus import corpus_paths
from bertjax.data.tokenizer import MIN_VOCAB_SIZE, SAVED_FILES

# what `bertjax vocab` writes, and the temporary files of an interrupted write
VOCAB_FILES = (*SAVED_FILES, *map(temporary_name, SAVED_FILES))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_corpus_arguments(parser)
    parser.add_argument("--vocab-size", type=int_range(MIN_VOCAB_SIZE, MAX_VOCAB_SIZE),
                        default=8000,
                        help=f"tokens in the vocabulary, from {MIN_VOCAB_SIZE} to "
                             f"{MAX_VOCAB_SIZE:,}; fewer if the corpus has fewer pieces "
                             "(default: 8000)")
    parser.add_argument("--min-frequency", type=non_negative_int, default=2,
                        help="minimum count of a merged piece (default: 2)")
    parser.add_argument("--cased", action="store_true",
                        help="keep case and accents (default: lower-case, strip accents)")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="directory for vocab.txt and tokenizer.json (new or empty)")
    parser.add_argument("--force", action="store_true",
                        help="replace the vocabulary in an --out that holds nothing else")


def not_vocabulary(path: Path) -> list[str]:
    """The names in `path` that `bertjax vocab` does not write (sorted): replacing a directory
    that holds any would lose something a user made."""
    return sorted(p.name for p in path.iterdir()
                  if not (p.is_file() and any(fnmatch.fnmatchcase(p.name, n) for n in VOCAB_FILES)))


def is_vocab_directory(path: Path) -> bool:
    """Whether `path` holds nothing but what `bertjax vocab` writes."""
    return not not_vocabulary(path)


def run(args: argparse.Namespace) -> int:
    from bertjax.data import Tokenizer, corpus_documents

    check_output_directory(args.out, is_ours=is_vocab_directory, made_by="`bertjax vocab`",
                           replace=args.force, inputs={"--corpus": corpus_paths(args.corpus)},
                           foreign=not_vocabulary)
    documents = corpus_documents(args.corpus, text_field=args.text_field, split=args.split)
    tokenizer = Tokenizer.train(
        (sentence for doc in documents for sentence in doc), args.vocab_size,
        lowercase=not args.cased, min_frequency=args.min_frequency, show_progress=True,
    )
    with atomic_directory(args.out, replace=True) as tmp:  # checked above: new, empty or ours
        tokenizer.save(tmp)
    if tokenizer.vocab_size < args.vocab_size:
        print(f"note: the corpus gave {tokenizer.vocab_size} tokens, fewer than --vocab-size "
              f"{args.vocab_size}: every piece seen at least --min-frequency "
              f"{args.min_frequency} times (a larger corpus gives more)", file=sys.stderr)
    s = tokenizer.special
    print(f"vocabulary of {tokenizer.vocab_size} tokens ({'cased' if args.cased else 'uncased'}) "
          f"written to {args.out}/vocab.txt and tokenizer.json")
    print(f"special tokens: [PAD]={s.pad} [UNK]={s.unk} [CLS]={s.cls} [SEP]={s.sep} "
          f"[MASK]={s.mask}")
    return 0
