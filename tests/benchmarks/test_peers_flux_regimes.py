"""The peer benchmark's Flux regimes (``python -m benchmarks.peers --regimes flux20,flux28``: the Flux proxy at 20
and 28 steps, CFG 3.5): every method the Krea-2 regimes run, the Forecast node's ``auto`` besides, and a report
that neither projects Flux rows onto Krea-2's costs nor holds them to Krea-2's targets. No server: the cases, the
prompts and the report of made-up rows.
"""

from __future__ import annotations

import itertools
import json
import types
from pathlib import Path

import pytest
from devkit.krea2_prompts import FLUX_PROXY_MODEL

from benchmarks.peers import cases as peers_cases
from benchmarks.peers import checks as peers_checks
from benchmarks.peers import report as peers_report
from benchmarks.peers import sample as peers_sample
from benchmarks.peers import summary as peers_summary
from benchmarks.speedup import planned_calls

FLUX_REGIMES = ("flux20", "flux28")
AUTO_SPEEDUPS = {"2", "3", "4", "6"}


def entry():
    from benchmarks.peers import __main__ as module

    return module


def settings(of_regime, method) -> set[str]:
    return {c.setting for c in of_regime if c.method == method}


@pytest.mark.parametrize("regime", FLUX_REGIMES)
def test_a_flux_regime_runs_every_method_on_the_flux_proxy(regime):
    of = peers_cases.REGIMES[regime]
    assert (of.cfg, of.model, of.family) == (3.5, FLUX_PROXY_MODEL, peers_cases.FLUX)
    assert regime in peers_cases.regimes_of(peers_cases.FLUX) and regime not in peers_cases.regimes_of(peers_cases.KREA2)
    of_regime = [c for c in peers_cases.full_cases(FLUX_REGIMES) if c.regime == regime]
    assert {c.model for c in of_regime} == {FLUX_PROXY_MODEL}
    assert settings(of_regime, peers_cases.UNCACHED) == {""}
    # The node's defaults (cache-dit's Flux.1 threshold 0.24, the node's other defaults) within the sweep.
    assert [c for c in of_regime if peers_cases.is_node_default({"method": c.method, "setting": c.setting})]
    assert settings(of_regime, peers_cases.THRESHOLD) == {f"{t:g}" for t in peers_cases.NODE_THRESHOLDS}
    # Each step mask with each calibrator, and alone: the masks' best calibrator can be read.
    masked = {(c.cache["steps_mask"], c.cache.get("calibrator")) for c in of_regime
              if c.method.startswith(peers_cases.MASKS)}
    assert masked == set(itertools.product(peers_cases.MASK_POLICIES, (None, *peers_cases.CALIBRATORS)))
    # The Raw presets (windows of steps: they run at any step count) and auto at 2, 3, 4 and 6.
    assert settings(of_regime, peers_cases.FORECAST_PRESETS) == {"raw_1_in_4", "raw_1_in_5", "raw_8_of_52"}
    auto = {c.setting: c.forecast for c in of_regime if c.method == peers_cases.FORECAST_AUTO}
    assert auto == {x: {"preset": "auto", "speedup": float(x)} for x in AUTO_SPEEDUPS}
    for peer in peers_cases.PEERS:
        assert settings(of_regime, peer) == {f"{t:g}" for t in peers_cases.PEER_THRESHOLDS}
    # Euler at every call count a row plans (masks, presets, auto) and across the span, each below the full steps.
    euler = {c.steps for c in of_regime if c.method == peers_cases.FEWER_STEPS}
    planned = {planned_calls(c) for c in of_regime} - {None, of.steps}
    assert planned <= euler and set(peers_cases.FEWER_STEPS_SPAN[regime]) <= euler and max(euler) < of.steps
    assert {planned_calls(c) for c in of_regime if c.method == peers_cases.FORECAST_AUTO} <= euler
    assert {c.steps for c in of_regime if peers_cases.is_multistep({"method": c.method})} <= euler


def test_a_flux_case_samples_the_flux_proxy_with_its_pooled_vector():
    # The DBCache node that takes every family (proxy_prompt's choice: Krea2CacheDiT refuses a Flux model).
    masked = peers_cases.case("flux20", peers_cases.MASKS, "fast", {"steps_mask": "fast"})
    assert peers_sample.case_prompt(masked, label=0, seed=0)["5"]["class_type"] == "CacheDiTDBCache"
    krea2 = peers_cases.case("raw", peers_cases.MASKS, "fast", {"steps_mask": "fast"})
    assert peers_sample.case_prompt(krea2, label=0, seed=0)["5"]["class_type"] == "Krea2CacheDiT"
    made = peers_cases.forecast_case("flux28", peers_cases.FORECAST_AUTO, "3", "auto", speedup=3.0)
    prompt = peers_sample.case_prompt(made, label=0, seed=0)
    assert prompt["1"]["inputs"]["unet_name"] == FLUX_PROXY_MODEL and prompt["6"]["inputs"]["steps"] == 28
    assert prompt["2"]["inputs"]["pooled_features"] > 0
    assert prompt["5"]["inputs"]["preset"] == "auto" and prompt["5"]["inputs"]["preset.speedup"] == 3.0
    assert planned_calls(made) == 9


def test_a_run_takes_one_family_and_writes_its_own_results():
    assert entry().stem(("turbo", "raw")) == "peers" and entry().stem(("flux20", "flux28")) == "peers_flux"
    with pytest.raises(SystemExit):
        entry().main(["--regimes", "raw,flux20"])
    assert peers_cases.full_cases() == peers_cases.full_cases(("turbo", "raw"))  # the default run is Krea-2's


def made_up_row(case, computed: int, mae: float, reference_steps: int) -> dict:
    """A row as rows.summarize writes it, from a case and the calls it computed (times from those calls)."""
    skipped, seconds = case.steps - computed, 0.01 * computed + 0.002
    uncached_seconds = 0.01 * reference_steps + 0.002
    return {"case": case.name, "regime": case.regime, "method": case.method, "setting": case.setting,
            "steps": case.steps, "cfg": case.cfg, "sampler": case.sampler, "model": case.model,
            "inputs": case.peer or case.cache, "skipped": [skipped], "skipped_range": [skipped, skipped],
            "ideal": reference_steps / computed, "step_ideal": reference_steps / computed, "seconds": seconds,
            "times": [seconds] * 3, "wall": uncached_seconds / seconds,
            "wall_spread": [uncached_seconds / seconds] * 3, "mae_255": mae, "mae_255_per_image": [mae],
            "psnr_db": None if mae == 0 else 40.0, "finite": True, "runs": 3, "images": [[0, 0]],
            "calls": case.steps, "cached_calls": skipped if peers_cases.is_node({"method": case.method}) else 0,
            "text_computed": case.steps, "always_blocks": 1}


def flux_rows() -> list[dict]:
    """Made-up rows of both Flux regimes: the rows the Krea-2 targets and the projection read."""
    rows = []
    for regime in FLUX_REGIMES:
        steps = peers_cases.REGIMES[regime].steps
        of_regime = {c.name: c for c in peers_cases.full_cases((regime,))}
        chosen = {"uncached": (steps, 0.0), "Cache-DiT caching off 0": (steps, 0.0),
                  f"{peers_cases.CACHING_OFF_FULL_TEXT} 0": (steps, 0.0),
                  "Cache-DiT threshold 0.24": (steps - 6, 2.0), "Cache-DiT forecast presets raw_1_in_4": (None, 1.5),
                  "Cache-DiT forecast auto, speedup 4": (None, 1.8), "EasyCache 0.2": (steps - 5, 3.0),
                  "fewer steps, euler 10": (10, 2.5), "fewer steps, euler 5": (5, 6.0)}
        for name, (computed, mae) in chosen.items():
            case = of_regime[f"{regime} {name}"]
            rows.append(made_up_row(case, computed or planned_calls(case), mae, steps))
    return rows


def test_a_flux_run_is_not_projected_on_krea2_nor_held_to_its_targets(tmp_path, capsys):
    costs = tmp_path / "costs.json"   # Krea-2's component costs are there: the Flux rows must still not use them
    costs.write_text(json.dumps({"costs": {"block": 1.0, "text": 6.0, "rest": 2.0, "blocks": 28}}))
    rows = flux_rows()
    info = {"device": "CPU", "threads": "1", "date": "2026-12-07"}
    _, comparisons = peers_report.report(rows, info, tmp_path, stem="peers_flux", costs_path=costs)
    printed = capsys.readouterr().out
    assert not any("projected" in r for r in rows) and "projected" not in comparisons
    written = json.loads((tmp_path / "peers_flux.json").read_text())
    assert written["conditions"]["projection"] is None and "Not projected on Krea-2" in printed
    assert (tmp_path / "peers_flux.png").stat().st_size > 10_000
    checks = [line for line in printed.splitlines() if line.startswith("check:")]
    assert checks and all(line.startswith(("check: flux20", "check: flux28")) for line in checks), checks
    assert not any("turbo_" in line or "a forecast setting at" in line for line in checks), checks
    # Report only: the defaults, the preset and auto against euler at as many calls, per regime.
    for regime in FLUX_REGIMES:
        assert any(line.startswith(f"check: {regime} (equal calls): Cache-DiT forecast auto, speedup 4")
                   for line in checks), checks
    assert peers_checks.forecast_checks(rows) == []
    title = peers_report.title(rows, info)
    assert "Flux proxy" in title and "not Flux quality" in title and "Krea-2" not in title


def test_the_docs_summary_sets_each_picked_setting_beside_euler_at_as_many_calls():
    lines = peers_summary.summary(flux_rows())
    assert lines[0].startswith("**20 steps, CFG 3.5** (`flux20`)") and "| euler | 2.50 | 6.00 |" in lines
    # The preset computes 7 of 20 calls: euler between 10 (2.5) and 5 (6.0), linear in calls without / with.
    euler = 2.5 + (6.0 - 2.5) * (20 / 7 - 2) / (4 - 2)
    assert f"| `raw_1_in_4` | 7 of 20 | **1.50** | {euler:.2f} | - | {20.2 / 7.2:.2f}x |" in lines, lines
    assert any(line.startswith("| `auto` 4x | 5 of 20 |") for line in lines)
    assert any(line.startswith("| EasyCache 0.2 (its best of 1 against euler) | 15 of 20 |") for line in lines)


def test_a_flux_run_records_the_flux_build_it_sampled(tmp_path):
    (tmp_path / "comfyui_version.py").write_text('__version__ = "0.0.0"\n')
    flux = types.SimpleNamespace(checkpoint=Path("/cache/flux-proxy-abc/flux_proxy.safetensors"),
                                 info={"weights_sha256": "f" * 64}, settings=types.SimpleNamespace(image_size=128))
    info = peers_report.conditions(tmp_path, None, [(0, 0)], 2, "1", None, flux, regimes=FLUX_REGIMES)
    assert info["proxies"] == {"flux20": "flux-proxy-abc", "flux28": "flux-proxy-abc"}
    assert info["builds"] == {"flux-proxy-abc": {"weights_sha256": "f" * 64}}
    assert info["models"] == {"flux20": FLUX_PROXY_MODEL, "flux28": FLUX_PROXY_MODEL}
    assert "not Flux quality" in info["note"] and "Krea-2 quality" not in info["note"]


def test_the_report_shows_the_committed_flux_results():
    """docs/benchmarks.md's Flux tables are printed from peers_flux.json (``python -m benchmarks.peers.summary``),
    not retyped; the results name the Flux build they sampled and were not projected."""
    from devkit.comfy_harness import REPO_ROOT

    written = json.loads((REPO_ROOT / "benchmarks" / "results" / "peers_flux.json").read_text())
    conditions = written["conditions"]
    assert set(conditions["proxies"]) == set(FLUX_REGIMES) and conditions["projection"] is None
    assert set(conditions["builds"]) == set(conditions["proxies"].values())
    text = (REPO_ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    start = text.index("\n## The Flux proxy: 20 and 28 steps at CFG 3.5\n")
    section = text[start:text.index("\n## ", start + 1)].splitlines()
    assert [line for line in peers_summary.summary(written["rows"]) if line not in section] == []
