"""The Forecast node's ``auto`` plan: the calls a speedup asks for, laid over the run with short ends, a share per gap
from the run's sigmas; at share 0 it is exactly fewer steps on the computed steps' sigmas (no ComfyUI: a small seeded diffusers
Krea-2 stepped by Euler, as tests/forecast/test_forecast_run.py)."""

from __future__ import annotations

import pytest
import torch

from cache_runs import COND, SIGMAS, STEPS, Stream, forward, record_of, run_single
from krea2_cachedit.adapters.forecast.auto_schedule import (FIRST_GAP, LAST_GAP, SHARE_RAMP, UNGUIDED_SHARE_RAMP,
                                                             AutoSchedule, auto_calls,
                                                             computed_steps, gap_share)
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run


@pytest.mark.parametrize(("steps", "speedup", "calls"), [
    (52, 4, 13), (20, 3, 6), (28, 6, 4), (20, 6, 3), (8, 1.6, 5), (8, 8 / 6, 6), (8, 1, 8), (8, 50, 1), (40, 4, 10)])
def test_a_speedup_computes_the_most_calls_that_reach_it(steps, speedup, calls):
    assert auto_calls(steps, speedup) == calls
    assert calls == 1 or steps / calls >= speedup - 1e-9   # one call at least, even where it cannot reach it
    assert calls == steps or steps / (calls + 1) < speedup
    computed = AutoSchedule(speedup).computed(steps)
    assert sum(computed) == calls and computed[0], "the first step is always computed"


@pytest.mark.parametrize(("steps", "calls", "chosen"), [
    (20, 3, [0, 7, 15]), (8, 5, [0, 1, 3, 5, 7]), (8, 4, [0, 2, 4, 6]), (8, 2, [0, 4]), (20, 5, [0, 4, 8, 13, 17]),
    (52, 13, [0, 4, 8, 12, 16, 20, 24, 28, 33, 37, 41, 45, 49]), (8, 8, list(range(8))), (8, 1, [0])])
def test_the_computed_steps_keep_a_steady_spacing_with_a_short_first_gap_and_a_short_tail(steps, calls, chosen):
    assert computed_steps(steps, calls) == chosen
    assert [s for s, c in enumerate(AutoSchedule(steps / calls).computed(steps)) if c] == chosen


@pytest.mark.parametrize("steps", [8, 20, 28, 40, 52])
def test_the_ends_are_shorter_than_the_spacing_at_every_call_count(steps):
    for calls in range(2, steps + 1):
        chosen = computed_steps(steps, calls)
        assert len(set(chosen)) == calls and chosen == sorted(chosen) and chosen[-1] < steps, (steps, calls)
        spacing = steps / (FIRST_GAP + calls - 2 + LAST_GAP)
        assert abs(chosen[1] - FIRST_GAP * spacing) <= 0.5 + 1e-9 or spacing * FIRST_GAP < 1, (steps, calls)
        assert abs(steps - chosen[-1] - LAST_GAP * spacing) <= 0.5 + 1e-9 or spacing < 1.5, (steps, calls)


def test_a_gap_follows_its_trend_in_full_when_short_and_holds_when_long():
    full, hold = SHARE_RAMP
    assert gap_share(full) == gap_share(0.0) == 1.0 and gap_share(hold) == gap_share(1.0) == 0.0
    assert gap_share((full + hold) / 2) == pytest.approx(0.5)
    # 20 steps at speedup 4 on sigmas that fall fast at the end: the first gap holds (one computed step gives
    # no trend), the early short gaps follow it, the last, long one holds.
    sigmas = [1.0 - (step / 20) ** 4 for step in range(21)]
    plan = plan_forecast_run(ForecastSettings.auto(4), 20, sigmas)
    shares = plan.method_summary()["gap_shares"]
    assert shares[0] == 0.0 and shares[1] == 1.0 and shares[-1] == 0.0
    ends = [0, 4, 8, 13, 17, 20]
    assert shares == [round(gap_share(sigmas[a] - sigmas[b]), 3) if a else 0.0 for a, b in zip(ends, ends[1:])]


def test_a_run_at_cfg_1_follows_its_trend_further():
    """One conditioning per step (CFG 1): the unguided ramp, whose gaps follow their trend up to twice as far in
    sigma; a gap a guided run holds goes part of the way."""
    full, hold = UNGUIDED_SHARE_RAMP
    assert full > SHARE_RAMP[0] and hold > SHARE_RAMP[1]
    assert AutoSchedule(4).shares(8, SIGMAS.tolist(), guided=False) == pytest.approx(
        [0.0] * 5 + [gap_share(0.5, UNGUIDED_SHARE_RAMP)] * 3)
    assert AutoSchedule(4).shares(8, SIGMAS.tolist()) == [0.0] * 8
    guided = plan_forecast_run(ForecastSettings.auto(2), STEPS, SIGMAS.tolist())
    unguided = plan_forecast_run(ForecastSettings.auto(2), STEPS, SIGMAS.tolist(), guided=False)
    assert guided.mask == unguided.mask, "the CFG changes the shares, never the computed steps"
    assert unguided.gap_shares() == [0.0, 1.0, 1.0, 1.0] and guided.gap_shares() == [0.0, 0.75, 0.75, 0.75]


def test_the_record_and_log_line_say_the_plan():
    plan = plan_forecast_run(ForecastSettings.auto(2), STEPS, SIGMAS.tolist())
    summary = plan.method_summary()
    assert summary["preset"] == "auto" and summary["speedup"] == 2 and summary["computed_steps"] == [0, 2, 4, 6]
    assert summary["gap_shares"] == [0.0, 0.75, 0.75, 0.75]   # each later gap spans 0.25 of the sigma range
    assert plan.method_text({}) == ("forecast linear (target output, share per gap 0/0.75/0.75/0.75) "
                                    "(preset auto, speedup 2)")


def test_a_speedup_out_of_bounds_is_refused_naming_it():
    for speedup in (0.5, float("nan"), 51):
        with pytest.raises(ValueError, match="speedup must be from 1"):
            ForecastSettings.auto(speedup)


def test_holding_every_gap_is_exactly_fewer_steps_on_the_same_sigmas(transformer):
    """8 steps at speedup 4: steps 0 and 4 computed; the first gap holds (no trend yet), the second spans half
    the sigma range and holds too. Euler over held outputs is one Euler step per gap: the run lands where two
    plain steps on sigmas 1, 0.5, 0 land."""
    settings = ForecastSettings.auto(4)
    assert plan_forecast_run(settings, STEPS, SIGMAS.tolist()).method_summary()["gap_shares"] == [0.0, 0.0]
    stream = Stream(COND, 1)
    record = record_of(run_single(transformer, settings, stream))
    assert record.forecast_steps == [1, 2, 3, 5, 6, 7]
    fewer = Stream(COND, 1)
    for sigma, next_sigma in ((1.0, 0.5), (0.5, 0.0)):
        fewer.advance(forward(transformer, fewer.x, fewer.context, sigma), sigma, next_sigma)
    torch.testing.assert_close(stream.x, fewer.x, rtol=1e-5, atol=1e-5)


def test_a_forecast_gap_follows_the_trend_by_its_share(transformer):
    """8 steps at speedup 2: 0 2 4 6 computed; the first gap holds step 0's output, each later gap (a quarter of
    the sigma range) extrapolates the last two computed outputs 0.75 of the way."""
    stream = Stream(COND, 1)
    record = record_of(run_single(transformer, ForecastSettings.auto(2), stream))
    assert record.forecast_steps == [1, 3, 5, 7]
    out = stream.outputs
    torch.testing.assert_close(out[1], out[0], rtol=0, atol=0)
    for step, (before, last) in ((3, (0, 2)), (5, (2, 4)), (7, (4, 6))):
        torch.testing.assert_close(out[step], out[last] + 0.75 * 0.5 * (out[last] - out[before]), rtol=1e-5, atol=1e-5,
                                   msg=f"step {step}")


def test_auto_forecasts_the_feature_where_the_final_layer_gives_more_than_the_prediction():
    """MiniMax H3's final layer returns video and audio apart: ``auto`` forecasts its input there; any other
    setting runs as it was set."""
    from krea2_cachedit.adapters.families.registry import SUPPORTED

    families = {f.model: f for f in SUPPORTED}
    auto = ForecastSettings.auto(2)
    assert auto.for_family(families["Krea-2"]).forecast.target == "output"
    # ERNIE-Image's final layer is its ``final_norm``, followed by an affine ``final_linear``: output too.
    assert auto.for_family(families["ERNIE-Image"]).forecast.target == "output"
    assert auto.for_family(families["MiniMax H3"]).forecast.target == "feature"
    custom = ForecastSettings.from_preset("turbo_4_of_8")
    assert custom.for_family(families["MiniMax H3"]) is custom
