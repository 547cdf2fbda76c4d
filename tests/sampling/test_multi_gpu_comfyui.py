"""ComfyUI's multi-GPU sampling with the cache: a cache per device copy, one decision per step (real server).

``Krea2TestMultiGPU`` builds what ``MultiGPU CFG Split`` builds, for a second device key that
computes on the CPU (``cpu:1``), so ComfyUI's own scheduler sends cond to the main model and
uncond to the deep clone, in its thread pool, one thread per device. Every test checks from the
record that this really happened: two devices, two modules, two threads, one cond each.
"""

from __future__ import annotations

import pytest
import torch

from helpers import FAST, FAST_8_CACHED, OFF, latent_and_record
from devkit.krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

STEPS = 8


def graph(cache: dict | None, prefix: str, devices: int = 2, seed: int = 71, share_model: bool = False) -> dict:
    """CFG 3.5 with a 13-token negative: on one device, cond and uncond are separate calls."""
    prompt = krea2_prompt(cfg=3.5, steps=STEPS, neg_tokens=13, cache=cache, seed=seed, prefix=prefix)
    if devices > 1:
        prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0], "share_model": share_model}}
        prompt["5" if cache is not None else "6"]["inputs"]["model"] = ["20", 0]
    return prompt


def check_two_devices(record: dict) -> dict[str, dict]:
    """Cond ran on one device's copy and uncond on the other's, each on its own thread, every step."""
    assert record["status"] == "ok" and record["device_count"] == 2, record["warnings"]
    devices = {d["device"]: d for d in record["devices"]}
    assert list(devices) == ["cpu", "cpu:1"]
    assert len({d["module_id"] for d in devices.values()}) == 2
    [main_thread], [clone_thread] = devices["cpu"]["threads"], devices["cpu:1"]["threads"]
    assert main_thread != clone_thread
    for label, branch in (("cpu", 0), ("cpu:1", 1)):
        log = devices[label]["call_log"]
        assert [entry[0] for entry in log] == list(range(STEPS)), log
        assert all(entry[1] == [branch] and entry[2] for entry in log), log
        # Each device is sent one cond per step: one stream, no separate CFG on that device.
        assert (devices[label]["cfg_mode"], devices[label]["has_separate_cfg"]) == ("none", False)
        assert devices[label]["cache_contexts"] == 1
    assert record["cfg_mode"] == "split" and record["calls"] == 2 * STEPS
    return devices


def test_caching_off_on_two_devices_is_bit_identical_to_the_graph_without_the_node(comfy_server):
    without, _ = latent_and_record(comfy_server, graph(None, "mgpu_plain"))
    latent, record = latent_and_record(comfy_server, graph(OFF, "mgpu_off"))
    check_two_devices(record)
    assert record["cached_steps"] == []
    assert torch.equal(latent, without)


def test_a_step_mask_caches_the_same_steps_on_every_device_within_the_one_device_deviation(comfy_server):
    reference, _ = latent_and_record(comfy_server, graph(None, "mgpu_ref", devices=1))
    single, single_record = latent_and_record(comfy_server, graph(FAST, "mgpu_single", devices=1))
    assert (single_record["cfg_mode"], single_record["has_separate_cfg"]) == ("split", True)
    assert single_record["cached_steps"] == FAST_8_CACHED
    latent, record = latent_and_record(comfy_server, graph(FAST, "mgpu_mask"))
    devices = check_two_devices(record)
    assert record["cached_steps"] == FAST_8_CACHED
    assert all(d["cached_steps"] == FAST_8_CACHED for d in devices.values())
    # Both devices' copies sit on the cache steps together: the busiest device per step runs
    # 5 of 8 steps in full (and the first block on the 3 cached ones).
    blocks = single_record["block_evals_uncached"] // (2 * STEPS)
    assert record["parallel_block_evals"] == [5 * blocks + 3 * 1, STEPS * blocks]
    assert record["ideal_speedup"] == pytest.approx(STEPS * blocks / (5 * blocks + 3), abs=1e-4)
    single_deviation = (single - reference).abs().max().item()
    assert single_deviation > 0
    assert (latent - reference).abs().max().item() <= single_deviation * 1.001
    assert (latent - single).abs().max().item() <= single_deviation


def threshold_graph(threshold: float, prefix: str) -> dict:
    return graph({"residual_diff_threshold": threshold, "max_warmup_steps": 2, "max_continuous_cached_steps": -1},
                 prefix)


def test_with_the_threshold_every_device_caches_the_same_steps(comfy_server):
    """At the first step after warmup, a threshold between the two conds' residual changes: the step is
    computed on both devices (the cond that would have cached says so); above both, it is cached on both."""
    _, measured = latent_and_record(comfy_server, threshold_graph(1e-9, "mgpu_measure"))
    check_two_devices(measured)
    assert measured["cached_steps"] == []
    step = 2
    changes = {s["device"]: s["residual_diffs"][s["steps"].index(step)] for s in measured["streams"]}
    low, high = sorted(changes.values())
    assert low < high, changes
    calm = min(changes, key=changes.get)

    _, between = latent_and_record(comfy_server, threshold_graph((low + high) / 2, "mgpu_between"))
    devices = check_two_devices(between)
    assert step not in between["cached_steps"]
    assert all(d["cached_steps"] == between["cached_steps"] for d in devices.values())
    assert between["partial_steps"] == []
    calm_stream = next(s for s in between["streams"] if s["device"] == calm)
    assert calm_stream["step_reasons"][calm_stream["steps"].index(step)] == "other_device"

    _, above = latent_and_record(comfy_server, threshold_graph(high * 1.01, "mgpu_above"))
    devices = check_two_devices(above)
    assert step in above["cached_steps"]
    assert all(d["cached_steps"] == above["cached_steps"] for d in devices.values())
    assert above["partial_steps"] == []


def test_twenty_repeated_two_device_runs_are_identical(comfy_server):
    """With a threshold the devices disagree on at step 2, so every run goes through the shared decision."""
    _, measured = latent_and_record(comfy_server, threshold_graph(1e-9, "mgpu_repeat_measure"))
    low, high = sorted(s["residual_diffs"][s["steps"].index(2)] for s in measured["streams"])
    threshold = (low + high) / 2
    first, first_record = latent_and_record(comfy_server, threshold_graph(threshold, "mgpu_repeat_0"))
    check_two_devices(first_record)
    assert "other_device" in [r for s in first_record["streams"] for r in s["step_reasons"]]
    for index in range(1, 20):
        latent, record = latent_and_record(comfy_server, threshold_graph(threshold, f"mgpu_repeat_{index}"))
        check_two_devices(record)
        for key in ("cached_steps", "partial_steps", "step_reasons", "residual_diffs", "call_log"):
            assert record[key] == first_record[key], (index, key)
        assert [s["step_reasons"] for s in record["streams"]] == [s["step_reasons"] for s in first_record["streams"]]
        assert torch.equal(latent, first), f"run {index} differs"


def test_a_device_that_shares_the_main_model_is_refused_clearly_and_runs_uncached(comfy_server):
    without, _ = latent_and_record(comfy_server, graph(None, "mgpu_shared_plain", share_model=True))
    latent, record = latent_and_record(comfy_server, graph(FAST, "mgpu_shared_node", share_model=True))
    assert record["status"] == "skipped" and record["cached_steps"] == [] and record["calls"] == 0
    assert "share one copy of the model" in record["warnings"][0] and "not cached" in record["warnings"][0]
    assert torch.equal(latent, without)


def test_a_two_evaluation_sampler_serves_each_devices_first_evaluation_of_a_step(comfy_server):
    """heun: the corrector's calls (at sigma[i+1]) go to the devices too and are computed beside the cache."""
    prompt = graph(FAST, "mgpu_heun")
    prompt["6"]["inputs"]["sampler_name"] = "heun"
    _, record = latent_and_record(comfy_server, prompt)
    assert record["device_count"] == 2 and record["cached_steps"] == FAST_8_CACHED
    for device, branch in zip(record["devices"], (0, 1)):
        calls = [(entry[0], entry[1], entry[2]) for entry in device["call_log"]]
        expected = [(step, [branch], served) for step in range(STEPS)
                    for served in ((True, False) if step < STEPS - 1 else (True,))]
        assert calls == expected, device["device"]
        assert device["cached_steps"] == FAST_8_CACHED and len(set(device["threads"])) == 1
    # The merged log: by step, then device, each device's calls in the order they ran.
    assert [(entry[0], entry[1], entry[2]) for entry in record["call_log"]] == [
        (step, [branch], served) for step in range(STEPS) for branch in (0, 1)
        for served in ((True, False) if step < STEPS - 1 else (True,))]


def test_cfg_1_runs_on_the_first_device_alone_and_caches_there(comfy_server):
    """One cond per step: ComfyUI gives it to the first device, the second gets no work and is not waited for."""
    prompt = krea2_prompt(cfg=1.0, steps=STEPS, cache=FAST, seed=72, prefix="mgpu_cfg1")
    prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
    prompt["5"]["inputs"]["model"] = ["20", 0]
    _, record = latent_and_record(comfy_server, prompt)
    main, clone = record["devices"]
    assert (main["device"], main["calls"], clone["device"], clone["calls"]) == ("cpu", STEPS, "cpu:1", 0)
    assert record["cached_steps"] == main["cached_steps"] == FAST_8_CACHED and record["warnings"] == []
    assert record["cfg_mode"] == "none" and record["duration_s"] < 60


def test_three_conds_on_two_devices_batch_two_on_the_first(comfy_server):
    """Perp-neg: the first device is sent two conds (batched, one stream), the second the third."""
    from devkit.krea2_prompts import guided_prompt

    guider = {"class_type": "PerpNegGuider", "inputs": {"positive": ["2", 0], "negative": ["3", 0],
                                                         "empty_conditioning": ["8", 0], "cfg": 3.5, "neg_scale": 1.0}}
    prompt = guided_prompt(guider, cache=FAST, prefix="mgpu_perp_neg")
    prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
    prompt["5"]["inputs"]["model"] = ["20", 0]
    _, record = latent_and_record(comfy_server, prompt)
    main, clone = record["devices"]
    assert {tuple(sorted(entry[1])) for entry in main["call_log"]} == {(0, 2)}
    assert {tuple(entry[1]) for entry in clone["call_log"]} == {(1,)}
    assert (main["cfg_mode"], clone["cfg_mode"]) == ("batched", "none")
    assert main["cache_contexts"] == clone["cache_contexts"] == 1
    assert record["cached_steps"] == main["cached_steps"] == clone["cached_steps"] == FAST_8_CACHED


def test_a_device_whose_cond_changes_mid_run_starts_a_fresh_cache(comfy_server):
    """Two positives with timestep ranges (8 tokens, then 10): the first device's stream changes its shape
    mid-run and starts a fresh context there; no residual of the old cond serves the new one, and every
    step stays cached on both devices or on none."""
    prompt = graph(FAST, "mgpu_ranges")
    prompt["30"] = {"class_type": "Krea2TestConditioning",
                    "inputs": {"seed": 4, "tokens": 10, "features": prompt["2"]["inputs"]["features"],
                               "nonce": prompt["2"]["inputs"]["nonce"]}}
    prompt["31"] = {"class_type": "ConditioningSetTimestepRange", "inputs": {"conditioning": ["2", 0],
                                                                              "start": 0.0, "end": 0.5}}
    prompt["32"] = {"class_type": "ConditioningSetTimestepRange", "inputs": {"conditioning": ["30", 0],
                                                                              "start": 0.5, "end": 1.0}}
    prompt["33"] = {"class_type": "ConditioningCombine", "inputs": {"conditioning_1": ["31", 0],
                                                                     "conditioning_2": ["32", 0]}}
    prompt["6"]["inputs"]["positive"] = ["33", 0]
    _, record = latent_and_record(comfy_server, prompt)
    main, clone = record["devices"]
    assert record["warnings"] == [] and record["partial_steps"] == []
    assert clone["cache_contexts"] == 1 and {tuple(e[1]) for e in clone["call_log"]} == {(1,)}
    assert main["cache_contexts"] >= 2 and {tuple(e[1]) for e in main["call_log"]} == {(0,)}
    fresh = [s for s in record["streams"] if s["device"] == "cpu" and s["context"] > 0]
    assert fresh and all(s["step_reasons"][0] == "fresh_context" for s in fresh)
    for stream in fresh:  # the step a fresh context starts at computes on every device
        assert stream["start_step"] not in record["cached_steps"]
    assert record["cached_steps"] == main["cached_steps"] == clone["cached_steps"]
