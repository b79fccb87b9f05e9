"""bertjax: BERT in Flax NNX.

    import bertjax
    model = bertjax.load_hf("path/to/hf-bert")      # config.json + model.safetensors
    bertjax.save_hf(model, "out/")                   # loads in transformers.BertForPreTraining

Importing `bertjax` (or `bertjax.config`) does not import JAX; the rest loads on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from bertjax.config import PRESETS, BertConfig

__all__ = ["PRESETS", "BertConfig", "BertForPreTraining", "BertModel", "BertOutput", "load_hf",
           "save_hf"]
__version__ = "0.1.0"

_LAZY = {"BertModel": "bertjax.model", "BertForPreTraining": "bertjax.model",
         "BertOutput": "bertjax.model", "load_hf": "bertjax.hf", "save_hf": "bertjax.hf"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
