"""The DPCache-style planner the forecast benchmark measures as a peer (benchmarks/peers/dpcache.py): its dynamic
program finds the cheapest plan of every size, the cost it prices for ``auto`` is the node's own forecast, and a
plan runs on the node as planned."""

from __future__ import annotations

import itertools

import pytest
import torch

from benchmarks.peers import dpcache
from krea2_cachedit.adapters.forecast.auto_schedule import AutoSchedule
from krea2_cachedit.adapters.forecast.feature_forecast import FeatureHistory
from krea2_cachedit.adapters.forecast.forecast_settings import AUTO_FORECAST, ForecastSettings, plan_forecast_run

STEPS = 7


def calibration(seed: int = 0):
    """Two runs' outputs that drift and turn (a random walk per image), and shifted sigmas from 1 to 0."""
    generator = torch.Generator().manual_seed(seed)
    runs = [torch.randn(STEPS, 3, 4, generator=generator).cumsum(dim=0) for _ in range(2)]
    sigmas = [1 - (t / STEPS) ** 0.7 for t in range(STEPS + 1)]
    return [list(run) for run in runs], sigmas


def plans(calls: int):
    return [(0, *rest) for rest in itertools.combinations(range(1, STEPS), calls - 1)]


def auto_path_cost(costs: dict, computed) -> float:
    keys = [-1, *computed, STEPS]
    return sum(costs[(keys[n - 1], keys[n], keys[n + 1])] for n in range(1, len(keys) - 1))


@pytest.mark.parametrize("calls", range(1, STEPS + 1))
def test_the_program_finds_the_cheapest_plan_of_every_size(calls):
    runs, sigmas = calibration()
    holds, autos = dpcache.hold_costs(runs), dpcache.auto_costs(runs, sigmas)
    chosen, cost = dpcache.plan_hold(holds, calls)
    assert len(chosen) == calls and chosen[0] == 0
    assert cost == pytest.approx(min(dpcache.path_cost_hold(holds, plan) for plan in plans(calls)))
    assert cost == pytest.approx(dpcache.path_cost_hold(holds, chosen))
    chosen, cost = dpcache.plan_auto(autos, STEPS, calls)
    assert len(chosen) == calls and chosen[0] == 0
    assert cost == pytest.approx(min(auto_path_cost(autos, plan) for plan in plans(calls)))
    assert cost == pytest.approx(auto_path_cost(autos, chosen))


def test_holding_computes_where_the_output_jumps():
    runs = [[torch.zeros(2, 2) if t < 4 else torch.ones(2, 2) for t in range(STEPS)]]
    assert dpcache.plan_hold(dpcache.hold_costs(runs), 2)[0] == [0, 4]


@pytest.mark.parametrize("computed", [(0, 2, 5), (0, 1, 3, 6), (0, 4)])
def test_the_auto_cost_is_the_nodes_forecast(computed):
    """Each step between computed ones priced as the node forecasts it (its history, at the share its plan gives
    the gap), against the run's own output there."""
    runs, sigmas = calibration(1)
    shares = dpcache.planned_schedule(computed, STEPS, dpcache.AUTO).shares(STEPS, sigmas)
    expected = 0.0
    for run in runs:
        history = FeatureHistory(AUTO_FORECAST, STEPS)
        for step in range(STEPS):
            if step in computed:
                history.add(step, run[step])
            else:
                error = (history.forecast(step, shares[step]) - run[step]).abs().mean().item()
                expected += error / len(runs)
    assert auto_path_cost(dpcache.auto_costs(runs, sigmas), computed) == pytest.approx(expected)


def test_a_plan_runs_on_the_node_as_planned():
    steps, sigmas = 20, [1 - (t / 20) ** 0.8 for t in range(21)]
    even = AutoSchedule(4.0)
    chosen = [step for step, on in enumerate(even.computed(steps)) if on]
    planned = plan_forecast_run(ForecastSettings("auto", AUTO_FORECAST, dpcache.planned_schedule(chosen, steps, "auto")),
                                steps, sigmas)
    auto = plan_forecast_run(ForecastSettings.auto(4.0), steps, sigmas)
    assert (planned.mask, planned.shares) == (auto.mask, auto.shares)
    held = plan_forecast_run(ForecastSettings("dpcache_style", AUTO_FORECAST,
                                              dpcache.planned_schedule([0, 3, 11], steps, dpcache.HOLD)), steps, sigmas)
    assert [step for step, on in enumerate(held.mask) if on] == [0, 3, 11] and set(held.shares) == {0.0}
    with pytest.raises(ValueError, match="does not fit"):
        dpcache.planned_schedule([0, 3, 25], steps, dpcache.HOLD).computed(steps)
