"""The README's picture (benchmarks/peers/glance.py) draws the committed peer results as the pack quotes them:
each Forecast preset at the calls and MAE its quoted figure gives, ``auto`` at the calls its speedup makes and
below euler there (as the README says), euler at whole step counts down from the full-step run, the DBCache
defaults once per regime."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.peers.glance import glance_points
from krea2_cachedit.adapters import figures
from krea2_cachedit.adapters.forecast.auto_schedule import auto_calls

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results"
REGIMES = {8: "turbo", 52: "raw"}


def rows() -> list[dict]:
    return json.loads((RESULTS / "peers.json").read_text())["rows"]


def test_the_presets_sit_where_their_quoted_figures_say():
    for standing in figures.PRESET_STANDINGS:
        points = glance_points(rows(), REGIMES[standing.steps])["Cache-DiT Forecast presets"]
        ((calls, mae, _),) = [p for p in points if p[2] == standing.setting]
        assert (round(calls, 6), round(mae, 2)) == (standing.calls, standing.mae_255), standing.setting


def test_euler_runs_from_the_full_step_image_at_whole_calls():
    for steps, regime in REGIMES.items():
        points = glance_points(rows(), regime)
        euler = points["plain euler, fewer steps"]
        assert euler[-1][:2] == (steps, 0.0), f"{regime}: the line ends at the full-step run"
        assert all(abs(calls - round(calls)) < 1e-9 for calls, _, _ in euler), euler
        for standing in figures.PRESET_STANDINGS:
            if standing.steps == steps:
                (mae,) = [m for c, m, _ in euler if round(c) == standing.calls]
                assert round(mae, 2) == standing.euler_mae_255
        assert len(points["Cache-DiT DBCache defaults"]) == 1


def test_auto_sits_at_its_calls_below_euler():
    for steps, regime in REGIMES.items():
        points = glance_points(rows(), regime)
        euler = {round(calls): mae for calls, mae, _ in points["plain euler, fewer steps"]}
        auto = points["Cache-DiT Forecast auto"]
        assert len(auto) >= 3, f"{regime}: auto at its speedups"
        for calls, mae, setting in auto:
            assert round(calls, 6) == auto_calls(steps, float(setting)), (regime, setting)
            assert mae < euler[round(calls)], f"{regime}, auto at {setting}x: {mae} against euler {euler[round(calls)]}"


def test_the_pictures_are_in_the_readme():
    readme = (RESULTS.parents[1] / "README.md").read_text(encoding="utf-8")
    for picture in ("glance.png", "forecast_auto.png"):
        assert (RESULTS / picture).is_file()
        assert f"](benchmarks/results/{picture})" in readme, picture
