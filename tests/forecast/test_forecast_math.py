"""Whole-call forecasting's schedule and forecasts, as facts (no model).

The schedule's figures are the official Spectrum code's (``hanjq17/Spectrum``: its README says
``window_size=2`` with ``flex_window=0.75`` makes 14 full passes of 50 steps, 3.0 makes 10); the
forecasts are checked against what they are defined to be.
"""

from __future__ import annotations

import pytest
import torch

from krea2_cachedit.adapters.forecast.feature_forecast import FeatureHistory, Forecaster, chebyshev_row
from krea2_cachedit.adapters.forecast.forecast_schedule import ForecastSchedule
from krea2_cachedit.adapters.forecast.forecast_settings import PRESETS, ForecastSettings, plan_forecast_run


def computed(schedule: ForecastSchedule, steps: int) -> list[int]:
    return [step for step, compute in enumerate(schedule.computed(steps)) if compute]


@pytest.mark.parametrize("alpha, passes, steps", [
    (0.75, 14, [0, 1, 2, 3, 4, 6, 8, 11, 15, 20, 25, 31, 38, 46]),
    (3.0, 10, [0, 1, 2, 3, 4, 6, 11, 19, 30, 44]),
])
def test_the_official_schedule_computes_what_its_readme_says(alpha, passes, steps):
    schedule = ForecastSchedule(warmup_steps=5, window_size=2.0, window_growth=alpha)
    assert computed(schedule, 50) == steps and len(steps) == passes


def test_the_schedule_follows_the_runs_own_step_count():
    schedule = ForecastSchedule(warmup_steps=5, window_size=2.0, window_growth=0.75)
    assert computed(schedule, 8) == [0, 1, 2, 3, 4, 6]
    assert computed(schedule, 52)[:14] == computed(schedule, 50)[:14]
    assert len(computed(schedule, 52)) == 14


def test_final_computed_steps_keep_the_end_computed():
    assert computed(ForecastSchedule(2, 2.0, 0.0, final_computed_steps=1), 8) == [0, 1, 3, 5, 7]
    assert computed(ForecastSchedule(2, 3.0, 0.0, final_computed_steps=1), 8) == [0, 1, 4, 7]
    assert computed(ForecastSchedule(5, 2.0, 0.75, final_computed_steps=3), 50)[-3:] == [47, 48, 49]


@pytest.mark.parametrize("preset, steps, count", [
    ("turbo_5_of_8", 8, 5), ("turbo_4_of_8", 8, 4), ("raw_1_in_4", 52, 13), ("raw_1_in_5", 52, 11),
    ("raw_8_of_52", 52, 8),
    ("spectrum_paper", 50, 14), ("spectrum_paper_fast", 50, 10)])
def test_each_preset_computes_what_its_summary_says(preset, steps, count):
    assert sum(plan_forecast_run(ForecastSettings.from_preset(preset), steps).mask) == count
    assert f"{steps} steps: {count} computed" in PRESETS[preset].summary


@pytest.mark.parametrize("bad", [dict(window_size=0.5), dict(window_growth=-1.0), dict(warmup_steps=-1),
                                 dict(window_size=float("nan"))])
def test_a_bad_schedule_is_refused_naming_the_input(bad):
    name = next(iter(bad))
    with pytest.raises(ValueError, match=name):
        ForecastSchedule(**bad)


def test_chebyshev_rows_are_the_t_polynomials():
    for tau in (-1.0, -0.3, 0.0, 0.7, 1.0):
        row = chebyshev_row(tau, 4)
        expected = [1.0, tau, 2 * tau ** 2 - 1, 4 * tau ** 3 - 3 * tau, 8 * tau ** 4 - 8 * tau ** 2 + 1]
        assert row == pytest.approx(expected)


def polynomial_path(step: float) -> torch.Tensor:
    """A feature path of degree 3 in the step, in two channels: below the 5 bases of m = 4."""
    t = torch.tensor(step, dtype=torch.float64)
    return torch.stack([1 + 0.1 * t - 0.003 * t ** 2 + 1e-5 * t ** 3, 2 - 0.01 * t + 4e-4 * t ** 2])


def test_a_polynomial_below_the_basis_size_is_forecast_exactly():
    history = FeatureHistory(Forecaster("spectrum", chebyshev_degree=4, ridge_lambda=1e-12, blend_w=1.0), 50)
    for step in (0, 1, 2, 3, 4, 6, 8, 11, 15):
        history.add(step, polynomial_path(step))
    for step in (5, 9, 13, 18):
        torch.testing.assert_close(history.forecast(step), polynomial_path(step), rtol=1e-8, atol=1e-8)


def test_the_ridge_shrinks_a_fit_that_the_points_do_not_pin_down():
    """With lambda 0.1 (the paper's), a path the points do not pin down is not fitted exactly: the ridge
    trades fit for stability, which is why the blend with the local extrapolation exists."""
    history = FeatureHistory(Forecaster("spectrum", 4, 0.1, 1.0), 50)
    for step in (0, 1, 2):
        history.add(step, polynomial_path(step))
    assert not torch.allclose(history.forecast(3), polynomial_path(3), rtol=1e-3, atol=1e-3)


def test_linear_and_quadratic_extrapolate_from_the_last_computed_steps():
    linear = FeatureHistory(Forecaster("linear"), 8)
    quadratic = FeatureHistory(Forecaster("quadratic"), 8)
    path = lambda s: torch.tensor([3.0 + 2.0 * s - 0.5 * s * s], dtype=torch.float64)  # noqa: E731
    for step in (0, 2, 4):
        linear.add(step, path(step))
        quadratic.add(step, path(step))
    # Linear: the last two points' line, at the step (in units of their spacing).
    assert float(linear.forecast(5)) == pytest.approx(float(path(4) + (path(4) - path(2)) / 2))
    assert float(quadratic.forecast(6)) == pytest.approx(float(path(6)))   # exact for a parabola on even steps


def test_extrapolation_goes_its_share_of_the_way_and_zero_holds():
    path = lambda s: torch.tensor([3.0 + 2.0 * s], dtype=torch.float64)  # noqa: E731
    shares = {}
    for share in (0.0, 0.6, 1.0):
        history = FeatureHistory(Forecaster("linear", extrapolation=share), 8)
        for step in (0, 2):
            history.add(step, path(step))
        shares[share] = float(history.forecast(5))
    assert shares[1.0] == pytest.approx(float(path(5)))            # a line, extrapolated in full
    assert shares[0.0] == pytest.approx(float(path(2)))            # the last computed step, held
    assert shares[0.6] == pytest.approx(float(path(2)) + 0.6 * (float(path(5)) - float(path(2))))


def test_a_linear_forecast_holds_its_one_computed_step_and_never_hands_out_its_own_tensor():
    history = FeatureHistory(Forecaster("linear"), 8)
    first = torch.tensor([1.0, -2.0])
    history.add(0, first)
    assert history.ready
    held = history.forecast(1)
    assert torch.equal(held, first) and held.data_ptr() != first.data_ptr()
    assert not FeatureHistory(Forecaster("quadratic"), 8).ready   # its order needs three


@pytest.mark.parametrize("share", [-0.1, 1.5, float("nan")])
def test_an_extrapolation_outside_zero_to_one_is_refused_naming_it(share):
    with pytest.raises(ValueError, match="extrapolation"):
        Forecaster("linear", extrapolation=share)


def test_the_blend_is_the_convex_mix_of_the_two():
    spectral = FeatureHistory(Forecaster("spectrum", 4, 0.1, 1.0), 20)
    linear = FeatureHistory(Forecaster("linear"), 20)
    mixed = FeatureHistory(Forecaster("spectrum", 4, 0.1, 0.3), 20)
    for step in (0, 1, 2, 3, 5):
        for history in (spectral, linear, mixed):
            history.add(step, polynomial_path(step) + 0.01 * step ** 2)
    expected = 0.7 * linear.forecast(7) + 0.3 * spectral.forecast(7)
    torch.testing.assert_close(mixed.forecast(7), expected, rtol=1e-12, atol=1e-12)


def test_a_forecast_keeps_the_features_dtype_and_the_history_its_size():
    history = FeatureHistory(Forecaster("spectrum"), 50)
    for step in range(12):
        history.add(step, torch.full((2, 3), float(step), dtype=torch.bfloat16))
    assert history.forecast(13).dtype == torch.bfloat16
    assert len(history._recent) == 0, "the paper's predictor (w 1) has no local share: no recent feature kept"
    assert tuple(history._xth.shape) == (5, 2, 3) and history._xth.dtype == torch.bfloat16
    assert history.held_bytes() == (5 + 1) * 6 * 2, "five bf16 accumulations and the first feature"
    blended = FeatureHistory(Forecaster("spectrum", 4, 0.1, 0.5), 50)
    for step in range(12):
        blended.add(step, torch.full((2, 3), float(step), dtype=torch.float16))
    assert len(blended._recent) == 2, "the local extrapolation keeps the last two computed features"
    assert blended._xth.dtype == torch.float32, "float16 accumulates in float32 (its range)"
    assert blended.held_bytes() == 5 * 6 * 4 + 6 * 2 + 2 * 6 * 2
