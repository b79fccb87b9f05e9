"""parity: bertjax against its PyTorch mirror, tensor by tensor.

    import parity
    torch_state = parity.flax_to_torch(model)          # bert_torch state dict (strict)
    model = parity.torch_to_flax(torch_state, config)  # and back
    report = parity.compare(model)                     # outputs, attentions, gradients
    print(report.format())  # each tensor judged against the mirror's own float32 noise

Any Flax NNX module beside any PyTorch module (docs/parity-your-model.md):

    parity.load_torch_weights(flax_module, torch_module)        # by dotted name, strict
    report = parity.compare_modules(flax_module, torch_module, (x,))
    print(report.format())  # every submodule's output judged; report.first_divergence names one

Hugging Face checkpoints are a product feature: `bertjax.from_pretrained` / `bertjax.save_pretrained`.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ModuleReport", "ParityReport", "assert_modules_match", "compare", "compare_modules",
           "flax_to_torch", "load_torch_weights", "random_batch", "to_torch_model",
           "to_torch_state_dict", "torch_to_flax", "train_parity"]

_LAZY = {
    "flax_to_torch": "parity.convert", "torch_to_flax": "parity.convert",
    "to_torch_model": "parity.convert", "compare": "parity.tensors",
    "random_batch": "parity.tensors", "ParityReport": "parity.tensors",
    "train_parity": "parity.training",
    "load_torch_weights": "parity.weights", "to_torch_state_dict": "parity.weights",
    "compare_modules": "parity.modules", "assert_modules_match": "parity.modules",
    "ModuleReport": "parity.module_report",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'parity' has no attribute {name!r}")
