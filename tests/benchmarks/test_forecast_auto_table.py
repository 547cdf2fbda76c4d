"""docs/benchmarks.md's grid of the Forecast node's ``auto`` plan is the committed results' (benchmarks/forecast_auto.py),
row for row, with its picture; the results name the builds of the test models they sampled, and the planned rows
were calibrated on images none of the measured ones."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.forecast_auto import (CALIBRATION_IMAGES, IMAGES, PICTURE, TUNING_IMAGES, findings, plot_points,
                                      table)
from benchmarks.peers.cases import IMAGES as PEER_IMAGES

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "forecast_auto.json"


def test_the_report_shows_the_committed_grid():
    results = json.loads(RESULTS.read_text())
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [line for line in table(results) if line not in report.splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)


def test_the_report_says_what_the_committed_grid_says_of_the_plans():
    report = " ".join((REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8").split())
    missing = [line for line in findings(json.loads(RESULTS.read_text())) if " ".join(line.split()) not in report]
    assert not missing, "docs/benchmarks.md lacks, as the results give them:\n" + "\n".join(missing)


def test_the_results_name_their_builds_and_images():
    results = json.loads(RESULTS.read_text())
    assert results["images"] == [list(image) for image in IMAGES]
    assert not set(IMAGES) & {*TUNING_IMAGES, *PEER_IMAGES}, "held-out images: none auto's rule was chosen on"
    for regime in results["regimes"].values():
        assert regime["proxy"] in results["builds"] and results["builds"][regime["proxy"]]["weights_sha256"]


def test_the_plans_were_calibrated_on_other_images_and_make_the_rows_calls():
    results = json.loads(RESULTS.read_text())
    calibration = [tuple(image) for image in results["calibration_images"]]
    assert calibration == list(CALIBRATION_IMAGES)
    assert not set(calibration) & {*IMAGES, *PEER_IMAGES, *TUNING_IMAGES}
    for regime in results["regimes"].values():
        for row in regime["rows"]:
            for plan in (row["dpcache_style"], row["auto_planned"]):
                steps = plan["computed_steps"]
                assert len(set(steps)) == row["calls"] and steps[0] == 0 and steps[-1] < row["steps"], row


def test_the_picture_draws_each_step_count_against_euler_from_the_full_run():
    results = json.loads(RESULTS.read_text())
    panels = plot_points(results)
    assert len(panels) == sum(len({row["steps"] for row in r["rows"]}) for r in results["regimes"].values())
    for title, curves in panels.items():
        steps = int(title.split(", ")[1].split()[0])
        assert curves["plain euler, fewer steps"][-1] == (steps, 0.0)
        assert len(curves["auto"]) == len(curves["DPCache-style (hold)"]) == len(curves["plain euler, fewer steps"]) - 1
    assert PICTURE.is_file()
    assert "](../benchmarks/results/forecast_auto.png)" in (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
