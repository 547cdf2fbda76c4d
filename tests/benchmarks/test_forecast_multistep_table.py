"""docs/benchmarks.md's table of the Forecast node under res_multistep is the committed results'
(benchmarks/forecast_multistep.py), row for row; the results name the builds they sampled, on images none of the other
benchmarks or the choices of the presets and ``auto`` used, and each setting's calls were counted on the model."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks import forecast_auto
from benchmarks.forecast_multistep import IMAGES, REGIMES, RESULTS, SAMPLER, table
from benchmarks.peers.cases import IMAGES as PEER_IMAGES

from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run

REPO = Path(__file__).resolve().parents[2]


def test_the_report_shows_the_committed_rows():
    results = json.loads(RESULTS.read_text())
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [line for line in table(results) if line not in report.splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)


def test_the_results_are_res_multisteps_on_held_out_images_and_name_their_builds():
    results = json.loads(RESULTS.read_text())
    assert results["sampler"] == SAMPLER == "res_multistep"
    images = [tuple(image) for image in results["images"]]
    assert images == list(IMAGES)
    assert not set(images) & {*PEER_IMAGES, *forecast_auto.IMAGES, *forecast_auto.CALIBRATION_IMAGES,
                              *forecast_auto.TUNING_IMAGES}
    for regime in results["regimes"].values():
        assert regime["proxy"] in results["builds"] and results["builds"][regime["proxy"]]["weights_sha256"]


def test_each_setting_made_the_calls_its_plan_computes():
    """The calls counted on the model's first block are the plan's computed steps (a forecast step runs no block),
    so the fewer-steps run beside it costs as much."""
    results = json.loads(RESULTS.read_text())
    for name, regime in results["regimes"].items():
        _, cfg, steps, presets, speedups = REGIMES[name]
        assert (regime["cfg"], regime["steps"]) == (cfg, steps)
        settings = [*(ForecastSettings.from_preset(p) for p in presets), *(ForecastSettings.auto(s) for s in speedups)]
        assert [row["setting"] for row in regime["rows"]] == [*presets, *(f"auto {s:g}" for s in speedups)]
        for row, setting in zip(regime["rows"], settings, strict=True):
            # auto's calls depend on the run's sigmas only through the gaps' shares, not the steps it computes.
            assert row["calls"] == sum(plan_forecast_run(setting, steps).mask), row
