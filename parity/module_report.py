"""What `parity.compare_modules` finds: one row per submodule output and per gradient, each judged
by the parity rule (`parity.noise`), and the first submodule to diverge.

The first divergence is the innermost submodule whose output falls outside its bar while every
input it was fed was inside (the earliest in call order when there are several): a defect in one
activation of block 1 shows in every later output, but only block 1 turned good inputs into a bad
output, and of block 1 and the model around it, block 1 is the one that did.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from parity.noise import Judged, judge

ROOT = "(root)"  # how the compared module itself is named in a report


@dataclasses.dataclass(frozen=True)
class ModuleRow(Judged):
    """One output array of one submodule call (or one parameter's gradient), judged: distances as
    `parity.noise.Judged`, plus which module and call it comes from and whether every input that
    call was fed passed (None for a gradient)."""

    module: str = ""  # dotted path of the submodule ("" the compared module itself)
    call: int = 0  # 0 for the first call of that submodule, 1 for the second, ...
    inputs_passed: bool | None = None
    note: str = ""  # why a row failed without a distance (shapes differ)

    @property
    def where(self) -> str:
        """The submodule call, as a report names it: `blocks.1`, `(root)`, `proj (call 2)`."""
        name = self.module or ROOT
        return f"{name} (call {self.call + 1})" if self.call else name

    @property
    def is_gradient(self) -> bool:
        return self.inputs_passed is None


def aligned(ours: Any, ref: np.ndarray) -> np.ndarray:
    """PyTorch's array as ours is laid out: its channels (axis 1) moved last where only that makes
    the shapes agree (a convolution's activations: (N, C, ...) in PyTorch, channels last in NNX)."""
    if np.shape(ours) == np.shape(ref) or np.ndim(ref) < 3:
        return ref
    moved = np.moveaxis(ref, 1, -1)
    return moved if moved.shape == np.shape(ours) else ref


def inputs_passed(ours: list[Any], ref32: list[Any], ref64: list[Any], tolerance: float) -> bool:
    """Whether every input array of a call (ours, PyTorch's in float32 and float64: paired in
    order, where shapes agree) passed."""
    triples = [(a, aligned(a, b), aligned(a, c)) for a, b, c in zip(ours, ref32, ref64, strict=False)]
    return all(judge("input", a, b, c, tolerance).passed for a, b, c in triples
               if np.shape(a) == np.shape(b))


def _inside(inner: str, outer: str) -> bool:
    """Whether submodule path `inner` lies inside `outer` ("" the root)."""
    return inner != outer and (outer == "" or inner.startswith(outer + "."))


@dataclasses.dataclass
class ModuleReport:
    """Every row of a comparison, in call order (outputs, then gradients), and the submodules that
    were not compared: parameterless ones (activations, dropout) one side has and the other not."""

    rows: list[ModuleRow]
    skipped: tuple[str, ...] = ()

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.rows)

    def row(self, name: str) -> ModuleRow:
        return next(r for r in self.rows if r.name == name)

    @property
    def first_divergence(self) -> str | None:
        """The innermost submodule call whose output fails while its inputs passed (the earliest
        in call order of several), as `ModuleRow.where` names it; None when no output fails
        (gradients are rows of their own and name no submodule)."""
        candidates: dict[tuple[str, int], ModuleRow] = {}
        for r in self.rows:
            if not r.is_gradient and not r.passed and r.inputs_passed:
                candidates.setdefault((r.module, r.call), r)
        innermost = [r for r in candidates.values()
                     if not any(_inside(other.module, r.module) for other in candidates.values())]
        return innermost[0].where if innermost else None

    def _headline(self) -> str:
        first = self.first_divergence
        if first is not None:
            r = next(r for r in self.rows if r.where == first and not r.passed and not r.is_gradient)
            return (f"first divergence: {first}: output {r.name} is {r.distance:.3e} from "
                    f"PyTorch's (bar {r.bar:.3e}) while every input it was fed was within its bar")
        if self.passed:
            return "first divergence: none, every output and gradient within its bar"
        return "first divergence: none in the outputs; gradients fail"

    def format(self) -> str:
        """The first divergence, then one line per row: its distance from float32 PyTorch (abs and
        rel), float32 PyTorch's own from float64 (`f32 noise`), the bar, whether the inputs of that
        call passed and the result; then what was not compared and how many passed."""
        width = max([len("output"), *(len(r.name) for r in self.rows)])
        lines = [self._headline(),
                 f"{'output':<{width}}  {'max abs':>10}  {'max rel':>10}  {'f32 noise':>14}  "
                 f"{'bar':>14}  inputs  result"]
        for r in self.rows:
            kind = "rel " if r.relative else "abs "
            inputs = "" if r.is_gradient else ("ok" if r.inputs_passed else "FAIL")
            result = ("ok" if r.passed else "FAIL") + (f" ({r.note})" if r.note else "")
            lines.append(f"{r.name:<{width}}  {r.max_abs:10.3e}  {r.max_rel:10.3e}  "
                         f"{kind + format(r.noise, '.3e'):>14}  {kind + format(r.bar, '.3e'):>14}  "
                         f"{inputs:<6}  {result}")
        if self.skipped:
            lines.append(f"not compared (no parameters, on one side only): {', '.join(self.skipped)}")
        failed = sum(not r.passed for r in self.rows)
        lines.append(f"{len(self.rows) - failed} passed, {failed} failed")
        return "\n".join(lines)
