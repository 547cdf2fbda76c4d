"""The forecast-error benchmark's per-step error (benchmarks/forecast_error.py), on feature paths whose
forecast is known: zero where the node's fit represents the path exactly, above zero where it cannot."""

from __future__ import annotations


import pytest
import torch

from krea2_cachedit.adapters.forecast.feature_forecast import Forecaster
from krea2_cachedit.adapters.forecast.forecast_schedule import ForecastSchedule
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings

from benchmarks import forecast_error

A, B, C = (torch.randn(2, 9, 6, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
           for seed in (1, 2, 3))


def path(steps: int, degree: int) -> list[torch.Tensor]:
    """A feature that moves as a polynomial of the step index, of ``degree`` 1 or 2."""
    return [A + s * B + (s * s * C if degree == 2 else 0) for s in range(steps)]


# A linear forecast in full over uneven gaps (computed 0, 1, 4, 7): the path's own line wherever it forecasts.
UNEVEN = ForecastSettings("custom", Forecaster("linear"), ForecastSchedule(2, 3.0, 0.0, 1))


def test_a_linear_path_under_the_linear_forecast_has_no_error():
    mask = UNEVEN.schedule.computed(8)
    errors = forecast_error.open_loop_errors(path(8, 1), mask, UNEVEN.forecast)
    assert sorted(errors) == [2, 3, 5, 6]
    assert max(errors.values()) < 1e-12, errors


def test_a_parabola_under_the_linear_forecast_has_an_error_at_every_forecast_step():
    errors = forecast_error.open_loop_errors(path(8, 2), UNEVEN.schedule.computed(8), UNEVEN.forecast)
    assert sorted(errors) == [2, 3, 5, 6]
    assert min(errors.values()) > 1e-3, errors


def test_a_share_of_the_extrapolation_errs_on_a_line_by_the_share_it_leaves_out():
    """At 0.6 a linear forecast on a line falls short by 0.4 of the line's move past the last computed step."""
    short = ForecastSettings("custom", Forecaster("linear", extrapolation=0.6), UNEVEN.schedule)
    errors = forecast_error.open_loop_errors(path(8, 1), UNEVEN.schedule.computed(8), short.forecast)
    exact = {2: A + 2 * B, 5: A + 5 * B}
    for step, last in ((2, A + 1 * B), (5, A + 4 * B)):
        assert errors[step] == pytest.approx(float((0.4 * (exact[step] - last)).norm() / exact[step].norm()))


def test_a_parabola_under_the_quadratic_forecast_has_no_error_and_the_change_is_the_steps_move():
    mask = [1, 1, 1, 1, 0, 0, 0, 1]   # evenly spaced points before the forecasts
    errors = forecast_error.open_loop_errors(path(8, 2), mask, Forecaster("quadratic"))
    assert sorted(errors) == [4, 5, 6] and max(errors.values()) < 1e-12, errors
    # A step the schedule forecasts is computed while the history holds too few points (the node's order).
    early = forecast_error.open_loop_errors(path(8, 2), [1, 0, 0, 0, 0, 0, 0, 1], Forecaster("quadratic"))
    assert sorted(early) == [3, 4, 5, 6]
    change = forecast_error.consecutive_change(path(4, 1))
    assert change[0] is None
    assert change[1:] == pytest.approx([float(B.norm() / (A + s * B).norm()) for s in range(3)])


def test_the_open_loop_reads_what_each_settings_target_forecasts():
    """The features for target ``feature``, the final layer's outputs for ``output``: here a line and a parabola."""
    reference = forecast_error.Sampled(latent=None, x=[], denoised=[], features=path(8, 1), outputs=path(8, 2))
    output = ForecastSettings("custom", Forecaster("linear", target="output"), UNEVEN.schedule)
    on_feature = forecast_error.open_loop([reference], UNEVEN, img_tokens=9)
    on_output = forecast_error.open_loop([reference], output, img_tokens=9)
    assert on_feature["forecast_steps"] == on_output["forecast_steps"] == [2, 3, 5, 6]
    assert max(on_feature["rel_err"].values()) < 1e-12 and min(on_output["rel_err"].values()) > 1e-3


def test_each_regime_samples_the_peer_benchmarks_model():
    """The same regimes as the peer benchmark's Krea-2 ones, each on the same model (8 steps: the Turbo proxy)."""
    from devkit.krea2_prompts import TURBO_PROXY_MODEL
    from benchmarks.peers.cases import KREA2, REGIMES as PEER_REGIMES, regimes_of

    assert forecast_error.REGIMES == {name: (PEER_REGIMES[name].steps, PEER_REGIMES[name].cfg, PEER_REGIMES[name].model)
                                      for name in regimes_of(KREA2)}
    assert forecast_error.REGIMES["turbo"][2] == TURBO_PROXY_MODEL


@pytest.mark.tier("proxy")
def test_each_regime_loads_its_build(comfy_root, proxy, turbo_proxy):
    builds = {}
    loaded = {name: forecast_error.regime_build(model, comfy_root, builds).checkpoint
              for name, (_, _, model) in forecast_error.REGIMES.items()}
    assert loaded == {"turbo": turbo_proxy.checkpoint, "raw": proxy.checkpoint}
