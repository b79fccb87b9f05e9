"""The parity rule, in one place: a tensor is judged against its reference's own float32 noise.

The reference (the PyTorch mirror, or transformers) runs twice, in float32 and in float64. A
tensor of ours passes when its distance from the float32 reference is within

    max(tolerance, NOISE_FACTOR x the float32 reference's distance from the float64 one)

measured the same way (max abs difference, or relative to the reference's magnitude). A fixed
tolerance alone sits inside float32's summation noise on some tensors - a gradient summed over
many rows was 1.09e-5 relative from its reference on one CPU and under 1e-5 on another - and
would fail a correct model by the CPU's order of additions; the float64 run measures that noise
on this machine, for this tensor. A wrong weight moves a tensor by far more than its noise.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import numpy as np

# How many times the reference's own float32 noise a distance may reach (what outside checks of
# float32 kernels against a float64 run use).
NOISE_FACTOR = 3


def bar(tolerance: float, noise: float) -> float:
    """The largest distance that passes: the tolerance, or NOISE_FACTOR x the noise if larger."""
    return max(tolerance, NOISE_FACTOR * noise)


def max_abs(x: Any) -> float:
    """The largest magnitude of an array (0 for an empty one), in float64."""
    x = np.asarray(x, dtype=np.float64)
    return float(np.max(np.abs(x))) if x.size else 0.0


@dataclasses.dataclass(frozen=True)
class Judged:
    """One tensor: its distance from the float32 reference and that reference's from float64,
    both absolute, and the scale a relative judgement divides them by."""

    name: str
    max_abs: float  # ours vs the float32 reference
    noise_abs: float  # the float32 reference vs the float64 reference
    scale: float  # the reference's magnitude (floored), for relative judgements
    tolerance: float
    relative: bool  # judged on distances relative to `scale` rather than absolute ones

    def _measure(self, value: float) -> float:
        return value / self.scale if self.relative and self.scale else value

    @property
    def max_rel(self) -> float:
        return self.max_abs / self.scale if self.scale else self.max_abs

    @property
    def distance(self) -> float:
        """What is judged: the max abs difference, or the relative one."""
        return self._measure(self.max_abs)

    @property
    def noise(self) -> float:
        """The float32 reference's distance from float64, measured as `distance` is."""
        return self._measure(self.noise_abs)

    @property
    def bar(self) -> float:
        return bar(self.tolerance, self.noise)

    @property
    def passed(self) -> bool:
        return self.distance <= self.bar


def judge(name: str, ours: Any, ref32: Any, ref64: Any, tolerance: float, *,
          relative: bool = False, floor: float = 0.0) -> Judged:
    """`ours` against the float32 reference `ref32`, with `ref64` (the same reference in
    float64) measuring its noise; `relative`: distances over max(|ref32|, `floor`)."""
    a, b, c = (np.asarray(x, dtype=np.float64) for x in (ours, ref32, ref64))
    if not a.shape == b.shape == c.shape:
        raise ValueError(f"{name}: shapes differ, ours {a.shape}, the reference {b.shape} "
                         f"(float32) and {c.shape} (float64)")
    return Judged(name, max_abs(a - b), max_abs(b - c), max(max_abs(b), floor), tolerance,
                  relative)


def failures(ours: Mapping[str, Any], ref32: Mapping[str, Any], ref64: Mapping[str, Any],
             tolerance: float, *, relative: bool = False, floor: float = 0.0) -> list[str]:
    """Each tensor of `ours` that fails the rule against its references (same keys), as a line
    with both distances; [] when all pass."""
    if not set(ours) == set(ref32) == set(ref64):
        raise ValueError(f"names differ: {sorted(set(ours) ^ set(ref32) | set(ours) ^ set(ref64))}")
    judged = [judge(k, ours[k], ref32[k], ref64[k], tolerance, relative=relative, floor=floor)
              for k in sorted(ours)]
    return [f"{j.name}: distance {j.distance:.3e} > bar {j.bar:.3e} (tolerance "
            f"{j.tolerance:.0e}, float32 noise {j.noise:.3e})" for j in judged if not j.passed]
