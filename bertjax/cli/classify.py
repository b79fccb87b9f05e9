"""`bertjax classify`: label every example of a file with a fine-tuned classifier (and score the
predictions if the file has labels)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, load_model, run_command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    parser.add_argument("--file", required=True,
                        help=".jsonl or .csv (text, optional text_pair and label) or plain text, "
                             "one example per line")
    parser.add_argument("--out", default=None, metavar="FILE",
                        help="also write the predictions as JSON lines")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--max-length", type=int, default=128, help="tokens per example")
    parser.add_argument("--text-field", default="text")
    parser.add_argument("--pair-field", default="text_pair")
    parser.add_argument("--label-field", default="label")


def _classify(args: argparse.Namespace) -> int:
    from bertjax.data.labelled import check_labels, read_examples
    from bertjax.files import write_text_atomic
    from bertjax.model import BertForSequenceClassification
    from bertjax.tasks.classification import label_ids, predict, score

    try:
        examples = read_examples(args.file, text_field=args.text_field, pair_field=args.pair_field,
                                 label_field=args.label_field, require_labels=False)
    except FileNotFoundError as err:
        raise CommandError(str(err)) from err
    model, tokenizer = load_model(args, model_cls=BertForSequenceClassification,
                                  missing_heads="error")
    labels = model.config.id2label
    check_labels(examples, labels, args.file)
    probs = predict(model, tokenizer, examples, batch_size=args.batch_size, max_length=args.max_length)
    records = []
    for example, p in zip(examples, probs, strict=True):
        best = int(p.argmax())
        records.append({"where": example.where, "label": labels[best], "probability": float(p[best])})
        print(f"{labels[best]}\t{p[best]:.4f}\t{example.text[:70]}")
    if args.out:
        write_text_atomic(Path(args.out), "".join(json.dumps(r) + "\n" for r in records))
    labelled = [i for i, e in enumerate(examples) if e.label is not None]
    if labelled:
        s = score(probs[labelled], label_ids([examples[i] for i in labelled], labels))
        print(f"{len(labelled)} labelled examples: accuracy {s.accuracy:.4f}, macro-F1 {s.macro_f1:.4f}")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("classify", _classify, args)
