#!/usr/bin/env python
"""Write tests/fixtures/qa_pipeline/: a small BertForQuestionAnswering and what transformers'
`pipeline("question-answering")` answers with it, for `bertjax answer` to be compared against.

transformers 5 removed the question-answering pipeline; 4.57 is its last release. This script runs
in a SIDE environment, never in the project's venv:

    python3 -m venv /tmp/tf4
    /tmp/tf4/bin/pip install "transformers==4.57.*" torch==2.13.0
    # worked with: python 3.11.7, transformers 4.57.6, torch 2.13.0+cpu, tokenizers 0.22.2
    /tmp/tf4/bin/python scripts/make_qa_pipeline_fixtures.py

Input: tests/fixtures/qa_pipeline/vocab.txt (400 WordPiece pieces that bertjax's
`Tokenizer.train` learnt from 400 held-out lines of the plays). Output, beside it:

    model/          config.json + model.safetensors (BertForQuestionAnswering.save_pretrained,
                    seeded random weights, qa_outputs scaled so spans are peaked) and the
                    tokenizer (BertTokenizerFast.save_pretrained, model_max_length 128)
    answers.json    {"versions": {...}, "cases": [{"question", "context", "kwargs", "result"}]}
                    `result` is the pipeline's return value as a list (one dict or several)
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import tokenizers
import torch
import transformers

HERE = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "qa_pipeline"
MAX_POSITIONS = 128

HAMLET = ("Hamlet is the Prince of Denmark, and Horatio is his friend. The King, Claudius, married "
          "Gertrude, the Queen, soon after the old King died.")
SCENE = (
    "Who's there? Nay, answer me: stand, and unfold yourself. Long live the king! Bernardo? He. "
    "You come most carefully upon your hour. 'Tis now struck twelve; get thee to bed, Francisco. "
    "For this relief much thanks: 'tis bitter cold, and I am sick at heart. Have you had quiet "
    "guard? Not a mouse stirring. Well, good night. If you do meet Horatio and Marcellus, the "
    "rivals of my watch, bid them make haste. I think I hear them. Stand, ho! Who's there? "
    "Friends to this ground. And liegemen to the Dane. Give you good night. O, farewell, honest "
    "soldier: who hath relieved you? Bernardo has my place. Give you good night. Holla! "
    "Bernardo! Say, what, is Horatio there? A piece of him. Welcome, Horatio: welcome, good "
    "Marcellus. What, has this thing appeared again to-night? I have seen nothing. Horatio says "
    "'tis but our fantasy, and will not let belief take hold of him touching this dreaded sight, "
    "twice seen of us: therefore I have entreated him along with us to watch the minutes of "
    "this night; that if again this apparition come, he may approve our eyes and speak to it.")
ACCENTS = ("Ophélie walks by the brook near Elsinore; the Queen says «she is drowned» — "
           "LAERTES weeps for his sister Ophélie.")

CASES = [
    ("Who is the Prince of Denmark?", HAMLET, {}),
    ("Who married Gertrude?", HAMLET, {"top_k": 3}),
    ("Who has my place?", SCENE, {"top_k": 2}),  # max_seq_len 128, doc_stride 64: windows
    ("Who says it is bitter cold?", SCENE, {"max_seq_len": 48, "doc_stride": 16,
                                            "max_answer_len": 5, "top_k": 3}),
    ("Is there an answer?", HAMLET, {"handle_impossible_answer": True, "top_k": 2}),
    ("Is there any answer?", "Not a mouse stirring.", {"handle_impossible_answer": True,
                                                     "top_k": 4}),
    ("Who is his friend?", HAMLET, {"align_to_words": False, "top_k": 3}),
    ("Where does Ophélie walk?", ACCENTS, {"top_k": 2}),
    ("What is twice seen?", SCENE, {"max_seq_len": 64, "doc_stride": 24, "max_answer_len": 8}),
]


def _model() -> transformers.BertForQuestionAnswering:
    torch.manual_seed(0)
    config = transformers.BertConfig(
        vocab_size=len((HERE / "vocab.txt").read_text().splitlines()), hidden_size=32,
        num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS, num_labels=2, initializer_range=0.2)
    model = transformers.BertForQuestionAnswering(config).eval()
    with torch.no_grad():
        model.qa_outputs.weight.mul_(4.0)
        for name, p in model.named_parameters():
            if name.endswith("bias") or "LayerNorm" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def main() -> None:
    out = HERE / "model"
    _model().save_pretrained(out)
    tokenizer = transformers.BertTokenizerFast(vocab_file=str(HERE / "vocab.txt"),
                                               model_max_length=MAX_POSITIONS)
    tokenizer.save_pretrained(out)
    pipe = transformers.pipeline("question-answering", model=str(out), tokenizer=str(out),
                                 device="cpu")
    cases = []
    for question, context, kwargs in CASES:
        result = pipe(question=question, context=context, **kwargs)
        cases.append({"question": question, "context": context, "kwargs": kwargs,
                      "result": result if isinstance(result, list) else [result]})
    versions = {"python": platform.python_version(), "transformers": transformers.__version__,
                "torch": torch.__version__, "tokenizers": tokenizers.__version__}
    (HERE / "answers.json").write_text(json.dumps({"versions": versions, "cases": cases},
                                                  indent=1, ensure_ascii=False) + "\n")
    for case in cases:
        print(case["question"], case["kwargs"], "->", case["result"])


if __name__ == "__main__":
    main()
