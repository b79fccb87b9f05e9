"""Weights between bertjax (Flax NNX) and bert_torch (PyTorch), strictly, in both directions.

The name table and the checks live in `bertjax.io.weights` (Hugging Face I/O uses them too); this
module adds the PyTorch side: tensors and a ready `bert_torch` model.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bertjax.config import BertConfig
from bertjax.config.heads import Model
from bertjax.heads import BertForPreTraining
from bertjax.io.weights import model_from_numpy, model_to_numpy


def flax_to_torch(model: Any) -> dict[str, Any]:
    """A bertjax model -> the state dict of its `bert_torch` mirror (strict)."""
    import torch  # optional: torch_to_flax takes numpy arrays and runs without it

    # copied only where torch cannot take the array as it is: read-only views of the model's
    # own buffers (torch would share and could write them) or non-contiguous ones; a transposed
    # kernel is a fresh array already
    return {k: torch.from_numpy(v if v.flags.writeable and v.flags.c_contiguous else v.copy())
            for k, v in model_to_numpy(model).items()}


def torch_to_flax(
    state_dict: Mapping[str, Any], config: BertConfig, model_cls: type[Model] = BertForPreTraining
) -> Any:
    """A `bert_torch` state dict (tensors or numpy arrays) -> a bertjax `model_cls` (strict)."""
    return model_from_numpy(state_dict, config, model_cls)


def to_torch_model(
    model: Any, *, float64: bool = False, state_dict: Mapping[str, Any] | None = None
) -> Any:
    """The `bert_torch` mirror of `model` (same class name) with its weights, in eval mode;
    `float64`: every parameter and every computation in float64 (the parity rule's measure of
    float32's own noise, `parity.noise`), whatever compute dtype the model has. `state_dict`:
    `flax_to_torch(model)` where the caller has it already (two mirrors from one conversion;
    loading copies it, so it can be used again)."""
    import bert_torch  # optional: needs torch, as flax_to_torch does

    config = model.config.replace(dtype="float32") if float64 else model.config
    torch_model = getattr(bert_torch, type(model).__name__)(config)
    torch_model.load_state_dict(flax_to_torch(model) if state_dict is None else state_dict,
                                strict=True)
    return torch_model.double().eval() if float64 else torch_model.eval()
