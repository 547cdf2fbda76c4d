"""Forecasting the feature before a model's final layer from the steps actually computed.

One ``FeatureHistory`` per CFG stream and cache context holds what a forecast needs of that
stream's computed steps, on the run's own time axis (the step index, mapped to [-1, 1] over the
run's steps, where the official code hard-codes 50):

- ``spectrum``: Spectrum's forecast (Han et al., CVPR 2026): Chebyshev polynomials T_0..T_m of the
  time, fitted to every computed feature by ridge regression (``ridge_lambda``), blended with the
  first-order local extrapolation from the last two computed steps: ``w * chebyshev + (1 - w) * linear``
  (the official code's blend; ``w`` 1 is the paper's predictor);
- ``linear`` / ``quadratic``: the local extrapolation alone, of order 1 or 2: Newton's backward
  differences of the last computed steps, in units of their last spacing. Order 1 is the official
  code's ``_local_taylor_discrete`` (the one its Spectrum blends with); its order 2 weighs the second
  difference by k(k-1)/2, which does not extrapolate even a parabola, so this uses Newton's k(k+1)/2.

The ridge fit needs no stored features: with the time mapped over the whole run, the design rows
never change, so ``X^T X`` (tiny, float64 on the host) and ``X^T H`` (one float32 tensor per basis,
the feature's size, float64 for float64 features) are accumulated as steps are computed, and a forecast is one weighted sum of the
``X^T H`` rows: ``x*^T (X^T X + lambda I)^-1 X^T H``, the ridge solution evaluated at the step. Memory
stays (m + 1) features in float32 whatever the step count; the local extrapolation keeps the last
few computed features in their own dtype.
"""

from __future__ import annotations

import collections
import dataclasses

import torch

FORECASTS = ("spectrum", "linear", "quadratic")
# Computed steps a forecast needs before it may be used (the local extrapolation's points).
MIN_POINTS = {"spectrum": 2, "linear": 2, "quadratic": 3}


@dataclasses.dataclass(frozen=True)
class Forecaster:
    forecast: str = "spectrum"
    chebyshev_degree: int = 4      # m: the bases are T_0..T_m
    ridge_lambda: float = 0.1
    blend_w: float = 1.0           # spectrum: the Chebyshev share of the blend (1: the paper's predictor)

    def __post_init__(self):
        if self.forecast not in FORECASTS:
            raise ValueError(f"forecast must be one of {FORECASTS}, got {self.forecast!r}")
        if not 1 <= self.chebyshev_degree <= 8:
            raise ValueError(f"chebyshev_degree must be from 1 to 8, got {self.chebyshev_degree}")
        if not self.ridge_lambda > 0:
            raise ValueError(f"ridge_lambda must be above 0 (it keeps the fit solvable), got {self.ridge_lambda}")
        if not 0.0 <= self.blend_w <= 1.0:
            raise ValueError(f"blend_w must be from 0 to 1, got {self.blend_w}")

    @property
    def min_points(self) -> int:
        return MIN_POINTS[self.forecast]

    @property
    def local_order(self) -> int:
        return 2 if self.forecast == "quadratic" else 1


def _accumulating(dtype: torch.dtype) -> torch.dtype:
    """float32 for the half-precision features a model computes; float64 stays float64."""
    return torch.promote_types(dtype, torch.float32)


def chebyshev_row(tau: float, degree: int) -> list[float]:
    """T_0(tau) .. T_degree(tau) by the recurrence T_k = 2 tau T_{k-1} - T_{k-2}."""
    row = [1.0, tau]
    while len(row) < degree + 1:
        row.append(2.0 * tau * row[-1] - row[-2])
    return row[:degree + 1]


class FeatureHistory:
    """One stream's computed features in one context, and its forecast at any later step."""

    def __init__(self, settings: Forecaster, steps: int):
        self.settings = settings
        self.steps = max(steps, 1)
        self.computed_steps: list[int] = []
        self._recent: collections.deque[tuple[int, torch.Tensor]] = collections.deque(
            maxlen=settings.local_order + 1)
        bases = settings.chebyshev_degree + 1
        self._xtx = torch.zeros(bases, bases, dtype=torch.float64)
        self._xth: torch.Tensor | None = None          # (bases, *feature) float32, on the feature's device
        self._shape: tuple[int, ...] | None = None

    def _tau(self, step: int) -> float:
        return 2.0 * step / self.steps - 1.0

    @property
    def ready(self) -> bool:
        return len(self.computed_steps) >= self.settings.min_points

    def fits(self, feature_shape) -> bool:
        return self._shape is None or tuple(feature_shape) == self._shape

    @torch.no_grad()
    def add(self, step: int, feature: torch.Tensor) -> None:
        """The feature a computed step gave the final layer."""
        feature = feature.detach()
        self._shape = tuple(feature.shape)
        self.computed_steps.append(step)
        self._recent.append((step, feature))
        if self.settings.forecast != "spectrum" or self.settings.blend_w == 0.0:
            return
        row = chebyshev_row(self._tau(step), self.settings.chebyshev_degree)
        self._xtx += torch.outer(torch.tensor(row, dtype=torch.float64), torch.tensor(row, dtype=torch.float64))
        if self._xth is None:
            self._xth = torch.zeros((len(row), *feature.shape), dtype=_accumulating(feature.dtype),
                                    device=feature.device)
        as_float = feature.to(self._xth.dtype)
        for basis, value in enumerate(row):   # one basis at a time: no (bases x feature) temporary
            self._xth[basis].add_(as_float, alpha=value)

    @torch.no_grad()
    def forecast(self, step: int) -> torch.Tensor:
        """The feature at ``step`` (``ready`` must hold), in the computed features' dtype."""
        latest_step, latest = self._recent[-1]
        local = self._local(step)
        if self.settings.forecast != "spectrum" or self.settings.blend_w == 0.0:
            return local.to(latest.dtype)
        w = self.settings.blend_w
        spectral = self._chebyshev(step)
        blended = spectral if w == 1.0 else torch.lerp(local, spectral, w)
        return blended.to(latest.dtype)

    def _chebyshev(self, step: int) -> torch.Tensor:
        bases = self.settings.chebyshev_degree + 1
        row = torch.tensor(chebyshev_row(self._tau(step), self.settings.chebyshev_degree), dtype=torch.float64)
        gram = self._xtx + self.settings.ridge_lambda * torch.eye(bases, dtype=torch.float64)
        weights = torch.linalg.solve(gram, row)          # (X^T X + lambda I)^-1 x*, symmetric
        weights = weights.to(device=self._xth.device, dtype=self._xth.dtype)
        return torch.tensordot(weights, self._xth, dims=1)

    def _local(self, step: int) -> torch.Tensor:
        """Newton's backward-difference extrapolation from the last computed steps, in units of their last spacing."""
        points = [(s, feature.to(_accumulating(feature.dtype))) for s, feature in self._recent]
        (last_step, last), (before_step, before) = points[-1], points[-2]
        k = (step - last_step) / max(last_step - before_step, 1)
        difference = last - before
        out = last + k * difference
        if self.settings.local_order >= 2 and len(points) >= 3:
            second = difference - (before - points[-3][1])
            out = out + 0.5 * k * (k + 1.0) * second
        return out
