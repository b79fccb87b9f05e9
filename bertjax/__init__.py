"""bertjax: BERT in Flax NNX.

    import bertjax
    model, tokenizer = bertjax.from_pretrained("path")  # Hugging Face dir or pretrain run dir
    bertjax.save_pretrained(model, "out/", tokenizer)    # transformers loads it
    model = bertjax.load_hf("path/to/hf-bert")           # config.json + model.safetensors
    bertjax.save_hf(model, "out/")

Importing `bertjax` (or `bertjax.config`) does not import JAX; the rest loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from bertjax.config import PRESETS, BertConfig

# The model classes, by where they live: every `BertFor*` class of Hugging Face transformers.
HEAD_CLASSES = ("BertForPreTraining", "BertForMaskedLM", "BertForNextSentencePrediction",
                "BertForSequenceClassification", "BertForTokenClassification",
                "BertForQuestionAnswering", "BertForMultipleChoice")
__all__ = ["PRESETS", "BertConfig", *HEAD_CLASSES, "BertModel", "BertOutput", "from_pretrained",
           "load_hf", "save_hf", "save_pretrained"]
__version__ = "0.1.0"

_LAZY = {"BertModel": "bertjax.model", "BertOutput": "bertjax.model",
         **{name: "bertjax.heads" for name in HEAD_CLASSES},
         "from_pretrained": "bertjax.pretrained", "save_pretrained": "bertjax.pretrained",
         "load_hf": "bertjax.pretrained", "save_hf": "bertjax.pretrained"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
