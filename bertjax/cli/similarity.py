"""`bertjax similarity`: the lines of a file nearest to a query, by cosine similarity of their
sentence embeddings (the options and defaults of `bertjax embed`, without writing vectors)."""

from __future__ import annotations

import argparse

from bertjax.cli.embed import (
    add_embedding_arguments,
    describe_settings,
    embedding_settings,
    file_line_names,
    load_encoder,
    print_nearest,
)
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import run_command

EPILOG = """\
example:
  bertjax similarity path/to/all-MiniLM-L6-v2 --file lines.txt --query "a storm at sea" --top-k 5

--normalize does not change cosine similarities; it is accepted so that both commands take the
same options. exit status: 0 done, 2 bad input (missing or empty file, blank line, not a model).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_embedding_arguments(parser)
    parser.add_argument("--query", metavar="TEXT", required=True, help="the text to search for")


def _similarity(args: argparse.Namespace) -> int:
    from bertjax.use.embed import embed, read_lines

    if not args.query.strip():
        raise CommandError("--query is empty; pass the text to search for")
    lines = read_lines(args.file, "--file")
    model, tokenizer = load_encoder(args)
    settings = embedding_settings(args, model)
    vectors = embed(model, tokenizer, lines, names=file_line_names(args.file, len(lines)),
                    **settings)
    query_vector = embed(model, tokenizer, [args.query], names=["--query"],
                         **{**settings, "progress": False})[0]
    print(f"{len(lines)} lines ({describe_settings(settings)})")
    print_nearest(lines, vectors, query_vector, args.query, args.top_k)
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("similarity", _similarity, args)
