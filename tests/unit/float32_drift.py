"""Tolerances from a float64 run: how far a float32 result drifts from the float64 one,
beside how far PyTorch's own float32 run drifts (tests/unit is on the path):

    rows = [Drift("G main.1.bias", ours, torch32, torch64)]
    print(table(rows))                  # per tensor: ours, PyTorch's, the ratio
    assert_within(rows, factor=3)       # ours <= 3 x PyTorch's (+ a few roundings)

PyTorch's float32 drift says what float32 can promise for that computation on this
CPU; a tolerance that is a multiple of it holds wherever both run, whatever the
vector width, FMA use or summation order of the C build.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

EPS32 = float(np.finfo(np.float32).eps)


def nudge(values: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each element moved by one unit in the last place, up or down as `rng` draws: the
    same problem to the values' precision. Where a result is ill-conditioned (ResNet-18's
    batch norm over 2 samples of 1 x 1 images), a float32 run from nudged params is
    another equally valid draw of float32's drift, and one draw alone is a poor scale:

        rng = np.random.default_rng(seed)   # one generator for all the params
        for p in params: p.data = nudge(p.data, rng)
        worst32 = max(drift(run[key], want64) for run in [ref32, *nudged_runs])
    """
    away = np.where(rng.random(values.shape) < 0.5, -np.inf, np.inf).astype(values.dtype)
    return np.nextafter(values, away)


def drift(got: np.ndarray, want64: np.ndarray, mask: np.ndarray | None = None) -> float:
    """`|got - want64| / |want64|` in the Frobenius norm (over `mask` where given)."""
    got, want64 = np.asarray(got, np.float64), np.asarray(want64, np.float64)
    if mask is not None:
        got, want64 = got[mask], want64[mask]
    return float(np.linalg.norm(got - want64) / max(float(np.linalg.norm(want64)), 1e-30))


@dataclass
class Drift:
    """One tensor: ours and PyTorch's float32 values, PyTorch's float64 one, and the
    elements that count (None: all)."""

    name: str
    ours: np.ndarray
    torch32: np.ndarray
    torch64: np.ndarray
    mask: np.ndarray | None = None

    @property
    def of_ours(self) -> float:
        return drift(self.ours, self.torch64, self.mask)

    @property
    def of_torch(self) -> float:
        return drift(self.torch32, self.torch64, self.mask)

    def ratio(self, floor: float) -> float:
        """Ours over PyTorch's, PyTorch's taken as at least `floor` (a float32 result
        can be exact by luck; a few roundings are always allowed)."""
        return self.of_ours / max(self.of_torch, floor)


def table(rows: list[Drift], floor: float = 4 * EPS32) -> str:
    """The drift of each tensor, worst ratio first."""
    lines = [f"{'tensor':32} {'gradfuse':>10} {'torch f32':>10} {'ratio':>7}  excluded"]
    for r in sorted(rows, key=lambda r: -r.ratio(floor)):
        left = 0 if r.mask is None else int(r.mask.size - r.mask.sum())
        lines.append(
            f"{r.name:32} {r.of_ours:10.2e} {r.of_torch:10.2e} {r.ratio(floor):7.2f}  {left}"
        )
    return "\n".join(lines)


def assert_within(rows: list[Drift], factor: float, floor: float = 4 * EPS32) -> None:
    """Every tensor drifts at most `factor` times as far as PyTorch's float32 does."""
    worst = max(rows, key=lambda r: r.ratio(floor))
    assert worst.ratio(floor) <= factor, f"{worst.name} drifts too far:\n{table(rows, floor)}"
