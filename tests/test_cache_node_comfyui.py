"""The Krea2CacheDiT node in the real ComfyUI server, driven through its HTTP API."""

from __future__ import annotations

import time

import pytest
import torch

from comfy_harness import prompt_error
from krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui

FAST = {"steps_mask": "fast"}
FAST_8_CACHED = [3, 5, 6]


def run_ok(server, prompt):
    entry = server.run(prompt)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    return entry


def latest_runs(server, count: int) -> list[dict]:
    return server.get("/krea2_cachedit/stats")["runs"][-count:]


def run_and_stats(server, prompt, runs: int = 1):
    entry = run_ok(server, prompt)
    stats = latest_runs(server, runs)
    assert all(r["prompt_id"] for r in stats)
    return entry, stats


@pytest.fixture(scope="module")
def baseline(comfy_server):
    """The uncached latent of the default test graph (no Cache-DiT node)."""
    entry = run_ok(comfy_server, krea2_prompt(cfg=3.5, prefix="baseline"))
    return comfy_server.saved_latent(entry, "7")


def test_cfg_1_is_one_stream(comfy_server):
    _, [stats] = run_and_stats(comfy_server, krea2_prompt(cfg=1.0, cache=FAST))
    assert (stats["cfg"], stats["cfg_mode"], stats["has_separate_cfg"]) == (1.0, "none", False)
    assert stats["node_id"] == "5" and stats["steps"] == 8
    assert stats["cached_steps"] == FAST_8_CACHED
    assert all(call[1] == [0] for call in stats["call_log"]), "CFG 1 has no uncond pass"


def test_cfg_batched_is_one_stream(comfy_server):
    _, [stats] = run_and_stats(comfy_server, krea2_prompt(cfg=3.5, cache=FAST))
    assert (stats["cfg_mode"], stats["has_separate_cfg"]) == ("batched", False)
    assert stats["cached_steps"] == FAST_8_CACHED
    assert stats["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"


def test_cfg_split_by_conditioning_shape_uses_separate_cfg(comfy_server):
    _, [stats] = run_and_stats(comfy_server, krea2_prompt(cfg=3.5, neg_tokens=13, cache=FAST))
    assert (stats["cfg_mode"], stats["has_separate_cfg"]) == ("split", True)
    assert stats["cached_steps"] == FAST_8_CACHED
    assert [c[1] for c in stats["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
    assert stats["calls"] == 16 and stats["extra_calls"] == 0


def test_bypassed_node_after_a_cached_run_gives_the_uncached_image(comfy_server, baseline):
    run_ok(comfy_server, krea2_prompt(cfg=3.5, cache={"steps_mask": "ultra"}))
    after = comfy_server.saved_latent(run_ok(comfy_server, krea2_prompt(cfg=3.5, prefix="after")), "7")
    assert torch.equal(after, baseline)


def test_cached_image_differs_but_stays_close(comfy_server, baseline):
    cached = comfy_server.saved_latent(run_ok(comfy_server, krea2_prompt(cfg=3.5, cache=FAST, prefix="c")), "7")
    assert not torch.equal(cached, baseline)
    assert (cached - baseline).norm() / baseline.norm() < 0.5


def test_exact_when_caching_is_off(comfy_server, baseline):
    off = {"residual_diff_threshold": 0.0, "steps_mask": "none"}
    entry, [stats] = run_and_stats(comfy_server, krea2_prompt(cfg=3.5, cache=off, prefix="off"))
    assert stats["cached_steps"] == []
    assert torch.equal(comfy_server.saved_latent(entry, "7"), baseline)


def test_step_count_resolution_and_batch_change_between_runs(comfy_server):
    _, [first] = run_and_stats(comfy_server, krea2_prompt(steps=8, cache=FAST))
    _, [second] = run_and_stats(comfy_server, krea2_prompt(steps=12, size=96, batch=2, cache=FAST, seed=5))
    assert first["steps"] == 8 and second["steps"] == 12
    assert second["cache_contexts"] == 1 and second["cached_steps"] and 0 not in second["cached_steps"]
    # Same graph and settings again: same cached steps, nothing carried over between runs.
    _, [third] = run_and_stats(comfy_server, krea2_prompt(steps=8, cache=FAST))
    assert third["cached_steps"] == first["cached_steps"]


def test_hires_second_pass_in_one_prompt_starts_clean(comfy_server):
    prompt = krea2_prompt(cfg=3.5, cache=FAST)
    prompt["8"] = {"class_type": "LatentUpscale", "inputs": {"samples": ["6", 0], "upscale_method": "nearest-exact",
                                                           "width": 96, "height": 96, "crop": "disabled"}}
    prompt["9"] = {"class_type": "KSampler", "inputs": {**prompt["6"]["inputs"], "latent_image": ["8", 0],
                                                       "denoise": 0.5, "steps": 8}}
    prompt["7"]["inputs"]["samples"] = ["9", 0]
    _, runs = run_and_stats(comfy_server, prompt, runs=2)
    # KSampler's denoise 0.5 stretches the schedule to 16 steps and samples its last 8 sigmas.
    assert [r["steps"] for r in runs] == [8, 8]
    assert all(r["cache_contexts"] == 1 and r["status"] == "ok" for r in runs)


@pytest.mark.parametrize("sampler", ["heun", "dpmpp_2s_ancestral"])
def test_multi_call_samplers_count_steps_by_sigma(comfy_server, sampler):
    _, [stats] = run_and_stats(comfy_server, krea2_prompt(cfg=3.5, sampler=sampler, cache=FAST))
    assert stats["steps"] == 8 and stats["status"] == "ok"
    assert stats["extra_calls"] > 0 and stats["cache_contexts"] == 1
    assert stats["cached_steps"], "a multi-call sampler still gets its masked steps"


def test_two_nodes_on_one_base_model_stay_independent(comfy_server):
    prompt = krea2_prompt(cfg=1.0, cache=FAST)
    prompt["15"] = {"class_type": "Krea2CacheDiT", "inputs": {**prompt["5"]["inputs"], "steps_mask": "medium"}}
    prompt["16"] = {"class_type": "KSampler", "inputs": {**prompt["6"]["inputs"], "model": ["15", 0]}}
    prompt["17"] = {"class_type": "SaveLatent", "inputs": {"samples": ["16", 0], "filename_prefix": "second"}}
    _, runs = run_and_stats(comfy_server, prompt, runs=2)
    by_node = {r["node_id"]: r for r in runs}
    assert by_node["5"]["cached_steps"] == FAST_8_CACHED
    assert by_node["15"]["cached_steps"] == [4, 6], "cache-dit's 'medium' mask for 8 steps"


def test_unsupported_model_fails_clearly_and_the_server_recovers(comfy_server):
    entry = comfy_server.run(krea2_prompt(model="tiny_wan.safetensors", cache=FAST))
    error = prompt_error(entry)
    assert "got a WanModel model" in error
    assert "not a supported Krea-2 transformer" in error and "Load Diffusion Model" in error
    run_and_stats(comfy_server, krea2_prompt(cache=FAST))


def test_too_many_compute_blocks_fails_clearly(comfy_server):
    entry = comfy_server.run(krea2_prompt(cache={"Fn_compute_blocks": 4, "Bn_compute_blocks": 1}))
    assert "must not exceed the model's 4 transformer blocks" in prompt_error(entry)
    run_and_stats(comfy_server, krea2_prompt(cache=FAST))


def test_mask_for_an_unsupported_step_count_warns_and_runs(comfy_server):
    _, [stats] = run_and_stats(comfy_server, krea2_prompt(steps=5, cache=FAST))
    assert stats["steps"] == 5 and "Running without a step mask" in stats["warnings"][0]


def test_interrupt_leaves_the_shared_model_uncached(comfy_server, baseline):
    long_run = krea2_prompt(cfg=3.5, steps=400, cache=FAST, prefix="interrupted")
    prompt_id = comfy_server.queue(long_run)
    deadline = time.time() + 60
    while time.time() < deadline and comfy_server.get("/queue")["queue_running"] == []:
        time.sleep(0.1)
    time.sleep(1.0)
    comfy_server.post("/interrupt", {})
    comfy_server.wait(prompt_id)
    assert latest_runs(comfy_server, 1)[0]["status"] == "interrupted"
    after = comfy_server.saved_latent(run_ok(comfy_server, krea2_prompt(cfg=3.5, prefix="after_interrupt")), "7")
    assert torch.equal(after, baseline)


def test_stats_are_logged_once_per_run_without_cache_dit_noise(comfy_server):
    before = comfy_server.log_text()
    run_ok(comfy_server, krea2_prompt(cache=FAST, seed=11))
    new = comfy_server.log_text()[len(before):]
    assert new.count("Krea-2 Cache-DiT [node 5]: cached steps 3/8") == 1
    assert "Acceleration hooks is disabled" not in new and "FakeDiffusionPipeline" not in new
