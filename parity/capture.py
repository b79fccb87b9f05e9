"""Every submodule's inputs and output, in call order, in Flax NNX and in PyTorch, and nothing left
behind: the Flax side wraps its modules' classes' `__call__` for the duration of a `with` block,
the PyTorch side registers forward hooks and removes them at its end.

A call is recorded under the module's dotted name (`parity.weights.module_names`: NNX attribute
paths, list indices as numbers; torch's `named_modules`), its inputs as the array leaves of its
positional then keyword arguments (by keyword), its output as the array leaves of what it returns
(`leaves`: tuples, lists, dicts and dataclasses field by field). An NNX module is known by identity
or, split and merged again (bertjax's layer loop does), by holding the same variables; a module
called inside a JAX transform of its own (`lax.scan`, `jax.checkpoint`) is not recorded, its
values belonging to that transform's trace.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Collection, Iterator, Mapping
from typing import Any

import jax
import jax.extend
import numpy as np
from flax import nnx

from parity.weights import module_names


@dataclasses.dataclass
class Call:
    """One call of one module: its name, which call of it this is, whether it holds parameters
    (only those must pair up between the frameworks), its input and output arrays."""

    name: str
    occurrence: int
    has_params: bool
    inputs: list[Any]
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)

    @property
    def key(self) -> tuple[str, int]:
        return self.name, self.occurrence


def is_array(x: Any) -> bool:
    """A JAX array (or tracer), a NumPy array or a torch tensor (duck-typed: no torch import)."""
    return isinstance(x, jax.Array | np.ndarray) or hasattr(x, "detach") and hasattr(x, "shape")


def leaves(tree: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """The arrays of an output, keyed by where they are: "" for a lone array, `[0]` for a tuple's
    first, `[logits]` for a dict's or a dataclass's field (None fields skipped)."""
    if is_array(tree):
        return [(prefix, tree)]
    if isinstance(tree, Mapping):
        items = [(k, tree[k]) for k in tree.keys()]  # also transformers' ModelOutput
    elif dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        items = [(f.name, getattr(tree, f.name)) for f in dataclasses.fields(tree)]
    elif isinstance(tree, tuple | list):
        items = list(zip(getattr(tree, "_fields", range(len(tree))), tree, strict=True))
    else:
        return []
    return [leaf for k, v in items for leaf in leaves(v, f"{prefix}[{k}]")]


def input_leaves(args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
    """The arrays a call was fed: its positional arguments', then its keywords' by name."""
    return [x for _, x in leaves(list(args))] + [
        x for k in sorted(kwargs) for _, x in leaves(kwargs[k])]


class FlaxCapture:
    """`with FlaxCapture(module) as calls:` records each call of `module` and its submodules (and
    of copies merged from their variables) into `calls`, in the order the calls begin; `only`:
    of the submodules of those names alone."""

    def __init__(self, module: nnx.Module, only: Collection[str] | None = None) -> None:
        self.calls: list[Call] = []
        self._by_id: dict[int, tuple[str, bool]] = {}
        self._by_variables: dict[tuple[type, tuple[int, ...]], tuple[str, bool]] = {}
        named = [(n, m) for n, m in module_names(module).values() if only is None or n in only]
        for name, m in named:
            variables = _variable_ids(m)
            known = (name, any(isinstance(v, nnx.Param) for _, v in _variables(m)))
            self._by_id[id(m)] = known
            if variables:
                self._by_variables.setdefault((type(m), variables), known)
        self._classes = {type(m) for _, m in named
                         if any("__call__" in c.__dict__ for c in type(m).__mro__[:-1])}
        self._saved: list[tuple[type, Any]] = []
        self._active: set[int] = set()
        self._trace: Any = None
        self._counts: dict[str, int] = {}

    def _known(self, module: nnx.Module) -> tuple[str, bool] | None:
        found = self._by_id.get(id(module))
        if found is None and self._by_variables:
            found = self._by_variables.get((type(module), _variable_ids(module)))
        return found

    def _wrap(self, call: Any) -> Any:
        @functools.wraps(call)
        def recorded(module: Any, *args: Any, **kwargs: Any) -> Any:
            known = None if id(module) in self._active else self._known(module)
            if known is None or jax.extend.core.get_opaque_trace_state(convention="nnx") != (
                    self._trace):
                return call(module, *args, **kwargs)  # unknown, nested in itself, or in a transform
            name, has_params = known
            record = Call(name, self._counts.get(name, 0), has_params, input_leaves(args, kwargs))
            self._counts[name] = record.occurrence + 1
            self.calls.append(record)
            self._active.add(id(module))
            try:
                out = call(module, *args, **kwargs)
            finally:
                self._active.discard(id(module))
            record.outputs = dict(leaves(out))
            return out

        return recorded

    def __enter__(self) -> list[Call]:
        self._trace = jax.extend.core.get_opaque_trace_state(convention="nnx")
        for cls in self._classes:
            self._saved.append((cls, cls.__dict__.get("__call__", _INHERITED)))
            setattr(cls, "__call__", self._wrap(cls.__call__))  # noqa: B010 - a method, replaced
        return self.calls

    def __exit__(self, *exc: Any) -> None:
        while self._saved:
            cls, original = self._saved.pop()
            if original is _INHERITED:
                del cls.__call__
            else:
                setattr(cls, "__call__", original)  # noqa: B010


_INHERITED = object()  # a class that had no `__call__` of its own


def _variables(module: nnx.Module) -> Iterator[tuple[Any, nnx.Variable]]:
    return iter(nnx.to_flat_state(nnx.state(module)))


def _variable_ids(module: nnx.Module) -> tuple[int, ...]:
    return tuple(id(v) for _, v in _variables(module))


class TorchCapture:
    """`with TorchCapture(module) as calls:` records each call of `module` and its submodules into
    `calls` through forward hooks (inputs copied as the call begins, outputs as it ends, so that
    an in-place operation later cannot change them), removed when the block ends; `only`: of the
    submodules of those names alone."""

    def __init__(self, module: Any, only: Collection[str] | None = None) -> None:
        self.module = module
        self.only = only
        self.calls: list[Call] = []
        self._handles: list[Any] = []
        self._open: dict[int, list[Call]] = {}
        self._counts: dict[str, int] = {}

    def __enter__(self) -> list[Call]:
        for name, m in self.module.named_modules():
            if self.only is not None and name not in self.only:
                continue
            has_params = any(True for _ in m.parameters())
            self._handles.append(m.register_forward_pre_hook(
                functools.partial(self._begin, name, has_params), with_kwargs=True))
            self._handles.append(m.register_forward_hook(self._end))
        return self.calls

    def _begin(self, name: str, has_params: bool, module: Any, args: tuple, kwargs: dict) -> None:
        record = Call(name, self._counts.get(name, 0), has_params,
                      [_copy(x) for x in input_leaves(args, kwargs)])
        self._counts[name] = record.occurrence + 1
        self.calls.append(record)
        self._open.setdefault(id(module), []).append(record)

    def _end(self, module: Any, args: tuple, output: Any) -> None:
        record = self._open[id(module)].pop()
        record.outputs = {k: _copy(v) for k, v in leaves(output)}

    def __exit__(self, *exc: Any) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()


def _copy(tensor: Any) -> np.ndarray:
    """A NumPy copy of a torch tensor, detached (bfloat16 read as float32)."""
    t = tensor.detach()
    if t.dtype.is_floating_point and t.dtype.itemsize < 4:
        t = t.float()
    return t.cpu().numpy().copy()
