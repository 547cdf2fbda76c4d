"""What a run cached and why, as the real server reports it: settings as set, residual changes
measured on every step, and threshold suggestions that hold when the graph is run again."""

from __future__ import annotations

import pytest

from devkit.krea2_prompts import CACHE_NODE_DEFAULTS, krea2_prompt

pytestmark = pytest.mark.comfyui


def settings_of(inputs: dict) -> dict:
    """The node's settings for these inputs, the rest left at the node's defaults."""
    return {**CACHE_NODE_DEFAULTS, **inputs}


@pytest.mark.parametrize("steps", [8, 52])
@pytest.mark.parametrize("inputs", [
    {},
    {"steps_mask": "none", "residual_diff_threshold": 0.0},
    {"steps_mask": "medium", "max_warmup_steps": 2, "calibrator": "taylorseer", "taylorseer_order": 2},
    {"residual_diff_threshold": 0.5, "Bn_compute_blocks": 1, "max_continuous_cached_steps": -1,
     "max_cached_steps": 3, "warmup_interval": 2},
], ids=["defaults", "off", "mask_and_taylorseer", "limits"])
def test_every_input_runs_exactly_as_set(comfy_server, steps, inputs):
    _, [record] = comfy_server.run_with_stats(krea2_prompt(steps=steps, cache=inputs))
    assert record["settings"] == settings_of(inputs)
    assert record["steps_mask"] == settings_of(inputs)["steps_mask"]
    if record["steps_mask"] == "none":
        assert record["mask"] is None
    else:
        assert len(record["mask"]) == steps and [s for s, m in enumerate(record["mask"]) if m == 0] == \
            record["cached_steps"]


def test_changes_are_measured_with_caching_off_and_suggestions_hold_on_a_rerun(comfy_server):
    _, [measured] = comfy_server.run_with_stats(krea2_prompt(cfg=3.5, seed=81, cache={"residual_diff_threshold": 0.0}))
    assert measured["cached_steps"] == [] and measured["residual_diffs"][0] is None
    assert all(d is not None and d > 0 for d in measured["residual_diffs"][1:])
    assert measured["step_reasons"] == ["warmup"] * 4 + ["threshold_off"] * 4
    suggestions = measured["threshold_suggestions"]
    assert suggestions and all(len(s["cached_steps"]) >= 1 for s in suggestions)
    for suggestion in suggestions:
        _, [rerun] = comfy_server.run_with_stats(krea2_prompt(
            cfg=3.5, seed=81, cache={"residual_diff_threshold": suggestion["threshold"]}))
        assert abs(len(rerun["cached_steps"]) - len(suggestion["cached_steps"])) <= 1, (suggestion, rerun)
        assert rerun["residual_diffs"][:5] == measured["residual_diffs"][:5], "the same graph until it caches"


def test_the_time_estimate_is_reported_beside_the_duration(comfy_server):
    _, [record] = comfy_server.run_with_stats(krea2_prompt(seed=82, cache={"steps_mask": "ultra"}))
    assert record["cached_steps"] and record["estimated_uncached_s"] > record["duration_s"] > 0
    assert record["estimated_speedup"] == pytest.approx(record["estimated_uncached_s"] / record["duration_s"],
                                                        rel=1e-3)
    line = f"Krea-2 Cache-DiT [node 5]: cached steps {len(record['cached_steps'])}/8"
    logged = [row for row in comfy_server.log_text().splitlines() if line in row and "saved (estimated)" in row]
    assert logged, "the log line gives the estimate"
