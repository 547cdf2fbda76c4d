"""docs/benchmarks.md's table of ``auto`` with its shares calibrated on the model is the committed results'
(benchmarks/forecast_calibration.py), row for row with its findings; the calibrated runs differ from ``auto``'s only
in their shares, were fitted on images none of the measured ones, and measure the cells forecast_auto measured."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.forecast_auto import TUNING_IMAGES
from benchmarks.forecast_calibration import (CALIBRATION_IMAGES, IMAGES, REGIMES, SHARES, auto_module, findings,
                                             gap_settings, rule_plan, table)
from benchmarks.peers.cases import IMAGES as PEER_IMAGES

REPO = Path(__file__).resolve().parents[2]
RESULTS = REPO / "benchmarks" / "results" / "forecast_calibration.json"
AUTO_RESULTS = REPO / "benchmarks" / "results" / "forecast_auto.json"


def report() -> str:
    return (REPO / "docs" / "benchmarks.md").read_text(encoding="utf-8")


def test_the_report_shows_the_committed_rows_and_findings():
    results = json.loads(RESULTS.read_text())
    missing = [line for line in table(results) if line not in report().splitlines()]
    assert not missing, f"docs/benchmarks.md lacks rows of {RESULTS.name}:\n" + "\n".join(missing)
    flat = " ".join(report().split())
    missing = [line for line in findings(results) if " ".join(line.split()) not in flat]
    assert not missing, "docs/benchmarks.md lacks, as the results give them:\n" + "\n".join(missing)


def test_every_regime_ran_on_a_named_build_with_shares_from_the_tried_ones():
    results = json.loads(RESULTS.read_text())
    assert set(results["regimes"]) == set(REGIMES)
    assert [tuple(i) for i in results["calibration_images"]] == list(CALIBRATION_IMAGES)
    assert not set(CALIBRATION_IMAGES) & {*IMAGES, *TUNING_IMAGES, *PEER_IMAGES}
    for name, regime in results["regimes"].items():
        assert regime["weights_sha256"] and regime["model"] == REGIMES[name][0]
        assert [(row["steps"], row["speedup"]) for row in regime["rows"]] == [
            (steps, round(speedup, 3)) for steps, speedups in REGIMES[name][2].items() for speedup in speedups]
        for row in regime["rows"]:
            assert len(row["computed_steps"]) == row["calls"] == len(row["calibrated_shares"]) + 1
            assert set(row["calibrated_shares"]) <= set(SHARES), row


def test_the_krea2_cells_are_forecast_auto_s_own():
    """Same images, builds and graph: euler's and the rule's figures are forecast_auto's committed ones."""
    ours, theirs = json.loads(RESULTS.read_text()), json.loads(AUTO_RESULTS.read_text())
    for name in ("raw", "turbo"):
        assert ours["regimes"][name]["proxy"] == theirs["regimes"][name]["proxy"]
        for mine, row in zip(ours["regimes"][name]["rows"], theirs["regimes"][name]["rows"], strict=True):
            assert (mine["steps"], mine["calls"]) == (row["steps"], row["calls"])
            assert mine["euler"] == pytest.approx(row["euler"], abs=0.011)
            assert mine["auto"] == pytest.approx(row["auto"], abs=0.011)


@pytest.mark.parametrize("guided", [True, False])
@pytest.mark.parametrize("steps,speedup", [(8, 2), (8, 1.6), (20, 4), (28, 3), (52, 6)])
def test_the_rule_s_shares_run_as_auto_runs(steps, speedup, guided):
    """A calibrated run differs from ``auto``'s only in its shares: given the rule's, it is ``auto``'s plan."""
    sigmas = [1 - (step / steps) ** 0.8 for step in range(steps + 1)]
    chosen, rule = rule_plan(steps, speedup, sigmas, guided)
    schedule = gap_settings(chosen, steps, rule).schedule
    auto = auto_module.AutoSchedule(speedup)
    assert schedule.computed(steps) == auto.computed(steps)
    assert schedule.shares(steps, sigmas) == pytest.approx(auto.shares(steps, sigmas, guided))
