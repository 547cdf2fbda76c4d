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

The local extrapolation goes ``extrapolation`` of the way its differences point: 1 in full, 0 holds
the last computed feature. Holding the feature over a skipped step is close to what fewer steps on
the same sigmas do (the sampler's Euler step reuses the last computed output), so a share between
them never strays far past what fewer steps would give, where a full extrapolation over a long gap
does (the Raw presets forecast at 0.7 for that reason; what each idea bought on the proxies:
docs/benchmarks.md, "Against fewer steps"). A linear forecast with one computed step holds it.

The ridge fit needs no stored features: with the time mapped over the whole run, the design rows
never change, so ``X^T X`` (tiny, float64 on the host) and ``X^T (H - h_0)`` (one tensor per basis, the
feature's size) are accumulated as steps are computed, ``h_0`` being the first computed feature, kept
as it came; a forecast is ``s h_0 + x*^T (X^T X + lambda I)^-1 X^T (H - h_0)``, with ``s`` the same
weights on the design's column sums: the ridge solution evaluated at the step.

Memory per stream (``history_bytes``; Krea-2 1024x1024 in docs/nodes.md): the fit holds (m + 1)
accumulations and ``h_0``; the local extrapolation the last ``order + 1`` computed features, in their
own dtype, and only when the forecast uses it (not Spectrum's ``w`` 1). A bf16 feature is accumulated
in bf16 (``_accumulating`` says why), any other in float32 or float64."""

from __future__ import annotations

import collections
import dataclasses
import math

import torch

FORECASTS = ("spectrum", "linear", "quadratic")
# What is forecast (``forecast_run`` picks the seam by it): ``feature``, the final layer's input (Spectrum's
# choice); ``output``, the final layer's output, the model's prediction itself. A forecast of the output
# extrapolates what the sampler integrates, past the final layer's norm and time modulation; on the distilled
# Turbo proxy it is the closer one at 4 of 8 calls, on the trained proxy at 52 steps the farther one
# (docs/benchmarks.md, "Against fewer steps"). Its history is the output's size: 64 values a token for
# Krea-2, against the feature's 6144.
TARGETS = ("feature", "output")
# Computed steps a forecast needs before it may be used (the local extrapolation's points).
# A linear forecast holds its one computed step until a second one gives it a direction: a schedule may
# then compute every other step from the first (what fewer steps on the same sigmas compute), where two
# computed steps first would spend a call of a small budget at the run's shortest step.
MIN_POINTS = {"spectrum": 2, "linear": 1, "quadratic": 3}


@dataclasses.dataclass(frozen=True)
class Forecaster:
    forecast: str = "spectrum"
    chebyshev_degree: int = 4      # m: the bases are T_0..T_m
    ridge_lambda: float = 0.1
    blend_w: float = 1.0           # spectrum: the Chebyshev share of the blend (1: the paper's predictor)
    extrapolation: float = 1.0     # the local extrapolation's share of its step: 1 in full, 0 holds
    target: str = "feature"        # what is forecast: the final layer's input or its output (``TARGETS``)

    def __post_init__(self):
        if self.forecast not in FORECASTS:
            raise ValueError(f"forecast must be one of {FORECASTS}, got {self.forecast!r}")
        if not 1 <= self.chebyshev_degree <= 8:
            raise ValueError(f"chebyshev_degree must be from 1 to 8, got {self.chebyshev_degree}")
        if not self.ridge_lambda > 0:
            raise ValueError(f"ridge_lambda must be above 0 (it keeps the fit solvable), got {self.ridge_lambda}")
        if not 0.0 <= self.blend_w <= 1.0:
            raise ValueError(f"blend_w must be from 0 to 1, got {self.blend_w}")
        if not 0.0 <= self.extrapolation <= 1.0:
            raise ValueError(f"extrapolation must be from 0 (hold the last computed step) to 1 (extrapolate in "
                             f"full), got {self.extrapolation}")
        if self.target not in TARGETS:
            raise ValueError(f"target must be one of {TARGETS} (what is forecast: the final layer's input or its "
                             f"output), got {self.target!r}")

    @property
    def min_points(self) -> int:
        return MIN_POINTS[self.forecast]

    @property
    def local_order(self) -> int:
        return 2 if self.forecast == "quadratic" else 1

    @property
    def uses_fit(self) -> bool:
        """Whether the forecast has a Chebyshev share (Spectrum with ``w`` above 0)."""
        return self.forecast == "spectrum" and self.blend_w > 0.0

    @property
    def uses_local(self) -> bool:
        """Whether the forecast has a local-extrapolation share (linear, quadratic, Spectrum with ``w`` below 1)."""
        return self.forecast != "spectrum" or self.blend_w < 1.0

    @property
    def recent_kept(self) -> int:
        """The computed features the local extrapolation needs: its order's points; none without it."""
        return self.local_order + 1 if self.uses_local else 0


def _accumulating(dtype: torch.dtype) -> torch.dtype:
    """bf16 for bf16 features, float32 for float16 and float32 ones, float64 for float64.

    A bf16 accumulation halves the fit's memory (Krea-2 1024x1024, Spectrum m 4: 260 MB per stream instead
    of 519 MB; split CFG holds two). Accumulated as they come, bf16 sums lose what the fit needs: on the
    trained proxy's features (benchmarks/forecast_error.py's, Raw, ``spectrum_paper``) the forecast's mean
    error grew from 0.145 to 0.168. Accumulated as differences from the first computed feature, which are
    far smaller than the features, it grew to 0.146 (0.240 to 0.241 for ``spectrum_paper_fast``), within
    the spread of the images. float16 keeps float32: its range is a bf16's square root, and a sum of a
    run's differences can leave it."""
    return dtype if dtype == torch.bfloat16 else torch.promote_types(dtype, torch.float32)


def history_bytes(settings: "Forecaster", feature_shape, dtype: torch.dtype) -> int:
    """What one stream's ``FeatureHistory`` holds at most, in bytes, for features of ``feature_shape``
    and ``dtype`` (the fit's accumulations and first feature, the local extrapolation's recent features)."""
    values = math.prod(feature_shape)
    fit = 0
    if settings.uses_fit:
        fit = (settings.chebyshev_degree + 1) * values * _accumulating(dtype).itemsize + values * dtype.itemsize
    return fit + settings.recent_kept * values * dtype.itemsize


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
        self._recent: collections.deque[tuple[int, torch.Tensor]] = collections.deque(maxlen=settings.recent_kept)
        bases = settings.chebyshev_degree + 1
        self._xtx = torch.zeros(bases, bases, dtype=torch.float64)
        self._column_sums = torch.zeros(bases, dtype=torch.float64)   # X^T 1: what h_0 is weighted by
        self._first: torch.Tensor | None = None        # h_0, the first computed feature
        self._xth: torch.Tensor | None = None          # (bases, *feature) X^T (H - h_0), on the feature's device
        self._shape: tuple[int, ...] | None = None
        self._dtype: torch.dtype | None = None

    def _tau(self, step: int) -> float:
        return 2.0 * step / self.steps - 1.0

    @property
    def ready(self) -> bool:
        return len(self.computed_steps) >= self.settings.min_points

    def fits(self, feature_shape) -> bool:
        return self._shape is None or tuple(feature_shape) == self._shape

    def held_bytes(self) -> int:
        """The bytes of the tensors this history holds (``history_bytes`` is its bound)."""
        held = [self._first, self._xth, *(feature for _, feature in self._recent)]
        return sum(t.numel() * t.element_size() for t in held if t is not None)

    @torch.no_grad()
    def add(self, step: int, feature: torch.Tensor) -> None:
        """The feature a computed step gave the final layer."""
        feature = feature.detach()
        self._shape, self._dtype = tuple(feature.shape), feature.dtype
        self.computed_steps.append(step)
        self._recent.append((step, feature))
        if self.settings.uses_fit:
            self._accumulate(step, feature)

    def _accumulate(self, step: int, feature: torch.Tensor) -> None:
        row = chebyshev_row(self._tau(step), self.settings.chebyshev_degree)
        as_tensor = torch.tensor(row, dtype=torch.float64)
        self._xtx += torch.outer(as_tensor, as_tensor)
        self._column_sums += as_tensor
        if self._first is None:
            # The first feature's own difference is zero: nothing to add to the accumulations yet.
            self._first = feature
            self._xth = torch.zeros((len(row), *feature.shape), dtype=_accumulating(feature.dtype),
                                    device=feature.device)
            return
        # The difference in float32 at least, rounded once per basis into the accumulation.
        difference = feature.to(torch.promote_types(self._xth.dtype, torch.float32)) - self._first
        for basis, value in enumerate(row):   # one basis at a time: no (bases x feature) temporary
            self._xth[basis].add_(difference, alpha=value)

    @torch.no_grad()
    def forecast(self, step: int, share: float | None = None) -> torch.Tensor:
        """The feature at ``step`` (``ready`` must hold), in the computed features' dtype; ``share``: the local
        extrapolation's share for this step, where a plan sets it per step (else the settings' ``extrapolation``)."""
        if not self.settings.uses_fit:
            return self._local(step, share).to(self._dtype)
        spectral = self._chebyshev(step)
        if not self.settings.uses_local:
            return spectral.to(self._dtype)
        return torch.lerp(self._local(step, share), spectral, self.settings.blend_w).to(self._dtype)

    def _chebyshev(self, step: int) -> torch.Tensor:
        bases = self.settings.chebyshev_degree + 1
        row = torch.tensor(chebyshev_row(self._tau(step), self.settings.chebyshev_degree), dtype=torch.float64)
        gram = self._xtx + self.settings.ridge_lambda * torch.eye(bases, dtype=torch.float64)
        weights = torch.linalg.solve(gram, row)          # (X^T X + lambda I)^-1 x*, symmetric
        computing = torch.promote_types(self._xth.dtype, torch.float32)
        forecast = self._first.to(computing) * float(weights @ self._column_sums)
        # One basis at a time, as ``_accumulate``: no float32 copy of a bf16 (bases x feature) accumulation.
        for basis, weight in enumerate(weights.tolist()):
            forecast.add_(self._xth[basis].to(computing), alpha=weight)
        return forecast

    def _local(self, step: int, share: float | None = None) -> torch.Tensor:
        """Newton's backward-difference extrapolation from the last computed steps, in units of their last
        spacing, ``share`` (else ``extrapolation``) of the way; with one computed step, that step held."""
        points = [(s, feature.to(torch.promote_types(feature.dtype, torch.float32))) for s, feature in self._recent]
        last_step, last = points[-1]
        if len(points) < 2:
            return last.clone()   # a copy: the history's own tensor never leaves it
        before_step, before = points[-2]
        k = (step - last_step) / max(last_step - before_step, 1)
        difference = last - before
        change = k * difference
        if self.settings.local_order >= 2 and len(points) >= 3:
            second = difference - (before - points[-3][1])
            change = change + 0.5 * k * (k + 1.0) * second
        return last + (self.settings.extrapolation if share is None else share) * change
