"""docs/benchmarks.md's rows of what ``auto``'s two unmet targets would take are the committed results'
(benchmarks/auto_targets.py), measured on the node's own computed steps, searched on the tuning images and never on
the measured ones, and agreeing with the grid's own figures where both measure the same run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.auto_targets import CELLS, MEASURED, TUNING, findings, table
from benchmarks.forecast_auto import TUNING_IMAGES
from krea2_cachedit.adapters.forecast.auto_schedule import computed_steps

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "auto_targets.json"
GRID = REPO / "benchmarks" / "results" / "forecast_auto.json"


def results() -> dict:
    return json.loads(RESULTS.read_text())


def test_the_report_shows_the_committed_rows_and_findings():
    report = (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    missing = [line for line in table(results()) if line not in report.splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)
    flat = " ".join(report.split())
    missing = [line for line in findings(results()) if " ".join(line.split()) not in flat]
    assert not missing, "docs/benchmarks.md lacks, as the results give them:\n" + "\n".join(missing)


def test_the_search_ran_on_tuning_images_and_the_node_s_computed_steps():
    measured = results()
    tuning = [tuple(image) for image in measured["tuning_images"]]
    assert tuning == list(TUNING) and set(tuning) <= set(TUNING_IMAGES)
    assert [tuple(image) for image in measured["measured_images"]] == list(MEASURED)
    assert not set(tuning) & set(MEASURED)
    assert set(measured["cells"]) == set(CELLS)
    for name, cell in measured["cells"].items():
        row = cell["row"]
        assert cell["weights_sha256"] and (cell["cfg"], row["steps"], row["calls"]) == CELLS[name][1:4]
        assert row["computed_steps"] == computed_steps(row["steps"], row["calls"]), \
            "the node's layout changed: rerun python -m benchmarks.auto_targets"
        assert len(row["searched_shares"]) == len(row["rule_shares"]) == row["calls"]


def test_the_rule_lands_where_the_grid_measured_it():
    """The same plan on the same images and builds as ``forecast_auto``'s grid: the same figure."""
    grid = json.loads(GRID.read_text())["regimes"]
    for name, cell in results()["cells"].items():
        row = cell["row"]
        regime = grid[name.split(",")[0]]
        assert regime["cfg"] == cell["cfg"] and regime["proxy"] == cell["proxy"]
        [grid_row] = [r for r in regime["rows"] if (r["steps"], r["calls"]) == (row["steps"], row["calls"])]
        assert row["measured"]["rule"] == pytest.approx(grid_row["auto"], rel=1e-3)
        assert row["measured"]["euler"] == pytest.approx(grid_row["euler"], rel=1e-3)
