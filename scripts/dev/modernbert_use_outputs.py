"""transformers 5's answers to the questions the `bertjax` commands ask a ModernBERT, written as
use.json beside each fixture (scripts/dev/make_modernbert_fixtures.py calls `write_use_outputs`).

What each class's use.json holds (every number from transformers' eager float32 model, loaded
back from the fixture directory; inputs are unpadded batches of one unless said):

    ModernBertModel                  embed: lines, their last hidden state mean-pooled over the
                                     attention mask (a padded batch) and at [CLS];
                                     attention: a pair's input_ids and every layer's attention
                                     probabilities (L, A, S, S), local layers' windows included
    ModernBertForSequenceClassification  examples (a text, some with a text_pair): logits, and
                                     pipeline("text-classification")'s best label and score
    ModernBertForTokenClassification pipeline("token-classification") on short texts (its
                                     tokenizer cuts at model_max_length, 21), aggregation none,
                                     simple and first: entity, score, start, end, word
    ModernBertForQuestionAnswering   a question and context as one pair: input_ids, start and
                                     end logits (transformers 5 has no question-answering
                                     pipeline)
    ModernBertForMultipleChoice      a context and choices, padded as one example: logits

Not run by itself: the fixture script's environment and seeds apply.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import transformers
from transformers import PreTrainedTokenizerFast, pipeline

EMBED_LINES = ("Good morrow, Hamlet.", "What light through yonder window breaks?",
               "The king is dead.", "To be, or not to be: that is the question.")
ATTENTION_PAIR = ("To be, or not to be:", "that is the question.")
CLASSIFY = (("The king is dead.", None), ("What light through yonder window breaks?", None),
            ("Who is there?", "Nay, answer me: stand, and unfold yourself."))
TAG_TEXTS = ("Good morrow, Hamlet.", "Hamlet met the ghost")  # each <= 21 pieces
QUESTION = ("Who is there?", "Nay, answer me: stand, and unfold yourself. Long live the king!")
CHOICES = ("The king is dead.", ("Long live the king!", "What light breaks?", "Who is there?"))


def _floats(array) -> list:
    return np.asarray(array, np.float64).tolist()


def _model(directory: Path, head: str):
    cls = getattr(transformers, "ModernBert" + head)
    return cls.from_pretrained(str(directory), attn_implementation="eager").eval()


def _embed(model, tok) -> dict:
    batch = tok(list(EMBED_LINES), padding=True, return_tensors="pt")
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state.double()  # (B, S, H)
    mask = batch["attention_mask"][..., None].double()
    mean = (hidden * mask).sum(1) / mask.sum(1)
    return {"lines": list(EMBED_LINES), "mean": _floats(mean), "cls": _floats(hidden[:, 0])}


def _attention(model, tok) -> dict:
    batch = tok(*ATTENTION_PAIR, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch, output_attentions=True)
    maps = torch.stack([a[0] for a in out.attentions])  # (L, A, S, S)
    return {"text": ATTENTION_PAIR[0], "text_pair": ATTENTION_PAIR[1],
            "input_ids": batch["input_ids"][0].tolist(), "attentions": _floats(maps)}


def _classify(model, tok) -> dict:
    pipe = pipeline("text-classification", model=model, tokenizer=tok, device="cpu")
    examples = []
    for text, pair in CLASSIFY:
        batch = tok(text, pair, return_tensors="pt")
        with torch.no_grad():
            logits = model(**batch).logits[0]
        best = pipe({"text": text, "text_pair": pair} if pair else text)
        best = best[0] if isinstance(best, list) else best
        examples.append({"text": text, "text_pair": pair, "logits": _floats(logits),
                         "label": best["label"], "score": float(best["score"])})
    return {"examples": examples}


def _tag(model, tok) -> dict:
    out = {}
    for aggregation in ("none", "simple", "first"):
        pipe = pipeline("token-classification", model=model, tokenizer=tok, device="cpu",
                        aggregation_strategy=aggregation)
        key = "entity" if aggregation == "none" else "entity_group"
        out[aggregation] = [[{key: e[key], "score": float(e["score"]), "start": int(e["start"]),
                              "end": int(e["end"]), "word": e["word"]} for e in row]
                            for row in pipe(list(TAG_TEXTS))]
    for text in TAG_TEXTS:
        assert len(tok(text)["input_ids"]) <= tok.model_max_length, text
    return {"texts": list(TAG_TEXTS), "pipeline": out}


def _answer(model, tok) -> dict:
    batch = tok(*QUESTION, return_tensors="pt")
    with torch.no_grad():
        out = model(**batch)
    return {"question": QUESTION[0], "context": QUESTION[1],
            "input_ids": batch["input_ids"][0].tolist(),
            "start_logits": _floats(out.start_logits[0]), "end_logits": _floats(out.end_logits[0])}


def _choose(model, tok) -> dict:
    context, choices = CHOICES
    batch = tok([context] * len(choices), list(choices), padding=True, return_tensors="pt")
    with torch.no_grad():
        logits = model(**{k: v[None] for k, v in batch.items()}).logits[0]
    return {"context": context, "choices": list(choices), "logits": _floats(logits)}


def write_use_outputs(directory: Path, head: str) -> None:
    """use.json in the fixture `directory` of class ModernBert<head> (none for the masked LM,
    whose fill_mask.json is the families' script's)."""
    if head == "ForMaskedLM":
        return
    model = _model(directory, head)
    tok = PreTrainedTokenizerFast.from_pretrained(str(directory))
    if head == "Model":
        data = {"embed": _embed(model, tok), "attention": _attention(model, tok)}
    else:
        data = {"ForSequenceClassification": lambda: _classify(model, tok),
                "ForTokenClassification": lambda: _tag(model, tok),
                "ForQuestionAnswering": lambda: _answer(model, tok),
                "ForMultipleChoice": lambda: _choose(model, tok)}[head]()
    text = json.dumps(data, ensure_ascii=False)  # one line: the attention maps are long
    (directory / "use.json").write_text(text + "\n", encoding="utf-8")
    print(f"   use.json {directory.name}: {', '.join(data)}")
