"""bertjax: BERT in Flax NNX.

Importing `bertjax` (or `bertjax.config`) does not import JAX; the model classes load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from bertjax.config import PRESETS, BertConfig

__all__ = ["PRESETS", "BertConfig", "BertModel", "BertForPreTraining", "BertOutput"]
__version__ = "0.1.0"

_LAZY = {"BertModel": "bertjax.model", "BertForPreTraining": "bertjax.model",
         "BertOutput": "bertjax.model"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'bertjax' has no attribute {name!r}")
