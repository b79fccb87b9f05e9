"""Parity for anyone's port: any Flax NNX module beside any PyTorch module, submodule by submodule.

    import parity
    parity.load_torch_weights(flax_block, torch_block)            # by dotted name, strict
    report = parity.compare_modules(flax_block, torch_block, (x,))
    print(report.format())          # every submodule's output, judged; the first to diverge named
    parity.assert_modules_match(flax_block, torch_block, (x,))   # the same, in a test

Both modules see the same inputs, in evaluation mode (no dropout, BatchNorm's running
statistics). The PyTorch module runs in float32 and, as a copy, in float64; the Flax module in
float32; each at the highest matmul precision (set for the comparison and restored). Every
submodule call's inputs and output are captured on both sides (`parity.capture`,
`parity.module_runs`) and paired by
dotted path, through `name_map` (`parity.weights`) where the names differ. An output passes
within max(tolerance, 3 x float32 PyTorch's distance from float64 PyTorch) (`parity.noise`);
the gradients of a fixed random projection of the outputs with respect to every parameter are
judged so too, relative to each gradient's scale (floored as `parity.tensors` floors them).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flax import nnx

from bertjax.errors import InputError
from parity.capture import Call
from parity.module_report import ROOT, ModuleReport, ModuleRow, aligned, inputs_passed
from parity.module_runs import flax_run, float64_run, split_inputs, torch_run
from parity.noise import judge, max_abs
from parity.tensors import GRAD_FLOOR, TOLERANCE
from parity.weights import NAME_MAP_HINT, NameMap, check_name_map, flax_slots, map_name, to_torch_layout


def _pair(flax_calls: list[Call], torch_calls: list[Call], name_map: NameMap
          ) -> tuple[list[tuple[Call, tuple[str, int]]], tuple[str, ...]]:
    """[(Flax call, the key of its PyTorch call)] in Flax call order, and the parameterless
    submodules only one side called (skipped); submodules with parameters that do not pair up are
    refused in one line."""
    torch_keys = {c.key: c for c in torch_calls}
    pairs, flax_only, skipped = [], [], []
    for call in flax_calls:
        name = call.name if call.name == "" else map_name(call.name, name_map)
        if name is None:
            continue
        if (name, call.occurrence) in torch_keys:
            pairs.append((call, (name, call.occurrence)))
        elif call.has_params:
            flax_only.append(_named(call))
        else:
            skipped.append(_named(call))
    paired = {key for _, key in pairs}
    unpaired = [c for c in torch_calls if c.key not in paired and map_name(c.name, name_map) is not None]
    torch_only = [_named(c) for c in unpaired if c.has_params]
    skipped += [_named(c) for c in unpaired if not c.has_params]
    if flax_only or torch_only:
        raise InputError(f"submodules with parameters that do not pair up: Flax only "
                         f"{_some(flax_only)}; PyTorch only {_some(torch_only)}: {NAME_MAP_HINT}")
    return pairs, tuple(dict.fromkeys(skipped))


def _named(call: Call) -> str:
    return (call.name or ROOT) + (f" (call {call.occurrence + 1})" if call.occurrence else "")


def _some(names: list[str], most: int = 8) -> str:
    if not names:
        return "none"
    shown = ", ".join(names[:most])
    return shown + (f" and {len(names) - most} more" if len(names) > most else "")


def _output_rows(ours: Call, ref32: Call, ref64: Call, tolerance: float) -> list[ModuleRow]:
    """One row per output array of a call, paired by where it is in the output (a lone array on
    each side pairs whatever its place); a shape that differs fails its row."""
    passed = inputs_passed(ours.inputs, ref32.inputs, ref64.inputs, tolerance)
    if len(ours.outputs) == len(ref32.outputs) == 1:
        pairs = [(next(iter(ours.outputs)), next(iter(ref32.outputs)))]
    elif set(ours.outputs) == set(ref32.outputs):
        pairs = [(k, k) for k in ours.outputs]
    else:
        raise InputError(f"the outputs of {_named(ours)} differ in structure: Flax "
                         f"{_some(list(ours.outputs))}, PyTorch {_some(list(ref32.outputs))}"
                         ": return the same tuple, dict or dataclass fields from both")
    rows = []
    for mine, theirs in pairs:
        a = ours.outputs[mine]
        b, c = aligned(a, ref32.outputs[theirs]), aligned(a, ref64.outputs[theirs])
        name = _named(ours) + mine
        if np.shape(a) == np.shape(b):
            j = judge(name, a, b, c, tolerance)
            rows.append(ModuleRow(j.name, j.max_abs, j.noise_abs, j.scale, tolerance, False,
                                  ours.name, ours.occurrence, passed))
        else:
            rows.append(ModuleRow(name, float("inf"), max_abs(np.asarray(b, np.float64) - c),
                                  max_abs(b), tolerance, False, ours.name, ours.occurrence,
                                  passed, f"shape {np.shape(a)}, PyTorch's {np.shape(b)}"))
    return rows


def _gradient_rows(flax_module: nnx.Module, ours: dict[tuple[Any, ...], np.ndarray],
                   ref32: dict[str, np.ndarray], ref64: dict[str, np.ndarray], name_map: NameMap,
                   tolerance: float) -> list[ModuleRow]:
    """One row per parameter: its gradient judged relative to its scale, floored at GRAD_FLOOR of
    the largest gradient (`parity.tensors`), named by its Flax name."""
    slots = {n: s for n, s in flax_slots(flax_module, name_map).items() if s.path in ours}
    ref32 = {n: g for n, g in ref32.items() if map_name(n, name_map) is not None}
    if set(slots) != set(ref32):
        raise InputError(f"parameters that do not pair up: Flax only "
                         f"{_some([slots[n].flax_name for n in sorted(set(slots) - set(ref32))])}; "
                         f"PyTorch only {_some(sorted(set(ref32) - set(slots)))}: {NAME_MAP_HINT}")
    floor = GRAD_FLOOR * max((max_abs(g) for g in ref32.values()), default=0.0)
    rows = []
    for name, slot in slots.items():
        grad = to_torch_layout(ours[slot.path], slot.layout)
        j = judge(f"grad.{slot.flax_name}", grad, ref32[name], ref64[name], tolerance,
                  relative=True, floor=floor)
        rows.append(ModuleRow(j.name, j.max_abs, j.noise_abs, j.scale, tolerance, True,
                              slot.flax_name.rpartition(".")[0]))
    return rows


def _check_modules(flax_module: Any, torch_module: Any) -> None:
    import torch

    if not isinstance(flax_module, nnx.Module):
        raise InputError(f"flax_module is a {type(flax_module).__name__}: pass a flax.nnx.Module")
    if not isinstance(torch_module, torch.nn.Module):
        raise InputError(f"torch_module is a {type(torch_module).__name__}: pass a "
                         "torch.nn.Module")
    dtypes = sorted({str(p.dtype) for p in torch_module.parameters()} - {"torch.float32"})
    if dtypes:
        raise InputError(f"the PyTorch module holds {', '.join(dtypes)} parameters: parity runs "
                         "it in float32 (and a float64 copy); pass module.float()")


def compare_modules(
    flax_module: nnx.Module,
    torch_module: Any,
    inputs: Any,
    *,
    tolerance: float = TOLERANCE,
    grad_tolerance: float = TOLERANCE,
    gradients: bool = True,
    name_map: NameMap = None,
) -> ModuleReport:
    """Run `flax_module` (float32) and `torch_module` (float32, and a float64 copy) on `inputs` (a
    tuple of positional NumPy arrays and/or a dict of keyword ones, given to both) and judge
    every submodule's output, paired by dotted path (`name_map`: Flax names -> PyTorch names
    where they differ), and with `gradients` every parameter's gradient of a fixed random
    projection of the outputs. Neither module is changed: no hook stays, modes and settings are
    restored, the Flax module runs as a copy."""
    check_name_map(name_map)
    _check_modules(flax_module, torch_module)
    given = split_inputs(inputs)
    flax_calls, flax_grads = flax_run(flax_module, given, gradients)
    calls32, grads32 = torch_run(torch_module, given, gradients, np.float32)
    calls64, grads64 = float64_run(torch_module, given, gradients)
    pairs, skipped = _pair(flax_calls, calls32, name_map)
    by_key32, by_key64 = {c.key: c for c in calls32}, {c.key: c for c in calls64}
    rows = [row for call, key in pairs
            for row in _output_rows(call, by_key32[key], by_key64[key], tolerance)]
    if gradients:
        assert flax_grads is not None and grads32 is not None and grads64 is not None
        rows += _gradient_rows(flax_module, flax_grads, grads32, grads64, name_map, grad_tolerance)
    return ModuleReport(rows, skipped)


def assert_modules_match(flax_module: nnx.Module, torch_module: Any, inputs: Any,
                         **options: Any) -> ModuleReport:
    """`compare_modules`, raising `AssertionError` with the formatted report unless every row
    passes (for a test suite of your own); returns the report."""
    report = compare_modules(flax_module, torch_module, inputs, **options)
    if not report.passed:
        raise AssertionError("the Flax module does not match the PyTorch one\n" + report.format())
    return report
