"""docs/benchmarks.md's grid of the Forecast node's ``auto`` plan is the committed results' (benchmarks/forecast_auto.py),
row for row, and the results name the builds of the test models they sampled."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.forecast_auto import IMAGES, table

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "forecast_auto.json"


def test_the_report_shows_the_committed_grid():
    results = json.loads(RESULTS.read_text())
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [line for line in table(results) if line not in report.splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)


def test_the_results_name_their_builds_and_images():
    results = json.loads(RESULTS.read_text())
    assert results["images"] == [list(image) for image in IMAGES]
    for regime in results["regimes"].values():
        assert regime["proxy"] in results["builds"] and results["builds"][regime["proxy"]]["weights_sha256"]
