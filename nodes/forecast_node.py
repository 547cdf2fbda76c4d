"""The whole-call forecasting node (Spectrum and lower-order forecasts): settings in, a MODEL clone out.

One node per method, as ComfyUI's own caches are: this one sits beside the DBCache nodes and takes
every supported family. ``preset`` is a dynamic combo: a named preset shows no further inputs (its
settings are fixed, ``PRESETS`` in ``adapters/forecast/forecast_settings.py``); ``custom`` shows them all.
"""

from __future__ import annotations

from comfy_api.latest import io

from ..adapters.families.registry import FORECAST_SCOPE
from ..adapters.figures import preset_measured_steps
from ..adapters.forecast.feature_forecast import FORECASTS, TARGETS, Forecaster
from ..adapters.forecast.forecast_schedule import ForecastSchedule
from ..adapters.forecast.auto_schedule import AUTO, DEFAULT_SPEEDUP, MAX_SPEEDUP
from ..adapters.forecast.forecast_settings import CUSTOM, PRESETS, ForecastSettings
from ..adapters.methods import FORECAST
from .cache_node import CATEGORY
from .input_checks import schema_problem
from .plain_errors import plain_errors
from .wrappers import patched_model

NODE_NAME = FORECAST_SCOPE.node_name
FORECAST_DEFAULTS, SCHEDULE_DEFAULTS = Forecaster(), ForecastSchedule()


def _custom_inputs() -> list[io.Input]:
    f, s = FORECAST_DEFAULTS, SCHEDULE_DEFAULTS
    return [
        io.Combo.Input("forecast", options=list(FORECASTS), default=f.forecast, tooltip=(
            "How a skipped step is forecast: linear or quadratic from the last computed steps (the presets use "
            "linear), or spectrum, a curve fitted to all computed steps as published.")),
        io.Int.Input("chebyshev_degree", default=f.chebyshev_degree, min=1, max=8, display_name="spectrum fit degree",
                     tooltip="spectrum only: the degree of the curve fitted to the computed steps (4 as published). "
                             "Rarely changed."),
        io.Float.Input("ridge_lambda", default=f.ridge_lambda, min=1e-6, max=100.0, step=0.01,
                       display_name="ridge strength", tooltip=(
                           "spectrum only: how strongly the fit is held smooth (0.1 as published). Raise it for a "
                           "smoother, more cautious forecast.")),
        io.Float.Input("blend_w", default=f.blend_w, min=0.0, max=1.0, step=0.05, display_name="spectrum fit share",
                       tooltip=("spectrum only: the fitted curve's share against a linear forecast (1 as published; "
                                "the official code suggests 0.5 to 1).")),
        io.Float.Input("extrapolation", default=f.extrapolation, min=0.0, max=1.0, step=0.05, tooltip=(
            "How far the forecast follows the last computed steps' trend: 1 in full, 0 holds the last computed "
            "step. Most presets use 0.7; lower it if forecast steps overshoot.")),
        io.Combo.Input("target", options=list(TARGETS), default=f.target, display_name="forecast target", tooltip=(
            "What is forecast: feature, the final layer's input (as published), or output, the model's prediction "
            "itself, which keeps far less history (turbo_4_of_8 forecasts the output).")),
        io.Int.Input("warmup_steps", default=s.warmup_steps, min=0, max=1000, display_name="warmup steps",
                     tooltip="Steps at the start that are always computed, before any step is forecast."),
        io.Float.Input("window_size", default=s.window_size, min=1.0, max=100.0, step=0.25,
                       display_name="window (one step computed in N)", tooltip=(
                           "After the warmup, one step in every N is computed and the others forecast (N rounded "
                           "down). Raise it for speed, lower it for a closer image.")),
        io.Float.Input("window_growth", default=s.window_growth, min=0.0, max=100.0, step=0.25,
                       display_name="window growth", tooltip=(
                           "How much N grows after each computed step (0: a fixed window). Growth forecasts more of "
                           "the later steps.")),
        io.Int.Input("final_computed_steps", default=s.final_computed_steps, min=0, max=1000,
                     display_name="last steps always computed", tooltip=(
                         "Steps at the end that are always computed: the last, low-noise steps are where a forecast "
                         "costs most. The presets compute 1 or none; none as published.")),
    ]


def _auto_inputs() -> list[io.Input]:
    return [io.Float.Input("speedup", default=DEFAULT_SPEEDUP, min=1.0, max=MAX_SPEEDUP, step=0.5, tooltip=(
        "How many times fewer model calls than steps: 4 at 52 steps computes 13. The plan spreads them over the "
        "run's own steps and forecasts the rest; the node shows what it computed."))]


# Where the fixed presets' figures hold, from their standings: elsewhere a preset computes other steps and can
# land farther than fewer steps, where auto does not (docs/benchmarks.md, "Forecast auto").
PRESET_TOOLTIP = (
    f"Which forecast and schedule run: auto plans any step count for the speedup you set; turbo_* are measured at "
    f"{preset_measured_steps('turbo_5_of_8')} steps, raw_* at {preset_measured_steps('raw_1_in_4')}: at other "
    "counts use auto. spectrum_paper* as published; custom shows every setting.")


def settings_from(preset: dict) -> ForecastSettings:
    """The node's ``preset`` input (the chosen key and, for ``custom``, its inputs) as settings."""
    name = preset["preset"]
    if name == AUTO:
        return ForecastSettings.auto(preset["speedup"])
    if name != CUSTOM:
        return ForecastSettings.from_preset(name)
    forecast = Forecaster(preset["forecast"], preset["chebyshev_degree"], preset["ridge_lambda"],
                          preset["blend_w"], preset["extrapolation"], preset["target"])
    schedule = ForecastSchedule(preset["warmup_steps"], preset["window_size"], preset["window_growth"],
                                preset["final_computed_steps"])
    return ForecastSettings(CUSTOM, forecast, schedule)


class CacheDiTSpectrum(io.ComfyNode):
    SCOPE = FORECAST_SCOPE

    @classmethod
    def define_schema(cls) -> io.Schema:
        families = ", ".join(dict.fromkeys(f.model for f in cls.SCOPE.families))
        options = [io.DynamicCombo.Option(name, []) for name in PRESETS]
        options.append(io.DynamicCombo.Option(AUTO, _auto_inputs()))
        options.append(io.DynamicCombo.Option(CUSTOM, _custom_inputs()))
        return io.Schema(
            node_id="CacheDiTSpectrum",
            display_name=NODE_NAME,
            category=CATEGORY,
            description=(
                f"Speeds up sampling of {families} by forecasting whole model calls (Spectrum, CVPR 2026, and "
                "simpler forecasts): on forecast steps the blocks are skipped and the final layer runs on a "
                "forecast of its input from the computed steps, one forecast per CFG stream. Put it between the "
                "model loader and the sampler. No preset is measured on real weights; after each run the node "
                "shows which steps were forecast and why."),
            inputs=[io.Model.Input("model", tooltip=f"A {families} model."),
                    io.DynamicCombo.Input("preset", options=options, tooltip=PRESET_TOOLTIP)],
            outputs=[io.Model.Output(tooltip="The model with whole-call forecasting; the input model is unchanged.")],
            hidden=[io.Hidden.unique_id],
            not_idempotent=True,   # the MODEL carries this node's id (see the DBCache nodes)
        )

    @classmethod
    def validate_inputs(cls, **kwargs) -> bool | str:
        # At queue time, by name: a preset that is none of the options (ComfyUI drops it without a word) and
        # the custom settings' types, bounds and choices (with a validator ComfyUI leaves them to it).
        return schema_problem(cls.define_schema().inputs, kwargs) or True

    @classmethod
    def execute(cls, model, preset) -> io.NodeOutput:
        with plain_errors():
            return io.NodeOutput(patched_model(model, cls.SCOPE, FORECAST, settings_from(preset),
                                               str(cls.hidden.unique_id or "")))
