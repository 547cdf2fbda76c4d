"""docs/benchmarks.md's rows of ``auto``'s two share ramps are the committed results' (benchmarks/auto_ramps.py), measured
with the ramps the node runs, on the tuning images and never the held-out ones."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.auto_ramps import IMAGES, REGIMES, findings, table
from benchmarks.forecast_auto import IMAGES as MEASURED, TUNING_IMAGES
from krea2_cachedit.adapters.forecast.auto_schedule import SHARE_RAMP, UNGUIDED_SHARE_RAMP

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "auto_ramps.json"


def test_the_report_shows_the_committed_rows_and_findings():
    results = json.loads(RESULTS.read_text())
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [line for line in table(results) if line not in report.splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)
    flat = " ".join(report.split())
    missing = [line for line in findings(results) if " ".join(line.split()) not in flat]
    assert not missing, "docs/benchmarks.md lacks, as the results give them:\n" + "\n".join(missing)


def test_the_results_measure_the_node_s_ramps_on_tuning_images():
    results = json.loads(RESULTS.read_text())
    assert [tuple(ramp) for ramp in results["ramps"]] == [SHARE_RAMP, UNGUIDED_SHARE_RAMP], \
        "the node's ramps changed: rerun python -m benchmarks.auto_ramps"
    images = [tuple(image) for image in results["images"]]
    assert images == list(IMAGES) and set(images) <= set(TUNING_IMAGES) and not set(images) & set(MEASURED)
    assert set(results["regimes"]) == set(REGIMES)
    for name, regime in results["regimes"].items():
        assert regime["cfg"] == REGIMES[name][1] and regime["weights_sha256"]
        assert all(len(row["ramps"]) == 2 for row in regime["rows"])
