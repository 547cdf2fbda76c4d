"""The demo's fewer-steps rows (benchmarks/speedup.py, ``python3 dev.py demo``): plain euler at as many
model calls as the cached rows whose calls are fixed in advance, its MAE against the uncached image
beside theirs; on the proxies through the real ComfyUI server (8 steps: the Turbo proxy; 52 steps: the
trained proxy)."""

from __future__ import annotations

import argparse

import pytest

from benchmarks import speedup
from benchmarks.speedup import Case, fewer_steps_lines, planned_calls

from krea2_cachedit.adapters.image_compare import mae_255_and_mse

proxy_tier = pytest.mark.tier("proxy")


def test_the_demo_runs_euler_at_the_calls_of_its_masks_and_presets():
    cases = {c.name: c for c in speedup.proxy_cases()}
    fewer = {name: c for name, c in cases.items() if speedup.FEWER_STEPS in name}
    assert {name: c.steps for name, c in fewer.items()} == {
        "fewer steps: euler 5": 5, "fewer steps: euler 4": 4,   # steps_mask fast, turbo_5_of_8 / ultra, turbo_4_of_8
        "raw fewer steps: euler 30": 30, "raw fewer steps: euler 25": 25,   # steps_mask medium / fast
        "raw fewer steps: euler 14": 14, "raw fewer steps: euler 13": 13,   # spectrum_paper / raw_1_in_4
        "raw fewer steps: euler 11": 11,                                     # raw_1_in_5
        "raw fewer steps: euler 8": 8}                                       # raw_8_of_52
    for name, c in fewer.items():
        assert c.cache is None and c.forecast is None, c
        reference = cases[speedup.reference_case(name)]
        assert reference.cache is None and reference.steps > c.steps and reference.cfg == c.cfg, (c, reference)
    # The presets' own counts (adapters/forecast/forecast_settings.py); a threshold fixes none in advance.
    assert [planned_calls(cases[f"forecast {p}"]) for p in ("turbo_5_of_8", "turbo_4_of_8")] == [5, 4]
    assert [planned_calls(cases[f"raw forecast {p}"]) for p in ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52", "spectrum_paper")] \
        == [13, 11, 8, 14]
    assert planned_calls(cases["node defaults"]) is None and planned_calls(cases["caching off"]) == 8
    # A mask cache-dit has no plan for at this step count: the node runs on its threshold alone.
    assert planned_calls(Case("odd", 5, 1.0, {"steps_mask": "fast"})) is None


def test_the_demo_samples_8_steps_on_the_turbo_proxy_and_52_on_the_trained_one():
    """Every 8-step row, fewer steps included (set against the 8-step uncached image), on the Turbo proxy."""
    from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

    models = {c.name: c.model for c in speedup.proxy_cases()}
    for name, model in models.items():
        assert model == (PROXY_MODEL if speedup.reference_case(name) == "raw uncached" else TURBO_PROXY_MODEL), name
    assert models["fewer steps: euler 5"] == TURBO_PROXY_MODEL and models["raw fewer steps: euler 13"] == PROXY_MODEL


def demo_row(case, mae, calls=None, caching=True, steps=8, uncached="uncached", wall=1.0):
    return {"case": case, "mae_255": mae, "planned_calls": calls, "uncached": uncached, "steps": steps,
            "wall": wall, "efficiency_spread": object() if caching else None}


def test_a_cached_row_is_set_beside_euler_at_as_many_calls():
    rows = [demo_row("uncached", 0.0, 8, caching=False), demo_row("steps_mask fast", 3.2, 5),
            demo_row("node defaults", 1.1), demo_row("steps_mask ultra", 6.8, 4),
            demo_row("fewer steps: euler 5", 2.1, 5, caching=False, steps=5, wall=1.6),
            demo_row("raw forecast raw_1_in_4", 2.2, 13, steps=52, uncached="raw uncached"),
            demo_row("fewer steps: euler 13", 9.0, 13, caching=False, steps=13)]   # another regime's count
    # Only the fast mask: the defaults fix no count, ultra has no euler row at 4, and the Raw preset's 13
    # calls are set against Raw's euler, not a Turbo one.
    assert fewer_steps_lines(rows) == [
        "steps_mask fast: 5 of 8 calls computed, MAE 3.20/255; euler at 5 steps: MAE 2.10/255, 1.60x wall "
        "(closer to the uncached image: fewer steps)"]


@proxy_tier
def test_the_demo_measures_fewer_steps_against_the_uncached_image(proxy_server, proxy):
    from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

    cases = [c for c in speedup.proxy_cases()
             if c.name in ("uncached", "caching off", "forecast turbo_5_of_8", "fewer steps: euler 5")]
    results = {c.name: {"case": c, "times": [], "latents": [], "stats": []} for c in cases}

    def run_case(case, rep):
        prompt = speedup.case_prompt(case, PROXY_MODEL, 0, rep, 128, 0, proxy)
        assert prompt["1"]["inputs"]["unet_name"] == TURBO_PROXY_MODEL, prompt   # the case's model, not the run's
        run = speedup.run_prompt(proxy_server, prompt)
        return run.seconds, run.latent, run.stats

    speedup.repeat_until_stable(cases, run_case, results, argparse.Namespace(repeats=2, budget=0.0))
    rows = {r["case"]: r for r in speedup.summarize(results, proxy.decode)}
    euler, forecast = rows["fewer steps: euler 5"], rows["forecast turbo_5_of_8"]
    # Against the uncached image of the same seed at the full 8 steps, not its own.
    maes = [mae_255_and_mse(proxy.decode(lat), proxy.decode(ref))[0]
            for (_, lat), (_, ref) in zip(results["fewer steps: euler 5"]["latents"], results["uncached"]["latents"])]
    assert euler["mae_255"] == pytest.approx(sum(maes) / len(maes)) and euler["mae_255"] > 0, euler
    assert euler["ideal"] == pytest.approx(8 / 5) and euler["efficiency_spread"] is None and euler["cached"] == "-"
    assert forecast["planned_calls"] == 5 and forecast["efficiency_spread"] is not None
    (line,) = fewer_steps_lines(list(rows.values()))
    assert line.startswith(f"forecast turbo_5_of_8: 5 of 8 calls computed, MAE {forecast['mae_255']:.2f}/255; "
                           f"euler at 5 steps: MAE {euler['mae_255']:.2f}/255"), line
    checks = speedup.check_lines(list(rows.values()))
    assert not any("euler" in check for check in checks), checks   # fewer steps cache nothing to judge
    assert any(check.startswith("check: forecast turbo_5_of_8: ") for check in checks), checks
