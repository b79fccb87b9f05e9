"""`bertjax tag`: the named entities (token classification) of each text, as transformers'
token-classification pipeline finds them; long texts are cut to the model's positions."""

from __future__ import annotations

import argparse
import json
from typing import Any

from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import (
    add_max_tokens_argument,
    add_model_argument,
    load_model_with,
    run_command,
)
from bertjax.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from bertjax.use.tag import AGGREGATIONS

    add_model_argument(parser)
    add_max_tokens_argument(parser, "texts")
    parser.add_argument("texts", nargs="*", metavar="TEXT",
                        help='e.g. "Romeo met Juliet in Verona"')
    parser.add_argument("--aggregation", choices=AGGREGATIONS, default="simple",
                        help="the pipeline's aggregation_strategy: simple joins adjacent tokens "
                             "of one entity; none lists every token; first, average and max give "
                             "each word one label first (default simple)")
    parser.add_argument("--json", action="store_true",
                        help="print a JSON list with one list of entities per TEXT, the "
                             "pipeline's objects ({entity_group, score, word, start, end}; "
                             "with --aggregation none {entity, score, index, word, start, end})")


def _tag(args: argparse.Namespace) -> int:
    from bertjax.use.tag import tag

    if not args.texts:
        raise CommandError('give at least one TEXT to tag, e.g. "Romeo met Juliet in Verona"')
    names = [f"text {i + 1}" for i in range(len(args.texts))]
    for name, text in zip(names, args.texts, strict=True):
        if not text.strip():
            raise CommandError(f"{name} is empty; give a text with words to tag")
    model, tokenizer = load_model_with(args, "token_classifier", "BertForTokenClassification")
    try:
        results = tag(model, tokenizer, args.texts, aggregation=args.aggregation, names=names,
                      max_tokens=args.max_tokens)
    except InputError as err:
        raise CommandError(str(err)) from err
    if args.json:
        print(json.dumps(results, ensure_ascii=False))
        return 0
    for name, text, entities in zip(names, args.texts, results, strict=True):
        print(f"{name}: {text}")
        for line in _table(entities):
            print(f"  {line}")
    return 0


def _table(entities: list[dict[str, Any]]) -> list[str]:
    """Aligned rows: label, score, [start:end], (token index,) word."""
    if not entities:
        return ["(no entities)"]
    label_key = "entity" if "index" in entities[0] else "entity_group"
    width = max(len(e[label_key]) for e in entities)
    rows = []
    for e in entities:
        where = f"[{e['start']}:{e['end']}]"
        index = f"  token {e['index']:<3}" if "index" in e else ""
        rows.append(f"{e[label_key]:<{width}}  {e['score']:.4f}  {where:<11}{index}  {e['word']}")
    return rows


def run(args: argparse.Namespace) -> int:
    return run_command("tag", _tag, args)
