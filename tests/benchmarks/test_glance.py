"""The README's picture (benchmarks/peers/glance.py) draws the committed peer results as the pack quotes them:
each Forecast preset at the calls and MAE its quoted figure gives, euler at whole step counts down from the
full-step run, the DBCache defaults once per regime."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.peers.glance import glance_points
from krea2_cachedit.adapters import figures

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


def test_the_picture_is_in_the_readme():
    assert (RESULTS / "glance.png").is_file()
    assert "](benchmarks/results/glance.png)" in (RESULTS.parents[1] / "README.md").read_text(encoding="utf-8")
