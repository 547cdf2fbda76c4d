"""The whole-call forecasting node's settings, its named presets, and the plan of one run.

A preset is a full set of settings under a name; ``custom`` takes them from the node's inputs.
What a preset stands for is fixed here and written into every run's record, so the node (and its
stats) always say what ran. Where the figures behind a preset come from is said beside it: they
are measured on the trained proxy (dynamics on procedural images, not Krea-2 quality) or are the
official code's defaults, never real-weight results. The help page (web/docs/CacheDiTSpectrum.md)
quotes each summary and, under "Evidence", the figures (``PRESET_STANDINGS`` in adapters/figures.py).
"""

from __future__ import annotations

import dataclasses

from .auto_schedule import AUTO, AutoSchedule
from .feature_forecast import Forecaster
from .forecast_schedule import ForecastSchedule

CUSTOM = "custom"


@dataclasses.dataclass(frozen=True)
class Preset:
    forecast: Forecaster
    schedule: ForecastSchedule
    summary: str      # what it does and for which schedule, for the node's help page (no figures: its Evidence)


PRESETS: dict[str, Preset] = {
    # Each preset's figures against plain euler at as many model calls, on the distilled Turbo proxy
    # (8 steps) and the trained proxy (52 steps): ``PRESET_STANDINGS`` in adapters/figures.py, held to the
    # peer benchmark's committed results; dynamics on procedural images, not Krea-2 quality.
    # Few-step distilled models (Krea-2 Turbo, 8 steps): a linear forecast every other step. 5 of 8: two
    # steps of warmup and the last step computed.
    "turbo_5_of_8": Preset(Forecaster("linear"), ForecastSchedule(2, 2.0, 0.0, 1),
                           "Turbo at 8 steps: a linear forecast every second step after 2 warmup steps, the last "
                           "step computed (8 steps: 5 computed)"),
    # 4 of 8: the steps fewer steps would compute (0, 2, 4, 6); the others forecast the model's output (the
    # final layer's), 0.7 of the way its trend points: the output forecast lands closer than the feature's
    # at 4 of 8, and computing euler's own steps closer than two forecast in three after 2 warmup steps
    # (docs/benchmarks.md, "Against fewer steps").
    "turbo_4_of_8": Preset(Forecaster("linear", extrapolation=0.7, target="output"), ForecastSchedule(1, 2.0, 0.0, 0),
                           "Turbo at 8 steps, faster: the steps euler at 4 steps computes, the others a forecast "
                           "of the model's output at 0.7 of its trend (8 steps: 4 computed)"),
    # Long schedules (Krea-2 Raw, about 50 steps, CFG 3.5): a linear forecast past a short warmup, 0.7 of
    # the way its trend points (a long gap's full extrapolation overshoots). 52 steps: 13, 11 and 8
    # computed. raw_1_in_4's window grows slowly (4, then 4.25, ...): the early gaps, where a forecast from
    # the warmup points drifts most, stay short; raw_8_of_52's grows by 0.75 after 6.5: the best of the
    # node's schedules of 8 calls on the proxy (the search: benchmarks/forecast_error.py).
    "raw_1_in_4": Preset(Forecaster("linear", extrapolation=0.7), ForecastSchedule(2, 4.0, 0.25, 1),
                         "Raw at about 50 steps: a linear forecast at 0.7 of its trend, one step in four computed"
                         " after 2 warmup steps, the window growing by 0.25, the last step computed (52 steps: 13"
                         " computed)"),
    "raw_1_in_5": Preset(Forecaster("linear", extrapolation=0.7), ForecastSchedule(2, 6.0, 0.0, 1),
                         "Raw at about 50 steps, faster: as raw_1_in_4 with one step in six computed and a fixed "
                         "window (52 steps: 11 computed)"),
    "raw_8_of_52": Preset(Forecaster("linear", extrapolation=0.7), ForecastSchedule(2, 6.5, 0.75, 0),
                          "Raw at about 50 steps, fastest: as raw_1_in_4 with the window 6.5 growing by 0.75, no "
                          "final step computed (52 steps: 8 computed)"),
    # The official code's defaults (configs/algo/spectrum.yaml, configs/base.yaml, its README's
    # alpha 0.75 setting): 14 computed steps of 50.
    "spectrum_paper": Preset(Forecaster("spectrum", 4, 0.1, 1.0), ForecastSchedule(5, 2.0, 0.75, 0),
                             "Spectrum as published: m 4, lambda 0.1, w 1, warmup 5, N 2, alpha 0.75 (50 steps: "
                             "14 computed)"),
    # Its README's aggressive setting (alpha 3.0): 10 computed steps of 50.
    "spectrum_paper_fast": Preset(Forecaster("spectrum", 4, 0.1, 1.0), ForecastSchedule(5, 2.0, 3.0, 0),
                                  "Spectrum as published, alpha 3 (50 steps: 10 computed)"),
}
# ``auto``: the model's output forecast along its trend, the share per gap from the run's sigmas (auto_schedule).
AUTO_FORECAST = Forecaster("linear", target="output")
PRESET_NAMES = (*PRESETS, AUTO, CUSTOM)


@dataclasses.dataclass(frozen=True)
class ForecastSettings:
    """What the node asked for: a preset's settings, or the node's own under ``custom``."""

    preset: str
    forecast: Forecaster
    schedule: ForecastSchedule | AutoSchedule

    @classmethod
    def auto(cls, speedup: float) -> "ForecastSettings":
        return cls(AUTO, AUTO_FORECAST, AutoSchedule(speedup))

    def for_family(self, family) -> "ForecastSettings":
        """What runs on ``family``: ``auto`` forecasts the feature where the final layer's output cannot be
        (``final_output_forecast``); every other setting runs as set."""
        if self.preset != AUTO or family.final_output_forecast:
            return self
        return dataclasses.replace(self, forecast=dataclasses.replace(self.forecast, target="feature"))

    @classmethod
    def from_preset(cls, name: str) -> "ForecastSettings":
        if name not in PRESETS:
            raise ValueError(f"preset must be one of {', '.join(PRESET_NAMES)}, got {name!r}")
        return cls(name, PRESETS[name].forecast, PRESETS[name].schedule)


@dataclasses.dataclass(frozen=True)
class ForecastPlan:
    """One run of ``steps`` steps: which steps the schedule computes (1) and forecasts (0)."""

    steps: int
    settings: ForecastSettings
    mask: tuple[int, ...]
    warnings: tuple[str, ...] = ()
    mask_name: str = "forecast schedule"
    shares: tuple[float, ...] | None = None   # a plan's extrapolation share per step; None: the forecaster's

    def share_at(self, step: int) -> float | None:
        return None if self.shares is None or step >= len(self.shares) else self.shares[step]

    def record_parts(self, observations, streams: list[dict]) -> dict:
        """Nothing of the record is the forecast's own beyond ``method`` (no threshold, no calibrator)."""
        return {}

    def computes(self, step: int) -> bool:
        return step >= self.steps or bool(self.mask[step])

    skipped_state = "forecast"   # what the record calls a step whose blocks were skipped
    measures_residuals = False   # the schedule decides; no residual is measured

    def method_summary(self) -> dict:
        """The method as the record shows it: its name and what it ran with."""
        forecast, schedule = self.settings.forecast, self.settings.schedule
        summary = {"name": "forecast", "preset": self.settings.preset,
                   **dataclasses.asdict(forecast), **dataclasses.asdict(schedule),
                   "computed_steps": [step for step, on in enumerate(self.mask) if on]}
        if self.shares is not None:
            summary["gap_shares"] = self.gap_shares()
        return summary

    def gap_shares(self) -> list[float]:
        """The share each gap's forecast went, in the order of the gaps (a plan with ``shares``)."""
        computed = [step for step, on in enumerate(self.mask) if on]
        return [round(self.shares[start + 1], 3)
                for start, end in zip(computed, computed[1:] + [self.steps]) if end > start + 1]

    def method_text(self, parts: dict) -> str:
        """The log line's words for what ran besides the counts: the forecast, its share and target where they are
        not the defaults, and the preset: "forecast linear (extrapolation 0.7, target output) (preset custom)" (the
        panel says it alike, web/krea2_cachedit.js)."""
        forecast, preset = self.settings.forecast, self.settings.preset
        shown = ([f"extrapolation {forecast.extrapolation:g}"] if forecast.extrapolation != 1.0 else []) + \
            ([f"target {forecast.target}"] if forecast.target != "feature" else [])
        if self.shares is not None:
            shown = [f"target {forecast.target}", "share per gap " + "/".join(f"{s:g}" for s in self.gap_shares())]
        if preset == AUTO:
            preset = f"auto, speedup {self.settings.schedule.speedup:g}"
        return (f"forecast {forecast.forecast}" + (f" ({', '.join(shown)})" if shown else "") + f" (preset {preset})")


def plan_forecast_run(settings: ForecastSettings, steps: int, sigmas=None, guided: bool = True) -> ForecastPlan:
    """The run's plan; a schedule that sets the share per step (``auto``) reads it from the run's sigmas and
    whether the run is ``guided`` (more than one conditioning per step)."""
    if steps < 1:
        raise ValueError("a sampling run needs at least one step")
    shares = settings.schedule.shares(steps, sigmas, guided)
    return ForecastPlan(steps, settings, tuple(int(c) for c in settings.schedule.computed(steps)),
                        shares=None if shares is None else tuple(shares))
