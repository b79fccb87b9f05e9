"""A bertjax model's parameters as PyTorch-named numpy arrays, and back, strictly.

The PyTorch name of a parameter is its Flax path with the leaf renamed (`bertjax.io.names`), so one
table serves `bert_torch` state dicts, Hugging Face checkpoints (`bertjax.io.hf`, a further rename)
and the parity checks. Every direction checks the full key set and every shape, and raises one
`ValueError` naming each missing, unexpected and mis-shaped key with expected and found shapes.
Needs no PyTorch: tensors are accepted by duck type.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.config import BertConfig
from bertjax.io.names import torch_name


def _model_class(model_cls: type | None) -> type:
    from bertjax.model import BertForPreTraining

    return BertForPreTraining if model_cls is None else model_cls


def _param_table(state: nnx.State) -> dict[str, tuple[tuple[Any, ...], bool, Any]]:
    """torch name -> (flax path, transposed?, flax variable) for every parameter of a state."""
    table = {}
    for path, variable in nnx.to_flat_state(state):
        name, transposed = torch_name(path)
        table[name] = (path, transposed, variable)
    return table


def _template(config: BertConfig, model_cls: type | None) -> tuple[nnx.GraphDef, nnx.State, nnx.State]:
    """An abstract (shape-only) model: no memory, no random numbers."""
    cls = _model_class(model_cls)
    abstract = nnx.eval_shape(lambda: cls(config, rngs=nnx.Rngs(0)))
    return nnx.split(abstract, nnx.Param, ...)


def _torch_shapes(table: dict[str, tuple[tuple[Any, ...], bool, Any]]) -> dict[str, tuple[int, ...]]:
    return {
        name: tuple(reversed(v.shape)) if transposed else tuple(v.shape)
        for name, (_, transposed, v) in table.items()
    }


def expected_shapes(config: BertConfig, model_cls: type | None = None) -> dict[str, tuple[int, ...]]:
    """PyTorch name -> PyTorch shape of every parameter of `model_cls(config)` (default
    `BertForPreTraining`)."""
    _, params, _ = _template(config, model_cls)
    return _torch_shapes(_param_table(params))


def shape_of(value: Any) -> tuple[int, ...]:
    return tuple(value.shape) if hasattr(value, "shape") else tuple(np.shape(value))


def check_state_dict(
    state_dict: Mapping[str, Any], expected: Mapping[str, tuple[int, ...]], *, what: str
) -> None:
    """Raise one ValueError listing every missing, unexpected or mis-shaped key."""
    problems = []
    missing = sorted(set(expected) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(expected))
    problems += [f"  missing key {k} (expected shape {expected[k]})" for k in missing]
    problems += [f"  unexpected key {k} (shape {shape_of(state_dict[k])})" for k in unexpected]
    for k in sorted(set(expected) & set(state_dict)):
        found = shape_of(state_dict[k])
        if found != tuple(expected[k]):
            problems.append(f"  wrong shape for {k}: expected {tuple(expected[k])}, found {found}")
    if problems:
        hint = _layer_hint(state_dict, expected)
        raise ValueError(
            f"{what} does not match the model config ({len(problems)} problems):\n"
            + "\n".join(problems)
            + (f"\n{hint}" if hint else "")
        )


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


def to_numpy(value: Any) -> np.ndarray:
    """A numpy array of `value`; a torch tensor (duck-typed, so numpy input needs no torch)
    is detached, moved to the CPU and, if floating point, made float32."""
    if hasattr(value, "detach"):
        value = value.detach().cpu()
        if value.dtype.is_floating_point:
            value = value.float()
        return value.numpy()
    return np.asarray(value)


def state_to_numpy(params: nnx.State) -> dict[str, np.ndarray]:
    """A Flax parameter state (or its gradients) -> PyTorch-named, PyTorch-shaped numpy arrays."""
    out = {}
    for name, (_, transposed, variable) in _param_table(params).items():
        value = np.asarray(variable[...])
        out[name] = np.ascontiguousarray(value.T) if transposed else value
    return out


def saved_params_to_numpy(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Parameters as a checkpoint holds them (nested dicts of arrays, each leaf under a `value`
    key, layer indices as strings) -> PyTorch-named, PyTorch-shaped numpy arrays."""
    out = {}

    def walk(tree: Any, path: tuple[str, ...]) -> None:
        if isinstance(tree, Mapping) and set(tree) != {"value"}:
            for key, sub in tree.items():
                walk(sub, (*path, str(key)))
            return
        name, transposed = torch_name(path)
        value = np.asarray(tree["value"] if isinstance(tree, Mapping) else tree)
        out[name] = np.ascontiguousarray(value.T) if transposed else value

    walk(params, ())
    return out


def model_to_numpy(model: nnx.Module) -> dict[str, np.ndarray]:
    """A bertjax model -> PyTorch-named numpy arrays, checked against the model's config."""
    arrays = state_to_numpy(nnx.state(model, nnx.Param))
    check_state_dict(arrays, expected_shapes(model.config, type(model)), what="the bertjax model")
    return arrays


def model_from_numpy(
    state_dict: Mapping[str, Any], config: BertConfig, model_cls: type | None = None,
    *, what: str = "the state dict",
) -> Any:
    """PyTorch-named arrays (numpy or torch tensors) -> a bertjax `model_cls` (strict)."""
    graphdef, params, rest = _template(config, model_cls)
    table = _param_table(params)
    check_state_dict(state_dict, _torch_shapes(table), what=what)
    flat = []
    for name, (path, transposed, variable) in table.items():
        value = to_numpy(state_dict[name]).astype(np.float32)
        flat.append((path, variable.replace(jnp.asarray(value.T if transposed else value))))
    return nnx.merge(graphdef, nnx.from_flat_state(flat), rest)
