"""What is Wan's own through CacheDiTDBCache in the real server (the scenarios every family runs are in
test_family_scenarios_comfyui; a LoRA before or after the node and skip layer guidance in
test_families_compat_comfyui): every sampler that calls the model more than once a step in every CFG layout,
Wan 2.2's high- and low-noise pair, a VACE model refused, the Krea-2 node refusing Wan.

A sampler's further evaluations of a step (heun's corrector at ``sigma[i+1]``, dpm_2's midpoint, dpmpp_sde's
intermediate sigma) are computed in full beside the cache; each step's first evaluation at ``sigma[i]`` is the
call cache-dit serves. Tiny seeded-random checkpoints (``family_server``); random weights: what was cached and how
calls were routed, never image quality.
"""

from __future__ import annotations

import pytest

from devkit.comfy_harness import prompt_error
from devkit.comfy_models import FAMILY_MODELS
from devkit.family_prompts import family_prompt
from helpers import FAST, FAST_8_CACHED
from record_checks import check_two_evaluation_record

pytestmark = pytest.mark.comfyui


@pytest.mark.parametrize("sampler", ["heun", "dpm_2", "dpmpp_sde"])
@pytest.mark.parametrize("cfg, neg_tokens, branches, mode", [
    (1.0, 8, [[0]], "none"), (3.5, 8, [[1, 0]], "batched"), (3.5, 13, [[0], [1]], "split")],
    ids=["cfg1", "batched", "split"])
def test_wan_serves_each_steps_first_evaluation_and_computes_the_rest(family_server, sampler, cfg, neg_tokens,
                                                                      branches, mode):
    _, [record] = family_server.run_with_stats(
        family_prompt("wan", cfg=cfg, neg_tokens=neg_tokens, sampler=sampler, cache=FAST, prefix=f"wan_{sampler}"))
    check_two_evaluation_record(record, "wan", branches, mode)


def test_wan_2_2_high_and_low_noise_models_are_two_runs(family_server):
    """Wan 2.2 A14B: the high-noise model samples the first steps, the low-noise one the rest, each
    with its own node: two runs, each on its own model and its own steps."""
    prompt = family_prompt("wan", cfg=3.5, cache=FAST, prefix="wan22")
    prompt["21"] = {"class_type": "UNETLoader", "inputs": {"unet_name": FAMILY_MODELS["wan_low"],
                                                          "weight_dtype": "default"}}
    prompt["15"] = {"class_type": "CacheDiTDBCache", "inputs": {**prompt["5"]["inputs"], "model": ["21", 0],
                                                               "steps_mask": "medium"}}
    common = {"seed": 0, "steps": 16, "cfg": 3.5, "sampler_name": "euler", "scheduler": "simple",
              "positive": ["2", 0], "negative": ["3", 0]}
    prompt["6"] = {"class_type": "KSamplerAdvanced", "inputs": {
        **common, "model": ["5", 0], "add_noise": "enable", "noise_seed": 0, "latent_image": ["4", 0],
        "start_at_step": 0, "end_at_step": 8, "return_with_leftover_noise": "enable"}}
    prompt["16"] = {"class_type": "KSamplerAdvanced", "inputs": {
        **common, "model": ["15", 0], "add_noise": "disable", "noise_seed": 0, "latent_image": ["6", 0],
        "start_at_step": 8, "end_at_step": 16, "return_with_leftover_noise": "disable"}}
    for node in ("6", "16"):
        del prompt[node]["inputs"]["seed"]
    prompt["7"]["inputs"]["samples"] = ["16", 0]
    _, runs = family_server.run_with_stats(prompt, node_id=None, runs=2)
    high, low = sorted(runs, key=lambda r: r["sigmas"][0], reverse=True)
    assert (high["node_id"], low["node_id"]) == ("5", "15")
    assert high["steps"] == low["steps"] == 8 and high["sigmas"][-1] == pytest.approx(low["sigmas"][0])
    assert high["cached_steps"] == FAST_8_CACHED and low["cached_steps"] == [4, 6]
    assert high["cfg_mode"] == low["cfg_mode"] == "batched"


def test_a_subclass_that_injects_by_block_index_is_refused_naming_what_is_supported(family_server):
    entry = family_server.run(family_prompt("wan", model=FAMILY_MODELS["wan_vace"], cache=FAST))
    error = prompt_error(entry)
    assert error.startswith("TypeError: Cache-DiT DBCache got a VaceWanModel model"), error
    for name in ("Krea-2 (ComfyUI native)", "Wan 2.1/2.2 (ComfyUI native) [WanModel]", "Z-Image",
                 "Qwen-Image (ComfyUI native) [QwenImageTransformer2DModel]"):
        assert name in error, error


def test_the_krea2_node_still_takes_only_krea2(family_server):
    entry = family_server.run(family_prompt("wan", cache=FAST, node="Krea2CacheDiT"))
    assert "not a supported Krea-2 transformer" in prompt_error(entry)
