"""The Krea2CacheDiT node in the real ComfyUI server, driven through its HTTP API.

The checks every family shares (one stream or two by CFG mode, bit-identical with caching off, a
cached run leaving the model clean) run on Krea-2 among the families: tests/families/test_family_scenarios_comfyui.py.
"""

from __future__ import annotations

import math
import re
import time

import pytest
import torch

from devkit.comfy_harness import prompt_error, strict_loads
from helpers import FAST, FAST_8_CACHED, run_ok
from devkit.krea2_prompts import krea2_prompt

pytestmark = pytest.mark.comfyui


@pytest.fixture(scope="module")
def baseline(comfy_server, uncached_latent):
    """The uncached latent of the default test graph (no Cache-DiT node) at CFG 3.5."""
    return uncached_latent(comfy_server, "krea2", cfg=3.5)


# Relative L2 distance of this graph's FAST-cached latent (steps 3, 5, 6 served from the cache)
# from its uncached one: 0.00134, measured with ComfyUI 0.33.0 and torch 2.14.1 on the CPU (fixed
# seeds, so it is the same on every run). Float rounding moves it by far less than 1%; the band is
# +-25%. The tiny model's blocks change the latent little, so wrong caching moves it little too:
# cached steps that drop the skipped blocks' residual give 0.00209 (caught here), uncond served
# cond's residual gives 0.00146 (not caught here; test_cache_run checks each stream exactly).
FAST_DEVIATION = 0.00134


def test_cached_image_differs_but_stays_close(comfy_server, baseline):
    cached = comfy_server.saved_latent(run_ok(comfy_server, krea2_prompt(cfg=3.5, cache=FAST, prefix="c")), "7")
    deviation = float((cached - baseline).norm() / baseline.norm())
    assert 0.75 * FAST_DEVIATION < deviation < 1.25 * FAST_DEVIATION, deviation


def test_step_count_resolution_and_batch_change_between_runs(comfy_server):
    _, [first] = comfy_server.run_with_stats(krea2_prompt(steps=8, cache=FAST))
    _, [second] = comfy_server.run_with_stats(krea2_prompt(steps=12, size=96, batch=2, cache=FAST, seed=5))
    assert first["steps"] == 8 and second["steps"] == 12
    assert second["cache_contexts"] == 1 and second["cached_steps"] and 0 not in second["cached_steps"]
    # Same graph and settings again: same cached steps, nothing carried over between runs.
    _, [third] = comfy_server.run_with_stats(krea2_prompt(steps=8, cache=FAST))
    assert third["cached_steps"] == first["cached_steps"]


def test_hires_second_pass_in_one_prompt_starts_clean(comfy_server):
    prompt = krea2_prompt(cfg=3.5, cache=FAST)
    prompt["8"] = {"class_type": "LatentUpscale", "inputs": {"samples": ["6", 0], "upscale_method": "nearest-exact",
                                                           "width": 96, "height": 96, "crop": "disabled"}}
    prompt["9"] = {"class_type": "KSampler", "inputs": {**prompt["6"]["inputs"], "latent_image": ["8", 0],
                                                       "denoise": 0.5, "steps": 8}}
    prompt["7"]["inputs"]["samples"] = ["9", 0]
    _, runs = comfy_server.run_with_stats(prompt, runs=2)
    # KSampler's denoise 0.5 stretches the schedule to 16 steps and samples its last 8 sigmas.
    assert [r["steps"] for r in runs] == [8, 8]
    assert all(r["cache_contexts"] == 1 and r["status"] == "ok" for r in runs)


@pytest.mark.parametrize("sampler", ["heun", "dpmpp_2s_ancestral"])
def test_multi_call_samplers_count_steps_by_sigma(comfy_server, sampler):
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(cfg=3.5, sampler=sampler, cache=FAST))
    assert stats["steps"] == 8 and stats["status"] == "ok"
    assert stats["extra_calls"] > 0 and stats["cache_contexts"] == 1
    assert stats["cached_steps"], "a multi-call sampler still gets its masked steps"


def test_two_nodes_on_one_base_model_stay_independent(comfy_server):
    prompt = krea2_prompt(cfg=1.0, cache=FAST)
    prompt["15"] = {"class_type": "Krea2CacheDiT", "inputs": {**prompt["5"]["inputs"], "steps_mask": "medium"}}
    prompt["16"] = {"class_type": "KSampler", "inputs": {**prompt["6"]["inputs"], "model": ["15", 0]}}
    prompt["17"] = {"class_type": "SaveLatent", "inputs": {"samples": ["16", 0], "filename_prefix": "second"}}
    _, runs = comfy_server.run_with_stats(prompt, node_id=None, runs=2)
    by_node = {r["node_id"]: r for r in runs}
    assert by_node["5"]["cached_steps"] == FAST_8_CACHED
    assert by_node["15"]["cached_steps"] == [4, 6], "cache-dit's 'medium' mask for 8 steps"


def test_unsupported_model_fails_clearly_and_the_server_recovers(comfy_server):
    entry = comfy_server.run(krea2_prompt(model="tiny_wan.safetensors", cache=FAST))
    error = prompt_error(entry)
    assert error.startswith("TypeError: ") and "got a WanModel model" in error
    assert "not a supported Krea-2 transformer" in error and "Load Diffusion Model" in error
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(cache=FAST))
    assert stats["status"] == "ok" and stats["cached_steps"] == FAST_8_CACHED


def test_too_many_compute_blocks_fails_clearly(comfy_server):
    entry = comfy_server.run(krea2_prompt(cache={"Fn_compute_blocks": 4, "Bn_compute_blocks": 1}))
    assert "must be less than the model's 4 transformer blocks" in prompt_error(entry)
    # Fn + Bn == blocks leaves nothing to cache: a "cached" step would run every block.
    entry = comfy_server.run(krea2_prompt(cache={"Fn_compute_blocks": 3, "Bn_compute_blocks": 1}))
    assert prompt_error(entry).startswith("ValueError: Fn_compute_blocks (3) + Bn_compute_blocks (1) must be less "
                                          "than the model's 4 transformer blocks"), prompt_error(entry)
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(cache=FAST))
    assert stats["status"] == "ok" and stats["cached_steps"] == FAST_8_CACHED


# Bad numbers for the node's number inputs (input, value, what the refusal says), sent as the raw
# JSON the API reads (NaN, Infinity). Every INT and FLOAT input's schema range is checked.
BAD_NUMBERS = [
    ("residual_diff_threshold", math.nan, "residual_diff_threshold must be a number from 0 to 2 (got nan, not a "
                                          "finite number); its default is 0.24."),
    ("residual_diff_threshold", "nan", "residual_diff_threshold must be a number from 0 to 2 (got nan, not a finite"),
    ("residual_diff_threshold", math.inf, "(got inf, not a finite number)"),
    ("residual_diff_threshold", -math.inf, "(got -inf, not a finite number)"),
    ("residual_diff_threshold", 2.5, "residual_diff_threshold must be a number from 0 to 2 (got 2.5)"),
    ("residual_diff_threshold", -0.1, "residual_diff_threshold must be a number from 0 to 2 (got -0.1)"),
    ("Fn_compute_blocks", 0, "Fn_compute_blocks must be a number from 1 to 64 (got 0); its default is 1."),
    ("Bn_compute_blocks", 65, "Bn_compute_blocks must be a number from 0 to 64 (got 65)"),
    ("max_warmup_steps", -1, "max_warmup_steps must be a number from 0 to 1000 (got -1)"),
    ("warmup_interval", 0, "warmup_interval must be a number from 1 to 100 (got 0)"),
    ("max_cached_steps", -2, "max_cached_steps must be a number from -1 to 1000 (got -2)"),
    ("max_continuous_cached_steps", 1001, "max_continuous_cached_steps must be a number from -1 to 1000 (got 1001)"),
    ("taylorseer_order", 5, "taylorseer_order must be a number from 1 to 4 (got 5); its default is 1."),
    ("dmd_history", 3, "dmd_history must be a number from 4 to 16 (got 3); its default is 6."),
]


@pytest.mark.parametrize("name, value, message", BAD_NUMBERS, ids=[f"{n}={v!r}" for n, v, _ in BAD_NUMBERS])
def test_bad_numbers_are_refused_when_queued(comfy_server, name, value, message):
    answer, body = comfy_server.refusal(krea2_prompt(cache={**FAST, name: value}, prefix="refused"))
    assert strict_loads(body) == answer, "the refusal echoes the bad value back as a bare NaN or Infinity"
    errors = answer["node_errors"]["5"]["errors"]
    assert list(answer["node_errors"]) == ["5"], answer["node_errors"]
    assert errors and all(e["type"] == "custom_validation_failed" and message in e["details"] for e in errors), errors
    # Nothing ran, and the next valid prompt runs as usual.
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(cache=FAST))
    assert stats["status"] == "ok" and stats["cached_steps"] == FAST_8_CACHED


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_count_is_refused_when_queued(comfy_server, value):
    """ComfyUI's own int() of an INT input fails first, naming the input; the node's message is there too,
    and the answer is strict JSON (the value comes back as the text ``nan``/``inf``)."""
    answer, body = comfy_server.refusal(krea2_prompt(cache={**FAST, "max_cached_steps": value}, prefix="refused"))
    assert strict_loads(body) == answer
    errors = answer["node_errors"]["5"]["errors"]
    assert errors[0]["type"] == "invalid_input_type" and errors[0]["details"].startswith("max_cached_steps, "), errors
    message = f"max_cached_steps must be a number from -1 to 1000 (got {value}, not a finite number); its default is -1."
    assert all(message in e["details"] for e in errors[1:]) and len(errors) > 1, errors


def test_a_combo_value_not_offered_is_refused_when_queued(comfy_server):
    """The node's own check replaces ComfyUI's for all its inputs, combos included."""
    answer, _ = comfy_server.refusal(krea2_prompt(cache={"steps_mask": "turbo"}, prefix="refused"))
    [error, *_] = answer["node_errors"]["5"]["errors"]
    assert ("steps_mask must be one of 'none', 'slow', 'medium', 'fast', 'ultra' (got the string 'turbo')."
            in error["details"]), error


def test_mask_for_an_unsupported_step_count_warns_and_runs(comfy_server):
    _, [stats] = comfy_server.run_with_stats(krea2_prompt(steps=5, cache=FAST))
    assert stats["steps"] == 5 and "Running without a step mask" in stats["warnings"][0]


def wait_for_sampling_progress(server, log_offset: int, steps: int, done: int, timeout: float = 120.0):
    """Until the sampler's progress bar (in the server log after ``log_offset``) shows ``done`` of ``steps``."""
    progress = re.compile(rf"(\d+)/{steps} \[")
    deadline = time.time() + timeout
    while time.time() < deadline:
        if any(int(n) >= done for n in progress.findall(server.log_text()[log_offset:])):
            return
        time.sleep(0.1)
    raise TimeoutError(f"sampling did not reach step {done}/{steps} in {timeout}s\n{server.log_tail()}")


def test_interrupt_leaves_the_shared_model_uncached(comfy_server, baseline):
    # Caching from the second step on: a module left cached would serve the next plain run's
    # calls from the cache too (a long run's step mask computes its first dozens of steps).
    cache_every_step = {"residual_diff_threshold": 2.0, "max_warmup_steps": 1, "max_continuous_cached_steps": -1}
    log_offset = len(comfy_server.log_text())
    prompt_id = comfy_server.queue(krea2_prompt(cfg=3.5, steps=400, cache=cache_every_step, prefix="interrupted"))
    wait_for_sampling_progress(comfy_server, log_offset, steps=400, done=4)
    comfy_server.post("/interrupt", {})
    comfy_server.wait(prompt_id)
    [stats] = comfy_server.stats_for(prompt_id, "5")
    assert stats["status"] == "interrupted" and stats["steps"] == 400
    assert stats["cached_steps"][:3] == [1, 2, 3]
    # Its calls are counted; no step count costs as much as a run that made no image.
    assert 0 < stats["full_calls"] < stats["calls"] and stats["equal_cost_steps"] is None, stats
    after = comfy_server.saved_latent(run_ok(comfy_server, krea2_prompt(cfg=3.5, prefix="after_interrupt")), "7")
    assert torch.equal(after, baseline)


def test_stats_are_logged_once_per_run_without_cache_dit_noise(comfy_server):
    before = comfy_server.log_text()
    run_ok(comfy_server, krea2_prompt(cache=FAST, seed=11))
    new = comfy_server.log_text()[len(before):]
    assert new.count("Krea-2 Cache-DiT [node 5]: cached steps 3/8") == 1
    assert new.count(" of 8 calls computed: as many as ") == 1, new[-3000:]
    assert "Acceleration hooks is disabled" not in new and "FakeDiffusionPipeline" not in new
