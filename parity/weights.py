"""Weights between any Flax NNX module and any PyTorch module, by dotted name, strictly.

A Flax variable's PyTorch name is its module path joined by dots (list indices as numbers, the
`layers` list of an `nnx.Sequential` left out, as `nn.Sequential` names its children `0`, `1`,
...) with the leaf renamed by the standard layout rules:

| Flax leaf | PyTorch name | layout |
|---|---|---|
| `kernel` of a dense layer (in, out) | `weight` | (out, in): transposed |
| `kernel` of a convolution (*spatial, in, out) | `weight` | (out, in, *spatial) |
| `scale` (LayerNorm, RMSNorm, GroupNorm, BatchNorm) | `weight` | the same |
| `embedding` (Embed) | `weight` | the same |
| `mean`, `var` of a BatchNorm | `running_mean`, `running_var` | the same |
| any other (`bias`, your own `nnx.Param`s) | its own name | the same |

bertjax's own table (`bertjax.io.names.LEAF_RENAMES`) is the first four rows. A `name_map` covers
names that differ otherwise: a dict of dotted prefixes, Flax's (after the rules above) -> PyTorch's
(`{"blocks": "layers"}` renames `blocks.0.fc.weight` to `layers.0.fc.weight`; the longest prefix
wins; None: a name with no counterpart, left out), or a callable from a Flax name to a PyTorch name
or None. The same map pairs module paths in `parity.compare_modules`, where a PyTorch name it
sends to None is left out too (layers an `nnx.scan` runs have no row of their own).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.errors import InputError
from bertjax.io.names import LEAF_RENAMES
from bertjax.io.weights import shape_of, to_numpy

NameMap = Mapping[str, "str | None"] | Callable[[str], "str | None"] | None
BATCH_STATS = {"mean": "running_mean", "var": "running_var"}  # nnx.BatchNorm -> nn.BatchNorm*d
TRACKED = "num_batches_tracked"  # a torch BatchNorm's step counter: no Flax counterpart
NAME_MAP_HINT = ("pass name_map={flax name: torch name} (dotted prefixes) where the two name a "
                 "module differently, or None for one with no counterpart")


def map_name(name: str, name_map: NameMap) -> str | None:
    """`name` (a Flax module path or parameter name, PyTorch-style) -> its PyTorch name, through
    `name_map` (module docstring); None: left out on purpose."""
    if name_map is None:
        return name
    if callable(name_map):
        mapped = name_map(name)
        if mapped is not None and not isinstance(mapped, str):
            raise InputError(f"name_map({name!r}) returned {mapped!r}: return a PyTorch name "
                             "(a str) or None")
        return mapped
    keys = [k for k in name_map if k and (name == k or name.startswith(k + "."))]
    if not keys:
        return name
    key = max(keys, key=len)
    target = name_map[key]
    if target is None:
        return None
    rest = name[len(key):]
    return target + rest if target else rest.lstrip(".")


def check_name_map(name_map: Any) -> None:
    """Refuse a name_map that is neither a dict, a callable nor None, in one line."""
    if name_map is not None and not isinstance(name_map, Mapping) and not callable(name_map):
        raise InputError(f"name_map is a {type(name_map).__name__}: pass a dict of dotted prefixes "
                         "(Flax name -> PyTorch name) or a function of a Flax name")


def module_names(module: nnx.Module) -> dict[tuple[Any, ...], tuple[str, nnx.Module]]:
    """Graph path -> (dotted PyTorch-style name, module) of `module` and every submodule (the root
    named ""; a module reachable twice, by its first path)."""
    nodes = dict(nnx.iter_graph(module))
    found = {}
    for path, node in nodes.items():
        if isinstance(node, nnx.Module):
            parts = [str(key) for i, key in enumerate(path)
                     if not (key == "layers" and isinstance(nodes.get(path[:i]), nnx.Sequential))]
            found[tuple(path)] = (".".join(parts), node)
    return found


@dataclasses.dataclass(frozen=True)
class Slot:
    """One Flax variable and where it goes in a PyTorch state dict."""

    flax_name: str  # PyTorch-style, before name_map
    path: tuple[Any, ...]  # in the Flax graph
    variable: nnx.Variable
    layout: str  # "same", "linear" (transposed) or "conv" ((*spatial, in, out) <-> (out, in, ...))

    @property
    def flax_path(self) -> str:
        return _dotted(self.path)

    @property
    def torch_shape(self) -> tuple[int, ...]:
        shape = tuple(self.variable.shape)
        if self.layout == "linear":
            return shape[::-1]
        if self.layout == "conv":
            return (shape[-1], shape[-2], *shape[:-2])
        return shape


def _dotted(path: tuple[Any, ...]) -> str:
    return ".".join(str(p) for p in path)


def _leaf(owner: nnx.Module, leaf: str, ndim: int) -> tuple[str, str]:
    """(PyTorch leaf name, layout) of Flax leaf `leaf` of `owner`."""
    if isinstance(owner, nnx.BatchNorm) and leaf in BATCH_STATS:
        return BATCH_STATS[leaf], "same"
    if leaf not in LEAF_RENAMES:
        return leaf, "same"
    name, transposed = LEAF_RENAMES[leaf]
    if not transposed or ndim < 2:
        return name, "same"
    if isinstance(owner, nnx.ConvTranspose):
        return name, "unknown"  # torch's is (in, out, *spatial) and flips the window
    return name, "linear" if ndim == 2 else "conv"


def flax_slots(flax_module: nnx.Module, name_map: NameMap = None) -> dict[str, Slot]:
    """PyTorch name -> `Slot` for every `nnx.Param` and `nnx.BatchStat` of `flax_module` that
    `name_map` does not leave out; two variables mapped to one name are refused."""
    check_name_map(name_map)
    modules = module_names(flax_module)
    slots: dict[str, Slot] = {}
    state = nnx.state(flax_module, nnx.Any(nnx.Param, nnx.BatchStat))
    for path, variable in nnx.to_flat_state(state):
        path = tuple(path)
        owner_name, owner = modules[path[:-1]]
        leaf, layout = _leaf(owner, str(path[-1]), len(variable.shape))
        flax_name = f"{owner_name}.{leaf}" if owner_name else leaf
        name = map_name(flax_name, name_map)
        if name is None:
            continue
        if layout == "unknown":
            raise InputError(f"{_dotted(path)}: no layout rule for a {type(owner).__name__} kernel "
                             "(PyTorch's is (in, out, *spatial) and flips the window): copy it "
                             f"yourself and map {flax_name!r} to None in name_map")
        if name in slots:
            raise InputError(f"name_map sends both {slots[name].flax_name} and {flax_name} to "
                             f"{name}: give each its own PyTorch name")
        slots[name] = Slot(flax_name, path, variable, layout)
    return slots


def to_torch_layout(array: np.ndarray, layout: str) -> np.ndarray:
    if layout == "linear":
        return array.T  # (in, out) -> (out, in)
    if layout == "conv":
        n = array.ndim  # (*spatial, in, out) -> (out, in, *spatial)
        return np.transpose(array, (n - 1, n - 2, *range(n - 2)))
    return array


def from_torch_layout(array: np.ndarray, layout: str) -> np.ndarray:
    if layout == "linear":
        return array.T  # (out, in) -> (in, out)
    if layout == "conv":
        n = array.ndim  # (out, in, *spatial) -> (*spatial, in, out)
        return np.transpose(array, (*range(2, n), 1, 0))
    return array


def _state_dict(weights: Any) -> Mapping[str, Any]:
    if hasattr(weights, "state_dict") and callable(weights.state_dict):
        return weights.state_dict()
    if isinstance(weights, Mapping):
        return weights
    raise InputError(f"weights: a torch.nn.Module or a state dict (name -> tensor or NumPy "
                     f"array), not a {type(weights).__name__}")


def _problems(state_dict: Mapping[str, Any], slots: Mapping[str, Slot]) -> Iterator[str]:
    for name in sorted(set(slots) - set(state_dict)):
        yield (f"  missing {name} (Flax {slots[name].flax_path}, expected shape "
               f"{slots[name].torch_shape})")
    for name in sorted(set(state_dict) - set(slots)):
        yield f"  unexpected {name} (shape {shape_of(state_dict[name])})"
    for name in sorted(set(slots) & set(state_dict)):
        if shape_of(state_dict[name]) != slots[name].torch_shape:
            yield (f"  wrong shape for {name}: expected {slots[name].torch_shape} (Flax "
                   f"{slots[name].flax_path} {tuple(slots[name].variable.shape)}), found "
                   f"{shape_of(state_dict[name])}")


def load_torch_weights(flax_module: nnx.Module, weights: Any, name_map: NameMap = None
                       ) -> nnx.Module:
    """Copy a PyTorch module's weights (or a state dict of tensors or NumPy arrays) into
    `flax_module`, in place, by dotted name with the layout rules of this module; strict: every
    missing, unexpected and mis-shaped name is listed in one `InputError` and nothing is copied.
    A BatchNorm's `num_batches_tracked` has no Flax counterpart and is skipped. Returns
    `flax_module`."""
    slots = flax_slots(flax_module, name_map)
    state_dict = {k: v for k, v in _state_dict(weights).items() if k.split(".")[-1] != TRACKED}
    problems = list(_problems(state_dict, slots))
    if problems:
        raise InputError(
            f"the weights do not fit {type(flax_module).__name__} ({len(problems)} problems):\n"
            + "\n".join(problems) + f"\n{NAME_MAP_HINT}; a PyTorch buffer with no Flax variable "
            "(a mask, position ids): pass a state dict without it")
    for name, slot in slots.items():
        value = from_torch_layout(to_numpy(state_dict[name]), slot.layout)
        array = jnp.asarray(value, dtype=slot.variable.dtype)
        if isinstance(slot.variable.get_value(), jax.ShapeDtypeStruct):
            slot.variable.set_value(array)  # an abstract module (nnx.eval_shape): filled in
        else:
            slot.variable[...] = array  # where and how the variable is placed, kept
    return flax_module


def _tensor(array: np.ndarray) -> Any:
    import torch

    if array.dtype.name == "bfloat16":  # NumPy's bfloat16 (ml_dtypes) is not torch's
        return torch.from_numpy(array.astype(np.float32)).to(torch.bfloat16)
    return torch.from_numpy(array if array.flags.c_contiguous else array.copy())  # 0-d kept


def to_torch_state_dict(flax_module: nnx.Module, name_map: NameMap = None) -> dict[str, Any]:
    """`flax_module`'s weights as a PyTorch state dict (tensors, PyTorch layouts), the inverse of
    `load_torch_weights`: a module with the same names takes it with `load_state_dict(...,
    strict=True)` (each BatchNorm's `num_batches_tracked` is written as 0)."""
    out = {name: _tensor(to_torch_layout(np.array(slot.variable[...]), slot.layout))
           for name, slot in flax_slots(flax_module, name_map).items()}
    for name, module in module_names(flax_module).values():
        tracked = map_name(f"{name}.{TRACKED}" if name else TRACKED, name_map)
        if isinstance(module, nnx.BatchNorm) and tracked is not None:
            out[tracked] = _tensor(np.zeros((), np.int64))
    return out
