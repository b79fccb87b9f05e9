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

from typing import TYPE_CHECKING

from bertjax.common.lazy import lazy_imports

if TYPE_CHECKING:  # the flat names, each imported on first use (`lazy_imports`)
    from parity.convert import flax_to_torch, to_torch_model, torch_to_flax
    from parity.module_report import ModuleReport
    from parity.modules import assert_modules_match, compare_modules
    from parity.tensors import ParityReport, compare, random_batch
    from parity.training import train_parity
    from parity.weights import load_torch_weights, to_torch_state_dict

__getattr__, __dir__, __all__ = lazy_imports(__name__, __file__)
