#!/usr/bin/env python
"""Write tests/fixtures/modernbert_qa_pipeline/answers.json: what transformers' question-answering
pipeline answers with the ModernBERT question-answering fixture of configuration a
(tests/fixtures/modernbert/a/ModernBertForQuestionAnswering), for `bertjax answer` to be
compared against on a byte-level BPE tokenizer.

transformers 5 removed the question-answering pipeline; 4.57, its last release, has it and has
ModernBERT. The fixture was written by transformers 5, whose config.json says `layer_types` and
`rope_parameters`; transformers 4.57 reads `global_attn_every_n_layers`, `global_rope_theta`
and `local_rope_theta` instead, whose defaults are configuration a's (every third layer global
from the first, bases 160000 and 10000), so both load the same model: the script checks that
4.57's start and end logits on the fixture's use.json pair equal transformers 5's. Configuration
b (the first layer local, other bases) cannot be said to 4.57 and is left out. The tokenizer is
built from tokenizer.json (4.57 does not know transformers 5's `TokenizersBackend`), with
model_max_length 64, the model's positions, so that the pipeline's default window is
`bertjax answer`'s.

It runs in a SIDE environment: transformers 4.57 on the project's venv's torch, nothing else
changed (nothing is downloaded from the Hub):

    .venv/bin/pip install --no-deps --target /tmp/tf4lib "transformers==4.57.6" \\
        "tokenizers==0.22.2" "huggingface_hub==0.36.0"
    PYTHONPATH=/tmp/tf4lib HF_HUB_OFFLINE=1 .venv/bin/python \\
        scripts/dev/make_modernbert_qa_pipeline_fixtures.py
    # worked with: python 3.11.7, transformers 4.57.6, tokenizers 0.22.2, torch 2.13.0+cpu

A rerun writes the same file.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

import numpy as np
import tokenizers
import torch
import transformers

ROOT = Path(__file__).resolve().parents[2]
MODEL = ROOT / "tests" / "fixtures" / "modernbert" / "a" / "ModernBertForQuestionAnswering"
OUT = ROOT / "tests" / "fixtures" / "modernbert_qa_pipeline" / "answers.json"
POSITIONS = 64  # configuration a's max_position_embeddings

SCENE = ("Who's there? Nay, answer me: stand, and unfold yourself. Long live the king! Bernardo? "
         "He. You come most carefully upon your hour. 'Tis now struck twelve; get thee to bed, "
         "Francisco. For this relief much thanks: 'tis bitter cold, and I am sick at heart.")
SHORT = "Nay, answer me: stand, and unfold yourself. Long live the king!"

CASES = [
    ("Who is there?", SHORT, {"top_k": 3}),
    ("Who is there?", SHORT, {"align_to_words": False, "top_k": 3}),
    ("Is there an answer?", SHORT, {"handle_impossible_answer": True, "top_k": 2}),
    ("Who is sick at heart?", SCENE, {"top_k": 2}),  # windows of 64 pieces, stride 32
    ("Who says it is bitter cold?", SCENE, {"max_seq_len": 40, "doc_stride": 12,
                                            "max_answer_len": 6, "top_k": 3}),
]


def main() -> None:
    assert transformers.__version__.startswith("4.57"), transformers.__version__
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_file=str(MODEL / "tokenizer.json"), unk_token="[UNK]", cls_token="[CLS]",
        sep_token="[SEP]", pad_token="[PAD]", mask_token="[MASK]", model_max_length=POSITIONS)
    model = transformers.ModernBertForQuestionAnswering.from_pretrained(
        str(MODEL), attn_implementation="eager").eval()
    reference = json.loads((MODEL / "use.json").read_text(encoding="utf-8"))
    pair = tokenizer(reference["question"], reference["context"], return_tensors="pt")
    assert pair["input_ids"][0].tolist() == reference["input_ids"]
    with torch.no_grad():
        out = model(input_ids=pair["input_ids"], attention_mask=pair["attention_mask"])
    for field in ("start_logits", "end_logits"):  # transformers 5's model, read by 4.57
        gap = np.abs(getattr(out, field)[0].numpy() - np.array(reference[field])).max()
        assert gap < 1e-6, (field, gap)
    pipe = transformers.pipeline("question-answering", model=model, tokenizer=tokenizer,
                                 device="cpu")
    cases = []
    for question, context, kwargs in CASES:
        result = pipe(question=question, context=context, **kwargs)
        cases.append({"question": question, "context": context, "kwargs": kwargs,
                      "result": result if isinstance(result, list) else [result]})
    versions = {"python": platform.python_version(), "transformers": transformers.__version__,
                "torch": torch.__version__, "tokenizers": tokenizers.__version__}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"versions": versions, "model": str(MODEL.relative_to(ROOT)),
                               "cases": cases}, indent=1, ensure_ascii=False) + "\n",
                   encoding="utf-8")
    for case in cases:
        print(case["question"], case["kwargs"], "->", case["result"])


if __name__ == "__main__":
    main()
