"""Which steps of a run compute the whole model and which forecast it: Spectrum's schedule, on the run's own steps.

Spectrum (Han et al., CVPR 2026, official code ``hanjq17/Spectrum``) computes the first
``warmup_steps`` steps; after them it waits ``floor(window)`` steps between computed ones, where
the window starts at ``window_size`` (the paper's N) and grows by ``window_growth`` (its alpha)
after every computed step past the warmup. So the gaps widen as the run goes on, where the
features change least. The official code computes no step at the end of the run on purpose; the
last low-noise steps are where a forecast costs most (``final_computed_steps`` keeps them computed).

Facts of the official schedule (50 steps, warmup 5, N 2): alpha 0.75 computes 14 steps, alpha 3.0
computes 10 (its README), checked in ``tests/forecast/test_forecast_math.py``.
"""

from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class ForecastSchedule:
    warmup_steps: int = 5          # computed at the start
    window_size: float = 2.0       # N: the first window after the warmup
    window_growth: float = 0.75    # alpha: the window's growth after each computed step past the warmup
    final_computed_steps: int = 0  # computed at the end (the official code: none)

    def __post_init__(self):
        if self.warmup_steps < 0 or self.final_computed_steps < 0:
            raise ValueError("warmup_steps and final_computed_steps must not be negative")
        if not (math.isfinite(self.window_size) and self.window_size >= 1.0):
            raise ValueError(f"window_size must be at least 1 (a computed step every window), got {self.window_size}")
        if not (math.isfinite(self.window_growth) and self.window_growth >= 0.0):
            raise ValueError(f"window_growth must be a finite number of at least 0, got {self.window_growth}")

    def shares(self, steps: int, sigmas=None, guided: bool = True) -> None:
        """No share per step: the forecaster's ``extrapolation`` holds for every step (``auto`` sets its own)."""
        return None

    def computed(self, steps: int) -> list[bool]:
        """Per step of a run of ``steps`` steps: whether the schedule computes it (else it is forecast)."""
        plan, window, since_computed = [], self.window_size, 0
        for step in range(steps):
            compute = step < self.warmup_steps or (since_computed + 1) % math.floor(window) == 0
            if compute and step >= self.warmup_steps:
                window = round(window + self.window_growth, 3)   # as the official code: no float drift
            since_computed = 0 if compute else since_computed + 1
            plan.append(compute or step >= steps - self.final_computed_steps)
        return plan
