"""`bertjax answer`: the answer to a question found in a context (extractive question answering),
as transformers' question-answering pipeline gives it; long contexts are read in windows."""

from __future__ import annotations

import argparse
import json

from bertjax.cli.argtypes import non_negative_int, positive_int
from bertjax.cli.errors import CommandError
from bertjax.cli.model_options import (
    add_max_tokens_argument,
    add_model_argument,
    load_model_with,
    run_command,
)
from bertjax.errors import InputError


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_model_argument(parser)
    add_max_tokens_argument(parser, "context's windows")
    parser.add_argument("--question", required=True, help="the question")
    parser.add_argument("--context", default=None, help="the text that holds the answer")
    parser.add_argument("--context-file", default=None, metavar="FILE",
                        help="read the context from this UTF-8 file instead")
    parser.add_argument("--top-k", type=positive_int, default=1, help="answers to give (default 1)")
    parser.add_argument("--max-answer-len", type=positive_int, default=15,
                        help="longest answer in pieces (default 15)")
    parser.add_argument("--max-seq-len", type=positive_int, default=None,
                        help="pieces per window (default: the model's length, at most 384)")
    parser.add_argument("--doc-stride", type=non_negative_int, default=None,
                        help="pieces two windows share (default: half a window, at most 128)")
    parser.add_argument("--handle-impossible-answer", type=_boolean, default=False,
                        metavar="true|false", help="let \"\" (no answer) compete (default false)")
    parser.add_argument("--align-to-words", type=_boolean, default=True, metavar="true|false",
                        help="widen answers to whole words (default true)")
    parser.add_argument("--json", action="store_true",
                        help="print the pipeline's object: {score, start, end, answer}, a list "
                             "of them when --top-k gives more than one")


def _boolean(text: str) -> bool:
    if text.lower() not in ("true", "false"):
        raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
    return text.lower() == "true"


def _answer(args: argparse.Namespace) -> int:
    from bertjax.common.files import read_text
    from bertjax.use.answer import answer

    if (args.context is None) == (args.context_file is None):
        raise CommandError("give the context: --context TEXT or --context-file FILE (one of them)")
    context = args.context if args.context is not None else read_text(args.context_file,
                                                                       "--context-file")
    if args.context is None and not context.strip():
        raise CommandError(f"--context-file {args.context_file} is empty; give it the text to "
                           "answer from")
    model, tokenizer = load_model_with(args, "qa_outputs", "BertForQuestionAnswering")
    try:
        answers = answer(model, tokenizer, args.question, context, top_k=args.top_k,
                         doc_stride=args.doc_stride, max_answer_len=args.max_answer_len,
                         max_seq_len=args.max_seq_len,
                         handle_impossible_answer=args.handle_impossible_answer,
                         align_to_words=args.align_to_words, max_tokens=args.max_tokens)
    except InputError as err:
        raise CommandError(str(err)) from err
    if args.json:
        print(json.dumps(answers[0] if len(answers) == 1 else answers, ensure_ascii=False))
        return 0
    for a in answers:
        shown = a["answer"] or "(no answer)"
        print(f"{a['score']:.4f}  {shown}  [{a['start']}:{a['end']}]")
    return 0


def run(args: argparse.Namespace) -> int:
    return run_command("answer", _answer, args)
