"""The whole-call forecasting node (CacheDiTSpectrum) in the real ComfyUI server: what is the node's own (its
schedule per stream and context, heun, LoRA, EasyCache, two devices, refusals); its scenarios on every family (each
CFG layout, forecasting nothing bit-identical) are in tests/families/test_family_scenarios_comfyui.py.

Tiny seeded-random checkpoints (random weights: these tests check which steps were forecast and how
calls were routed, and exactness where nothing is forecast; never image quality). ``turbo_5_of_8``
computes steps 0, 1, 3, 5 and 7 of 8 and forecasts 2, 4 and 6, whatever the CFG layout: one history
for a batched call, one per stream when cond and uncond come apart.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_harness import prompt_error
from devkit.comfy_models import FAMILY_MODELS
from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, run_ok
from record_checks import FORECAST_NOTHING, FORECAST_STEPS
from devkit.krea2_prompts import krea2_prompt, with_forecast, with_lora

from krea2_cachedit.adapters.forecast.forecast_settings import PRESETS, ForecastSettings, plan_forecast_run

pytestmark = pytest.mark.comfyui


@pytest.fixture
def server(request, comfy_root, family):
    return request.getfixturevalue("comfy_server" if family == "krea2" else "family_server")


def forecast_prompt(family: str, preset: str = "turbo_5_of_8", custom: dict | None = None, **kwargs) -> dict:
    return with_forecast(family_prompt(family, cache={}, **kwargs), preset, **(custom or {}))


@pytest.mark.parametrize("family", ["krea2", "flux1"])
def test_a_corrector_samplers_further_calls_are_computed_and_kept_out(server, family):
    """heun calls the model again at each step's next sigma: those calls are computed in full and the
    first evaluation of each step follows the schedule, on one stream and on two lists (Flux)."""
    _, [record] = server.run_with_stats(forecast_prompt(family, cfg=1.0, seed=83, sampler="heun"))
    assert record["forecast_steps"] == FORECAST_STEPS
    extra = [call for call in record["call_log"] if not call[2]]
    assert len(extra) == 7 and all(call[3] == FAMILIES[family].blocks for call in extra)


def test_a_layout_change_mid_run_starts_fresh_histories(comfy_server):
    """The positive prompt changes halfway (ConditioningSetTimestepRange): new conds, a new context, whose
    histories fill before they forecast: the preset's linear forecast needs one computed step of its own
    stream and context (it holds it), never one of the context before."""
    prompt = krea2_prompt(cfg=3.5, cache={}, seed=84, prefix="forecast_switch")
    prompt["21"] = {"class_type": "ConditioningSetTimestepRange",
                    "inputs": {"conditioning": ["2", 0], "start": 0.0, "end": 0.5}}
    prompt["22"] = {"class_type": "Krea2TestConditioning", "inputs": {"seed": 9, "tokens": 8, "features": 120}}
    prompt["23"] = {"class_type": "ConditioningSetTimestepRange",
                    "inputs": {"conditioning": ["22", 0], "start": 0.5, "end": 1.0}}
    prompt["24"] = {"class_type": "ConditioningCombine", "inputs": {"conditioning_1": ["21", 0],
                                                                    "conditioning_2": ["23", 0]}}
    prompt["6"]["inputs"]["positive"] = ["24", 0]
    _, [record] = comfy_server.run_with_stats(with_forecast(prompt))
    assert record["cache_contexts"] >= 2
    assert any(reason == "history" for reason in record["step_reasons"]), record["step_reasons"]
    needed = PRESETS["turbo_5_of_8"].forecast.min_points
    assert needed == 1
    assert any("forecast" in stream["step_reasons"] for stream in record["streams"] if stream["context"] > 0), \
        record["streams"]
    for stream in record["streams"]:
        forecast = [step for step, reason in zip(stream["steps"], stream["step_reasons"]) if reason == "forecast"]
        computed_before = [s for s, r in zip(stream["steps"], stream["step_reasons"]) if r != "forecast"]
        assert all(len([s for s in computed_before if s < step]) >= needed for step in forecast), stream


LORA = "krea2_forecast_lora.safetensors"


@pytest.fixture(scope="module")
def lora(comfy_server, tiny_shape):
    from safetensors.torch import save_file

    from devkit.comfy_models import make_lora

    save_file(make_lora(tiny_shape, native_names=True), str(comfy_server.base_dir / "models" / "loras" / LORA))
    return LORA


def test_a_lora_before_or_after_the_node_gives_the_same_image(comfy_server, lora):
    before, [b] = comfy_server.run_with_stats(with_lora(forecast_prompt("krea2", seed=85, prefix="f_lora_a"), lora,
                                                        1.0, "lora_first"))
    after, [a] = comfy_server.run_with_stats(with_lora(forecast_prompt("krea2", seed=85, prefix="f_lora_b"), lora,
                                                       1.0, "cache_first"))
    no_lora = run_ok(comfy_server, forecast_prompt("krea2", seed=85, prefix="f_lora_none"))
    before, after, no_lora = (comfy_server.saved_latent(e, "7") for e in (before, after, no_lora))
    assert b["forecast_steps"] == a["forecast_steps"] == FORECAST_STEPS
    assert torch.equal(before, after)
    assert not torch.equal(before, no_lora), "the LoRA must change the image, or the check says nothing"


@pytest.mark.parametrize("family", ["krea2", "wan"])
def test_torch_compile_before_the_node_forecasts_the_same_steps(server, family):
    eager, [eager_record] = server.run_with_stats(forecast_prompt(family, seed=86, prefix="f_eager"))
    prompt = forecast_prompt(family, seed=86, prefix="f_compiled")
    prompt["20"] = {"class_type": "TorchCompileModel", "inputs": {"model": ["1", 0], "backend": "inductor"}}
    prompt["5"]["inputs"]["model"] = ["20", 0]
    entry, [record] = server.run_with_stats(prompt, timeout=1200)
    assert record["forecast_steps"] == eager_record["forecast_steps"] == FORECAST_STEPS
    assert record["block_evals"] == eager_record["block_evals"]
    compiled, reference = server.saved_latent(entry, "7"), server.saved_latent(eager, "7")
    assert float((compiled - reference).norm() / reference.norm()) < 1e-3


def test_on_two_devices_each_forecasts_its_own_conds(comfy_server, uncached_latent):
    def two_devices(prompt):
        prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
        prompt["5"]["inputs"]["model"] = ["20", 0]
        return prompt

    nothing = two_devices(forecast_prompt("krea2", "custom", FORECAST_NOTHING, cfg=3.5, neg_tokens=13, seed=87,
                                          prefix="f_mgpu_nothing"))
    plain = krea2_prompt(cfg=3.5, neg_tokens=13, seed=87, prefix="f_mgpu_plain")
    plain["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
    plain["6"]["inputs"]["model"] = ["20", 0]
    entry, [off] = comfy_server.run_with_stats(nothing)
    assert off["device_count"] == 2 and off["forecast_steps"] == []
    assert torch.equal(comfy_server.saved_latent(entry, "7"), comfy_server.saved_latent(run_ok(comfy_server, plain),
                                                                                       "7"))
    _, [record] = comfy_server.run_with_stats(two_devices(forecast_prompt("krea2", cfg=3.5, neg_tokens=13, seed=87,
                                                                          prefix="f_mgpu")))
    assert record["device_count"] == 2 and record["forecast_steps"] == FORECAST_STEPS
    assert [d["forecast_steps"] for d in record["devices"]] == [FORECAST_STEPS, FORECAST_STEPS]


def test_easycache_on_the_same_model_leaves_the_run_to_it(comfy_server):
    def with_easycache(prompt):
        prompt["14"] = {"class_type": "EasyCache", "inputs": {
            "model": ["1", 0], "reuse_threshold": 1.5, "start_percent": 0.15, "end_percent": 0.95, "verbose": False}}
        prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["14", 0]
        return prompt

    alone = run_ok(comfy_server, with_easycache(krea2_prompt(seed=88, prefix="f_easy_alone")))
    entry, [record] = comfy_server.run_with_stats(with_easycache(forecast_prompt("krea2", seed=88)))
    assert record["status"] == "skipped" and "EasyCache" in " ".join(record["warnings"])
    assert torch.equal(comfy_server.saved_latent(entry, "7"), comfy_server.saved_latent(alone, "7"))


def test_a_dbcache_node_before_it_is_replaced_and_says_so(comfy_server):
    prompt = krea2_prompt(cfg=1.0, cache=FAST, seed=89, prefix="f_after_dbcache")
    prompt["15"] = {"class_type": "CacheDiTSpectrum", "inputs": {"model": ["5", 0], "preset": "turbo_5_of_8"}}
    prompt["6"]["inputs"]["model"] = ["15", 0]
    _, runs = comfy_server.run_with_stats(prompt, node_id=None, runs=2)
    by_node = {r["node_id"]: r for r in runs}
    assert by_node["5"]["status"] == "skipped" and by_node["15"]["forecast_steps"] == FORECAST_STEPS
    assert "Cache-DiT Forecast node 15 after this one" in by_node["5"]["warnings"][0]


def test_a_model_it_cannot_forecast_is_refused_naming_the_node(family_server):
    entry = family_server.run(with_forecast(family_prompt("wan", model=FAMILY_MODELS["wan_vace"], cache={})))
    error = prompt_error(entry)
    assert error.startswith("TypeError: Cache-DiT Forecast got a VaceWanModel model"), error


@pytest.mark.parametrize("bad, kind", [({"window_size": 0.5}, "custom_validation_failed"),
                                       ({"window_size": "abc"}, "invalid_input_type"),
                                       ({"window_size": float("nan")}, "custom_validation_failed"),
                                       ({"forecast": "cubic"}, "custom_validation_failed")],
                         ids=["below_min", "a_string", "nan", "unknown_choice"])
def test_a_bad_custom_setting_is_refused_at_queue_time_naming_it(comfy_server, bad, kind):
    [name] = bad
    answer, text = comfy_server.refusal(forecast_prompt("krea2", "custom", bad))
    errors = answer["node_errors"]["5"]["errors"]
    named = [e for e in errors if e["type"] == kind]
    assert named and all(name in e["details"] for e in named), errors
    assert "NaN" not in text, "the refusal is strict JSON"
    run_ok(comfy_server, forecast_prompt("krea2", seed=90, prefix=f"f_after_{kind}"))


def test_the_stats_route_and_event_carry_the_forecast_run(comfy_server):
    _, [record] = comfy_server.run_with_stats(forecast_prompt("krea2", cfg=1.0, seed=91))
    assert record["estimated_uncached_s"] > record["duration_s"] > 0
    assert record["residual_diffs"] == [None] * 8 and record["threshold_suggestions"] == []
    log = comfy_server.log_text()
    assert "Cache-DiT Forecast [node 5]: forecast steps 3/8" in log
    saved = f"{record['block_evals_uncached'] - record['block_evals']}/{record['block_evals_uncached']}"
    assert f"saved {saved} ({record['blocks_saved']:.0%}), 5 of 8 calls computed: as many as 5 steps, CFG 1" in log


@pytest.mark.parametrize("cfg,guided", [(1.0, False), (3.5, True)])
def test_auto_plans_the_run_from_the_speedup_and_the_record_says_the_plan(comfy_server, cfg, guided):
    """speedup 4 at 8 steps: steps 0 and 4 computed (2 calls, as many as 2 steps), the run's own sigmas and CFG
    deciding each gap's share (a run at CFG 1 follows its trend further); the record and the log line say the plan."""
    prompt = forecast_prompt("krea2", "auto", {"speedup": 4.0}, cfg=cfg, seed=93, prefix="f_auto")
    _, [record] = comfy_server.run_with_stats(prompt)
    method = record["method"]
    assert (method["preset"], method["speedup"], method["computed_steps"]) == ("auto", 4.0, [0, 4])
    planned = plan_forecast_run(ForecastSettings.auto(4.0), 8, record["sigmas"], guided=guided)
    assert method["gap_shares"] == planned.gap_shares() and method["gap_shares"][0] == 0.0
    assert planned.gap_shares() != plan_forecast_run(ForecastSettings.auto(4.0), 8, record["sigmas"],
                                                     guided=not guided).gap_shares(), "the CFG decides the ramp"
    assert record["skipped_steps"] == [1, 2, 3, 5, 6, 7]
    log = comfy_server.log_text()
    assert "2 of 8 calls computed: as many as 2 steps" in log and "(preset auto, speedup 4)" in log


@pytest.mark.parametrize("speedup", [0.5, 51.0])
def test_a_speedup_out_of_bounds_is_refused_at_queue_time_naming_it(comfy_server, speedup):
    answer, text = comfy_server.refusal(forecast_prompt("krea2", "auto", {"speedup": speedup}))
    errors = answer["node_errors"]["5"]["errors"]
    assert errors and all("speedup" in e["details"] for e in errors), errors
    run_ok(comfy_server, forecast_prompt("krea2", "auto", {"speedup": 2.0}, seed=94, prefix="f_auto_after"))
