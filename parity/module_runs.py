"""Both sides of `parity.compare_modules`: the Flax module (float32, jitted) and the PyTorch module
(float32, and a float64 copy) run on the same inputs in evaluation mode at the highest matmul
precision, every submodule call captured (`parity.capture`), the gradients of a fixed random
projection of the outputs taken; nothing about either module or any global setting changed.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from collections.abc import Iterator, Mapping
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from bertjax.errors import InputError
from parity.capture import Call, FlaxCapture, TorchCapture, leaves
from parity.tensors import _probe_weights

Inputs = tuple[tuple[Any, ...], dict[str, Any]]
PLAIN = (bool, int, float, str, type(None))  # passed to both modules as they are


def split_inputs(inputs: Any) -> Inputs:
    """(positional, keyword) arguments from `inputs`: a tuple (a dict last: its keywords), a dict
    or one array; every value a NumPy array or a plain Python value."""
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    if isinstance(inputs, np.ndarray):
        args, kwargs = (inputs,), {}
    elif isinstance(inputs, Mapping):
        args, kwargs = (), dict(inputs)
    elif isinstance(inputs, tuple):
        has_kwargs = bool(inputs) and isinstance(inputs[-1], Mapping)
        args, kwargs = (inputs[:-1], dict(inputs[-1])) if has_kwargs else (inputs, {})
    else:
        raise InputError(f"inputs is a {type(inputs).__name__}: pass a tuple of positional "
                         "arguments and/or a dict of keyword arguments (NumPy arrays)")
    for where, value in [*((f"inputs[{i}]", v) for i, v in enumerate(args)),
                         *((f"inputs[{k!r}]", v) for k, v in kwargs.items())]:
        if not isinstance(value, (np.ndarray, *PLAIN)):
            raise InputError(f"{where} is a {type(value).__module__}.{type(value).__name__}: pass "
                             "NumPy arrays (np.asarray(x)), which both modules are given, or plain "
                             "Python values")
    return args, kwargs


def _cast(inputs: Inputs, dtype: type, convert: Any) -> Inputs:
    """Every floating array as `dtype`, every array through `convert`."""
    def one(x: Any) -> Any:
        if not isinstance(x, np.ndarray):
            return x
        x = x.astype(dtype) if np.issubdtype(x.dtype, np.floating) else x
        return convert(x if x.flags.c_contiguous else x.copy())  # 0-d stays 0-d

    args, kwargs = inputs
    return tuple(one(x) for x in args), {k: one(v) for k, v in kwargs.items()}


def _floating(x: Any) -> bool:
    """Whether an array (JAX, NumPy or torch) holds floating-point numbers."""
    torch_says = getattr(x.dtype, "is_floating_point", None)
    return bool(torch_says) if torch_says is not None else bool(jnp.issubdtype(x.dtype, jnp.floating))


def _projection(out: Any, weights: Any) -> Any:
    """The scalar the gradients are of: each floating output array times fixed random weights of
    its shape (seeded by where it is in the output), averaged, summed over the arrays."""
    arrays = [(k, x) for k, x in leaves(out) if _floating(x)]
    if not arrays:
        raise InputError("the outputs hold no floating-point array to take gradients of: pass "
                         "gradients=False")
    return sum((x * weights(_probe_weights(k, tuple(x.shape)), x)).mean() for k, x in arrays)


class _Array:
    """Where an input array goes among a call's arguments (the arrays are traced, the rest static)."""

    def __repr__(self) -> str:
        return "<array>"


_ARRAY = _Array()
CallKey = tuple[int, str, int, bool]  # (order, name, occurrence, has parameters)


@functools.partial(jax.jit, static_argnums=(0, 1, 2, 3))
def _flax_values(graphdef: nnx.GraphDef, args: tuple[Any, ...], kwargs: tuple[tuple[str, Any], ...],
                 gradients: bool, params: nnx.State, rest: nnx.State, arrays: tuple[dict, dict]
                 ) -> tuple[dict[CallKey, Any], nnx.State | None]:
    """Every call's (inputs, outputs) keyed by `CallKey` (the keys survive the jit cache, so a
    module compared again runs without tracing) and the gradients, or None. The module runs as a
    merge of traced variables: its own stay untouched."""

    def run(params: nnx.State) -> tuple[Any, dict[CallKey, Any]]:
        model = nnx.merge(graphdef, params, rest)
        model.eval()
        call_args = tuple(arrays[0][i] if x is _ARRAY else x for i, x in enumerate(args))
        call_kwargs = {k: arrays[1][k] if x is _ARRAY else x for k, x in kwargs}
        with FlaxCapture(model) as calls:
            out = model(*call_args, **call_kwargs)
        loss = _projection(out, lambda w, x: jnp.asarray(w, x.dtype)) if gradients else 0.0
        return loss, {(i, c.name, c.occurrence, c.has_params): (c.inputs, c.outputs)
                      for i, c in enumerate(calls)}

    if gradients:
        (_, values), grads = jax.value_and_grad(run, has_aux=True)(params)
        return values, grads
    return run(params)[1], None


def flax_run(module: nnx.Module, inputs: Inputs, gradients: bool
              ) -> tuple[list[Call], dict[tuple[Any, ...], np.ndarray] | None]:
    """The Flax module's calls (arrays on the host) and its parameters' gradients by graph path."""
    graphdef, params, *others = nnx.split(module, nnx.Param, ...)
    rest = others[0]  # the module's other state (one State for `...`)
    args, kwargs = _cast(inputs, np.float32, jnp.asarray)
    arrays = ({i: x for i, x in enumerate(args) if isinstance(x, jax.Array)},
              {k: x for k, x in kwargs.items() if isinstance(x, jax.Array)})
    static_args = tuple(_ARRAY if i in arrays[0] else x for i, x in enumerate(args))
    static_kwargs = tuple(sorted((k, _ARRAY if k in arrays[1] else x) for k, x in kwargs.items()))
    with jax.default_matmul_precision("highest"):
        values, grads = _flax_values(graphdef, static_args, static_kwargs, gradients, params, rest,
                                     arrays)
    calls = [Call(name, occurrence, has_params, [np.asarray(x) for x in ins],
                  {k: np.asarray(v) for k, v in outs.items()})
             for (_, name, occurrence, has_params), (ins, outs) in sorted(values.items())]
    flat = None if grads is None else {tuple(p): np.asarray(v[...])
                                       for p, v in nnx.to_flat_state(grads)}
    return calls, flat


@contextlib.contextmanager
def _torch_settings(module: Any) -> Iterator[None]:
    """`module` in evaluation mode with every parameter requiring gradients, float32 matmuls
    and convolutions at full precision (no TF32); all of it as it was afterwards."""
    import torch

    modes = [(m, m.training) for m in module.modules()]
    needs = [(p, p.requires_grad) for p in module.parameters()]
    precision, cudnn_tf32 = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    try:
        module.eval()
        for p, _ in needs:
            p.requires_grad_(True)
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False
        yield
    finally:
        for m, training in modes:
            m.training = training
        for p, required in needs:
            p.requires_grad_(required)
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.allow_tf32 = cudnn_tf32


def torch_run(module: Any, inputs: Inputs, gradients: bool, dtype: type
               ) -> tuple[list[Call], dict[str, np.ndarray] | None]:
    """The PyTorch module's calls (NumPy copies) and its parameters' gradients by name."""
    import torch

    device = next(module.parameters(), torch.empty(0)).device
    args, kwargs = _cast(inputs, dtype, lambda x: torch.from_numpy(x).to(device))
    params = dict(module.named_parameters())
    with _torch_settings(module), torch.set_grad_enabled(gradients):
        with TorchCapture(module) as calls:
            out = module(*args, **kwargs)
        if not gradients:
            return calls, None
        loss = _projection(out, lambda w, x: torch.from_numpy(w).to(x.dtype).to(x.device))
        grads = torch.autograd.grad(loss, list(params.values()), allow_unused=True)
    return calls, {n: np.zeros(tuple(p.shape), dtype) if g is None else g.detach().cpu().numpy()
                   for (n, p), g in zip(params.items(), grads, strict=True)}


def float64_run(module: Any, inputs: Inputs, gradients: bool
                 ) -> tuple[list[Call], dict[str, np.ndarray] | None]:
    """`torch_run` of a float64 copy of `module`; a module that cannot run so is refused."""
    fix = ("parity measures float32's own noise with a float64 copy (module.double()): make every "
           "tensor the module creates take its input's dtype (x.dtype), not float32")
    try:
        calls, grads = torch_run(copy.deepcopy(module).double(), inputs, gradients, np.float64)
    except Exception as err:  # noqa: BLE001 - it ran in float32: the dtype is what differs
        first = str(err).strip().splitlines()[0] if str(err).strip() else ""
        raise InputError(f"{type(module).__name__} cannot run in float64 ({type(err).__name__}: "
                         f"{first}): {fix}") from err
    for call in calls:
        for key, x in call.outputs.items():
            if np.issubdtype(x.dtype, np.floating) and x.dtype != np.float64:
                where = (call.name or type(module).__name__) + key
                raise InputError(f"{type(module).__name__} cannot run in float64: {where} is "
                                 f"{x.dtype} in its float64 copy; {fix}")
    return calls, grads
