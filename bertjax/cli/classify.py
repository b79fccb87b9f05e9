"""`bertjax classify`: label every example of a file with a fine-tuned classifier (and score the
predictions if the file has labels)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from bertjax.cli.argtypes import int_range
from bertjax.cli.errors import CommandError, writing
from bertjax.cli.model_options import (
    add_batch_size_argument,
    add_max_tokens_argument,
    add_model_argument,
    batch_size_of,
    load_model,
    run_command,
)
from bertjax.cli.outputs import add_force_argument, check_output_path, model_input

DEFAULT_LABEL_FIELD = "label"
DEFAULT_MAX_LENGTH = 128


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_max_tokens_argument(parser, "examples")
    parser.add_argument("--file", required=True,
                        help=".jsonl or .csv (text, optional text_pair and label) or plain text, "
                             "one example per line")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="also write the predictions as JSON lines (a new file)")
    add_force_argument(parser)
    add_batch_size_argument(parser, "examples")
    parser.add_argument("--max-length", type=int_range(3), default=None, metavar="TOKENS",
                        help="tokens per example, longer ones are cut; at most the model's "
                             f"positions (default: {DEFAULT_MAX_LENGTH}, or the model's positions "
                             "if fewer)")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--pair-field", default="text_pair")
    parser.add_argument("--label-field", default=None,
                        help="score the predictions against this field (default: "
                             f"'{DEFAULT_LABEL_FIELD}', if the file has it)")


def _read(args: argparse.Namespace) -> list:
    """The examples of --file; labelled in every record or in none (then said, or refused if
    --label-field asked for them)."""
    from bertjax.data.labelled import read_examples

    field = args.label_field or DEFAULT_LABEL_FIELD
    examples = read_examples(args.file, text_field=args.text_field, pair_field=args.pair_field,
                             label_field=field, require_labels=False, what="--file")
    if any(e.label is not None for e in examples):
        return examples
    if args.label_field is not None:
        raise CommandError(f"--label-field '{field}': no record of --file {args.file} has a label "
                           "there; name the field that holds the labels, or leave the option out")
    if Path(args.file).suffix.lower() in (".jsonl", ".json", ".csv"):
        print(f"note: --file {args.file} has no '{field}' field: the predictions are not scored "
              "(set --label-field to score them)", file=sys.stderr)
    return examples


def _classify(args: argparse.Namespace) -> int:
    from bertjax.common.files import write_text_atomic
    from bertjax.data.labelled import check_labels
    from bertjax.heads import BertForSequenceClassification
    from bertjax.tasks.classification import label_ids, predict, score
    from bertjax.use.encode import check_max_length

    if args.out:
        check_output_path(args.out, "--out", force=args.force, example="predictions.jsonl",
                          inputs={"MODEL": model_input(args.model), "--file": args.file})
    examples = _read(args)
    model, tokenizer = load_model(args, model_cls=BertForSequenceClassification,
                                  missing_heads="error")
    limit = model.config.max_sequence_length
    max_length = args.max_length or min(DEFAULT_MAX_LENGTH, limit)
    check_max_length(max_length, limit, "--max-length")
    labels = model.config.id2label
    check_labels(examples, labels, f"--file {args.file}")
    probs = predict(model, tokenizer, examples, batch_size=batch_size_of(args),
                    max_tokens=args.max_tokens,
                    max_length=max_length, option="--max-length")
    records = []
    for example, p in zip(examples, probs, strict=True):
        best = int(p.argmax())
        records.append({"where": example.where, "label": labels[best], "probability": float(p[best])})
        print(f"{labels[best]}\t{p[best]:.4f}\t{example.text[:70]}")
    if args.out:
        with writing("--out", args.out):
            write_text_atomic(Path(args.out), "".join(json.dumps(r) + "\n" for r in records))
    labelled = [i for i, e in enumerate(examples) if e.label is not None]
    if labelled:
        s = score(probs[labelled], label_ids([examples[i] for i in labelled], labels))
        print(f"{len(labelled)} labelled examples: accuracy {s.accuracy:.4f}, macro-F1 {s.macro_f1:.4f}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("classify", _classify, args)
