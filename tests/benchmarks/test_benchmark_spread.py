"""The demo's measurement logic (benchmarks/spread.py) on plain numbers: per-repeat ratios, their
spread, when to stop repeating, and verdicts only where the spread supports one."""

from __future__ import annotations

import sys
from dataclasses import astuple

import pytest

from benchmarks.spread import (Spread, above_ideal, at_least, caching_efficiency, interval_at_least, keep_repeating,
                               median_interval, paired_ratios, show, spread, within)


def test_per_repeat_ratios_cancel_drift_that_hits_both_cases():
    uncached = [10.0, 20.0, 10.0, 20.0]   # the machine got twice as slow in every other repeat
    cached = [5.0, 10.0, 5.0, 10.0]
    s = spread(paired_ratios(uncached, cached))
    assert (s.median, s.low, s.high, s.half_width) == (2.0, 2.0, 2.0, 0.0)
    with pytest.raises(ValueError, match="unpaired"):
        paired_ratios([1.0, 2.0], [1.0])


def test_the_spread_is_the_interquartile_range():
    s = spread([0.9, 1.0, 1.1])
    assert s.median == pytest.approx(1.0)
    assert (s.low, s.high) == (pytest.approx(0.95), pytest.approx(1.05))
    assert s.half_width == pytest.approx(0.05)


def test_repeats_go_on_until_the_minimum_then_until_stable_or_out_of_time():
    wide, narrow = Spread(1.0, 0.9, 1.1), Spread(1.0, 0.99, 1.01)
    assert keep_repeating(2, [narrow], elapsed_s=0, budget_s=100)        # under the minimum of 3
    assert not keep_repeating(3, [narrow], elapsed_s=0, budget_s=100)    # stable
    assert keep_repeating(3, [narrow, wide], elapsed_s=50, budget_s=100)  # one row is not
    assert not keep_repeating(3, [wide], elapsed_s=100, budget_s=100)    # out of time
    assert keep_repeating(4, [narrow], elapsed_s=500, budget_s=100, min_repeats=5)


def test_a_range_that_straddles_the_margin_gives_no_verdict():
    assert at_least(Spread(0.93, 0.91, 0.95), 0.90) == "ok"
    assert at_least(Spread(0.85, 0.83, 0.87), 0.90) == "BELOW"
    straddling = Spread(0.92, 0.86, 0.98)
    assert at_least(straddling, 0.90) == "undecided"
    assert show("undecided", straddling) == "undecided (spread +-6.5%)"
    assert within(Spread(0.05, 0.02, 0.08), 0.15) == "ok"
    assert within(Spread(-0.229, -0.25, -0.20), 0.15) == "OVER"
    assert within(Spread(-0.14, -0.20, -0.10), 0.15) == "undecided"
    assert show("undecided", Spread(-0.14, -0.20, -0.10), points=True) == "undecided (spread +-6.0%)"
    # A range wider than the margin it is judged against decides nothing, even wholly on one side.
    assert at_least(Spread(2.0, 1.5, 3.0), 0.90) == "undecided"
    assert within(Spread(1.148, 0.20, 2.30), 0.15) == "undecided"


def test_the_printed_spread_reaches_the_farther_quartile_when_they_lie_unevenly():
    # A first demo on a busy machine: three repeats, one of them slowed by the other job. Half the
    # interquartile range printed 107% +-31.8% of the ideal while the lower quartile (106.5%) alone
    # flagged the row as faster than its ideal; the farther quartile makes the flag follow the print.
    slowed = spread([1.06, 1.07, 2.30])
    assert (slowed.low, slowed.median) == (pytest.approx(1.065), 1.07)
    assert slowed.half_range == pytest.approx(0.615) and slowed.bounds[0] < 1.0
    assert not above_ideal(slowed)
    assert show("undecided", slowed) == "undecided (spread +-57.5%)"
    # 93% +- 6%: the lower quartile (91%) clears the 90% floor, the farther one (99%) says how unsure it is.
    uneven = spread([0.90, 0.91, 0.91, 0.93, 0.99, 0.99, 0.99])
    assert uneven.low >= 0.90 and uneven.bounds == (pytest.approx(0.87), pytest.approx(0.99))
    assert at_least(uneven, 0.90) == "undecided"
    assert within(Spread(0.13, 0.12, 0.18), 0.15) == "undecided"   # +13% +- 5%: up to 18%
    assert above_ideal(Spread(1.06, 1.04, 1.07))                     # 106% +- 2%: wholly above


def test_a_row_faster_than_its_ideal_beyond_the_noise_is_a_measurement_problem():
    assert above_ideal(Spread(1.19, 1.12, 1.25))
    assert not above_ideal(Spread(1.03, 0.97, 1.08))  # above 100%, but within its spread
    assert not above_ideal(Spread(0.95, 0.93, 0.97))


def test_the_demo_checks_print_verdicts_only_where_the_spread_supports_them():
    speedup = pytest.importorskip("benchmarks.speedup")
    rows = [{"case": "noisy", "ideal": 1.5, "efficiency_spread": Spread(0.92, 0.86, 0.98),
             "estimate_spread": Spread(-0.229, -0.30, -0.10)},
            {"case": "too fast", "ideal": 1.5, "efficiency_spread": Spread(1.5, 1.3, 1.6), "estimate_spread": None},
            {"case": "good", "ideal": 1.5, "efficiency_spread": Spread(0.95, 0.94, 0.96),
             "estimate_spread": Spread(0.01, 0.0, 0.02)}]
    assert speedup.check_lines(rows) == [
        "check: noisy: time estimate -22.9% (within 15%: undecided (spread +-12.9%))",
        "check: noisy: 92% of the ideal speedup over caching off (at least 90%: undecided (spread +-6.5%))",
        "check: too fast: 150% of the ideal speedup over caching off (at least 90%: noise? (faster than its ideal: not a result))",
        "check: good: time estimate +1.0% (within 15%: ok)",
        "check: good: 95% of the ideal speedup over caching off (at least 90%: ok)",
    ]


def test_a_caching_row_is_judged_against_the_graph_with_caching_off():
    """Caching off carries the node's own cost and its text-path reuse: the share of the ideal is what
    caching adds on top, paired repeat by repeat (here the third repeat was slowed for both alike)."""
    caching_off, cached = [2.0, 2.0, 4.0], [1.0, 1.0, 2.0]
    assert caching_efficiency(cached, caching_off, ideal=2.5) == Spread(0.8, 0.8, 0.8)


def test_a_first_demo_without_the_proxy_shows_the_random_table_before_the_build():
    speedup = pytest.importorskip("benchmarks.speedup")
    args = speedup.argparse.Namespace(model=None, random=False)
    assert speedup.demo_models(args, comfy_found=True, proxy_built=False) == ["random", "proxy"]
    assert speedup.demo_models(args, comfy_found=True, proxy_built=True) == ["proxy"]
    assert speedup.demo_models(args, comfy_found=False, proxy_built=False) == ["adapters"]
    random = speedup.argparse.Namespace(model=None, random=True)
    assert speedup.demo_models(random, comfy_found=True, proxy_built=False) == ["random"]


def test_the_demo_samples_on_one_cpu_thread_and_its_comfyui_server_inherits_it(monkeypatch):
    """Two threads of one sampling wait on each other when another job holds a core of a 2-core machine."""
    speedup = pytest.importorskip("benchmarks.speedup")
    import subprocess

    import torch

    assert speedup.parse_args([]).threads == 1
    assert speedup.parse_args(["--threads", "0"]).threads == 0
    assert speedup.parse_args(["--model", "krea2.safetensors"]).threads == 0   # on the GPU: torch's default
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "2")   # restored after the test, with MKL's
    monkeypatch.setenv("MKL_NUM_THREADS", "2")
    try:
        speedup.use_threads(1)
        assert torch.get_num_threads() == 1
        # A server started after it (ComfyServer passes os.environ on) samples on one thread too.
        child = subprocess.run([sys.executable, "-c", "import torch; print(torch.get_num_threads())"],
                               capture_output=True, text=True, check=True)
        assert child.stdout.strip() == "1"
    finally:
        torch.set_num_threads(before)


def test_the_median_of_many_repeats_is_bounded_by_order_statistics():
    # 30 values: the 10th smallest and the 10th largest hold the median with at least 95% (binomial:
    # P(at most 9 of 30 below the median) = 2.1%, at most 10 = 4.9%).
    interval = median_interval([float(v) for v in range(30)])
    assert (interval.median, interval.low, interval.high) == (14.5, 9.0, 20.0)
    assert astuple(median_interval([float(v) for v in range(100)]))[1:] == (39.0, 60.0)
    assert astuple(median_interval([3.0, 1.0, 2.0, 6.0, 5.0, 4.0]))[1:] == (1.0, 6.0)   # 6: the extremes (1.6%)
    with pytest.raises(ValueError, match="take more"):
        median_interval([1.0, 2.0, 3.0, 4.0, 5.0])   # the extremes of 5 hold it with only 94%


def test_a_small_cost_is_decided_by_many_pairs_where_one_repeat_varies_more_than_the_margin():
    # A 5% cost in runs that vary by +-5% each: the interquartile range straddles a 1% margin forever,
    # the median of 30 pairs does not.
    ratios = [0.95 + 0.05 * ((7 * i) % 30 - 14.5) / 14.5 for i in range(30)]
    assert at_least(spread(ratios), 0.99) == "undecided"
    interval = median_interval(ratios)
    assert interval.high < 0.99 and interval_at_least(interval, 0.99) == "BELOW"
    assert interval_at_least(Spread(1.0, 0.995, 1.01), 0.99) == "ok"
    assert interval_at_least(Spread(0.99, 0.98, 1.0), 0.99) == "undecided"
