"""Strict weight conversion between bertjax (Flax NNX) and bert_torch (PyTorch).

Every direction checks the full key set and every shape, and raises one `ValueError` naming each
missing, unexpected and mis-shaped key with expected and found shapes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.model import BertForPreTraining
from parity.names import torch_name


def _param_table(state: nnx.State) -> dict[str, tuple[tuple[Any, ...], bool, Any]]:
    """torch name -> (flax path, transposed?, flax variable) for every parameter of a state."""
    table = {}
    for path, variable in nnx.to_flat_state(state):
        name, transposed = torch_name(path)
        table[name] = (path, transposed, variable)
    return table


def _template(config: BertConfig) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """An abstract (shape-only) model for `config`: no memory, no random numbers."""
    abstract = nnx.eval_shape(lambda: BertForPreTraining(config, rngs=nnx.Rngs(0)))
    return nnx.split(abstract, nnx.Param, ...)


def expected_shapes(config: BertConfig) -> dict[str, tuple[int, ...]]:
    """PyTorch name -> PyTorch shape of every parameter of `BertForPreTraining(config)`."""
    _, params, _ = _template(config)
    return {
        name: tuple(reversed(v.shape)) if transposed else tuple(v.shape)
        for name, (_, transposed, v) in _param_table(params).items()
    }


def _to_numpy(value: Any) -> np.ndarray:
    if hasattr(value, "detach"):  # a torch tensor; checked by duck type so numpy input needs no torch
        value = value.detach().cpu()
        if value.dtype.is_floating_point:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def check_state_dict(
    state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], *, what: str
) -> None:
    """Raise one ValueError listing every missing, unexpected or mis-shaped key."""
    problems = []
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    problems += [f"  missing key {k} (expected shape {expected[k]})" for k in missing]
    problems += [
        f"  unexpected key {k} (shape {_shape_of(state_dict[k])})"
        for k in unexpected
    ]
    for k in sorted(set(expected) & set(state_dict)):
        found = tuple(_shape_of(state_dict[k]))
        if found != tuple(expected[k]):
            problems.append(f"  wrong shape for {k}: expected {tuple(expected[k])}, found {found}")
    if problems:
        hint = _layer_hint(state_dict, expected)
        raise ValueError(
            f"{what} does not match the model config ({len(problems)} problems):\n"
            + "\n".join(problems)
            + (f"\n{hint}" if hint else "")
        )


def _shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


def _layer_hint(state_dict: Mapping[str, Any], expected: Mapping[str, Any]) -> str:
    def layers(keys: Any) -> int:
        idx = {int(k.split(".")[2]) for k in keys if k.startswith("bert.layers.")}
        return max(idx) + 1 if idx else 0

    found, want = layers(state_dict), layers(expected)
    if found != want:
        return (
            f"the weights have {found} layers but the config asks for num_hidden_layers={want}: "
            "build the model from the checkpoint's own config"
        )
    return ""


def state_to_numpy(params: nnx.State) -> dict[str, np.ndarray]:
    """A Flax parameter state (or gradients) -> PyTorch-named, PyTorch-shaped numpy arrays."""
    out = {}
    for name, (_, transposed, variable) in _param_table(params).items():
        value = np.asarray(variable[...])
        out[name] = np.ascontiguousarray(value.T) if transposed else value
    return out


def flax_to_numpy(model: BertForPreTraining) -> dict[str, np.ndarray]:
    """A bertjax model -> PyTorch-named numpy arrays, checked against the model's config."""
    arrays = state_to_numpy(nnx.state(model, nnx.Param))
    check_state_dict(arrays, expected_shapes(model.config), what="the bertjax model")
    return arrays


def flax_to_torch(model: BertForPreTraining) -> dict[str, Any]:
    """A bertjax model -> a `bert_torch.BertForPreTraining` state dict (strict)."""
    import torch

    return {k: torch.from_numpy(v.copy()) for k, v in flax_to_numpy(model).items()}


def torch_to_flax(state_dict: Mapping[str, Any], config: BertConfig) -> BertForPreTraining:
    """A `bert_torch` state dict (tensors or numpy arrays) -> a bertjax model (strict)."""
    graphdef, params, rest = _template(config)
    table = _param_table(params)
    expected = {
        name: tuple(reversed(v.shape)) if transposed else tuple(v.shape)
        for name, (_, transposed, v) in table.items()
    }
    check_state_dict(state_dict, expected, what="the state dict")
    flat = []
    for name, (path, transposed, variable) in table.items():
        value = _to_numpy(state_dict[name]).astype(np.float32)
        flat.append((path, variable.replace(jnp.asarray(value.T if transposed else value))))
    return nnx.merge(graphdef, nnx.from_flat_state(flat), rest)


def to_torch_model(model: BertForPreTraining) -> Any:
    """A `bert_torch.BertForPreTraining` with this model's weights, in eval mode."""
    from bert_torch import BertForPreTraining as TorchBertForPreTraining

    torch_model = TorchBertForPreTraining(model.config)
    torch_model.load_state_dict(flax_to_torch(model), strict=True)
    return torch_model.eval()
