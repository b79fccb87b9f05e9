"""`bertjax embed`: sentence embeddings of the lines of a file, written as an (N, H) .npy.

Row i of the .npy is line i of the file. Pooling, normalisation and the maximum length default to
what the model's sentence-transformers files ask for (modules.json, 1_Pooling/config.json,
sentence_bert_config.json), so that e.g. all-MiniLM-L6-v2 gives `SentenceTransformer.encode`'s
vectors; without those files: mean pooling, no normalisation, the model's positions.
`bertjax similarity` shares this module's options and loading.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from bertjax.cli.argtypes import positive_int
from bertjax.cli.errors import CommandError, writing
from bertjax.cli.model_options import (
    add_batch_size_argument,
    add_max_tokens_argument,
    add_model_argument,
    batch_size_of,
    run_command,
)
from bertjax.cli.outputs import add_force_argument, check_output_path, model_input

EPILOG = """\
example:
  bertjax embed path/to/all-MiniLM-L6-v2 --file lines.txt --out vectors.npy --query "a storm at sea"

exit status: 0 done, 2 bad input (missing or empty file, blank line, not a model directory, an
--out that exists (pass --force to replace it) or is the --file).
"""


def add_embedding_arguments(parser: argparse.ArgumentParser) -> None:
    """MODEL, --file and the embedding options, shared by `embed` and `similarity`."""
    add_model_argument(parser)
    parser.add_argument("--file", metavar="FILE", required=True,
                        help="UTF-8 text, one sentence (or passage) per line; no blank lines")
    parser.add_argument("--pooling", choices=("mean", "cls"), default=None,
                        help="mean: attention-masked mean of the last hidden state; cls: its [CLS] "
                             "vector (default: the model's sentence-transformers setting, else mean)")
    parser.add_argument("--normalize", action=argparse.BooleanOptionalAction, default=None,
                        help="L2-normalise the vectors (default: the model's sentence-transformers "
                             "setting, else no)")
    add_batch_size_argument(parser, "lines")
    parser.add_argument("--max-length", type=positive_int, default=None, metavar="TOKENS",
                        help="cut longer lines, with a warning (default: the model's "
                             "sentence-transformers max_seq_length, else its positions)")
    parser.add_argument("--top-k", type=positive_int, default=5, metavar="K",
                        help="how many nearest lines to print (default: 5)")
    add_max_tokens_argument(parser, "lines")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_embedding_arguments(parser)
    parser.add_argument("--out", metavar="FILE.npy", required=True,
                        help="where to write the (N, H) float32 vectors (a new file)")
    add_force_argument(parser)
    parser.add_argument("--query", metavar="TEXT", default=None,
                        help="also print the lines nearest to this text")


def file_line_names(path: str, count: int) -> list[str]:
    """How messages name the lines of --file: FILE:1, FILE:2, ..."""
    return [f"{path}:{n}" for n in range(1, count + 1)]


def load_encoder(args: argparse.Namespace) -> tuple[Any, Any]:
    """(BertModel, tokenizer) of MODEL: no heads are needed (nor loaded) for embeddings."""
    from bertjax.cli.model_options import load_model
    from bertjax.model import BertModel

    return load_model(args, model_cls=BertModel)


def embedding_settings(args: argparse.Namespace, model: Any) -> dict[str, Any]:
    """`embed` keywords: the command line first, then the model's sentence-transformers files."""
    from bertjax.use.embed import sentence_transformers_settings
    from bertjax.use.encode import check_max_length, model_max_length

    found = sentence_transformers_settings(args.model) if Path(args.model).is_dir() else {}
    if args.pooling is None and "unsupported_pooling" in found:
        print(f"note: the model's sentence-transformers configuration pools by "
              f"{found['unsupported_pooling']}, which bertjax does not do; using mean pooling "
              "(choose with --pooling)", file=sys.stderr)
    limit = model_max_length(model)
    max_length = args.max_length or min(found.get("max_length", limit), limit)
    check_max_length(max_length, limit, "--max-length")
    if max_length < 3:
        raise CommandError(f"--max-length {max_length} leaves no room for text ([CLS] and [SEP] "
                           "take 2 tokens); pass --max-length 3 or more")
    return {
        "pooling": args.pooling or found.get("pooling", "mean"),
        "normalize": bool(found.get("normalize", False) if args.normalize is None else args.normalize),
        "batch_size": batch_size_of(args),
        "max_length": max_length,
        "max_tokens": args.max_tokens,
        "progress": not args.no_progress and sys.stderr.isatty(),
        "option": "--max-length",
    }


def describe_settings(settings: dict[str, Any]) -> str:
    """The settings in words: mean pooling, normalized, at most 256 tokens, batches of 64 (or
    packed batches of 4096 token slots)."""
    normalized = "normalized" if settings["normalize"] else "not normalized"
    batches = (f"batches of {settings['batch_size']}" if settings.get("max_tokens") is None
               else f"packed batches of {settings['max_tokens']} token slots")
    return (f"{settings['pooling']} pooling, {normalized}, at most {settings['max_length']} tokens, "
            f"{batches}")


def print_nearest(lines: list[str], vectors: np.ndarray, query_vector: np.ndarray, query: str,
                  k: int) -> None:
    from bertjax.use.embed import nearest

    print(f"nearest lines to {_clip(query)!r} (cosine similarity):")
    width = len(str(len(lines)))
    for rank, (i, score) in enumerate(nearest(vectors, query_vector, k), start=1):
        print(f"  {rank:>2}. {score:+.4f}  line {i + 1:>{width}}: {_clip(lines[i])}")


def _clip(text: str, width: int = 100) -> str:
    return text if len(text) <= width else text[:width - 3] + "..."


def _embed(args: argparse.Namespace) -> int:
    from bertjax.common.files import write_npy_atomic
    from bertjax.use.embed import embed, read_lines

    check_output_path(args.out, "--out", force=args.force, example="vectors.npy",
                      inputs={"MODEL": model_input(args.model), "--file": args.file})
    if args.query is not None and not args.query.strip():
        raise CommandError("--query is empty; pass the text to search for")
    lines = read_lines(args.file, "--file")
    model, tokenizer = load_encoder(args)
    settings = embedding_settings(args, model)
    start = time.perf_counter()
    vectors = embed(model, tokenizer, lines, names=file_line_names(args.file, len(lines)),
                    **settings)
    seconds = time.perf_counter() - start
    with writing("--out", args.out):
        write_npy_atomic(args.out, vectors)
    print(f"embedded {len(lines)} lines ({describe_settings(settings)})")
    print(f"wrote {args.out}: {vectors.shape[0]} x {vectors.shape[1]} float32 in {seconds:.2f} s, "
          f"{len(lines) / seconds:.1f} sentences/s (compilation included)")
    if args.query is not None:
        query_vector = embed(model, tokenizer, [args.query], names=["--query"],
                             **{**settings, "progress": False})[0]
        print_nearest(lines, vectors, query_vector, args.query, args.top_k)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("embed", _embed, args)
