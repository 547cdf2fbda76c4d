"""How ComfyUI's samplers and guiders call the model, and what the node makes of it (real server).

Every call the sampler makes is attributed to the step it integrates: the
step's first evaluation at ``sigma[i]`` is the one cache-dit serves, and the
sampler's further evaluations of that step (heun's corrector at ``sigma[i+1]``,
intermediate sigmas, look-aheads) are computed in full beside the cache.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_harness import prompt_error
from helpers import FAST, FAST_8_CACHED
from record_checks import check_attribution
from devkit.krea2_prompts import guided_prompt, krea2_prompt

pytestmark = pytest.mark.comfyui

# Every sampler ComfyUI offers whose steps follow the schedule it is given. dpm_fast and
# dpm_adaptive pick their own sigmas (only the first and last of the schedule count), so there
# is no schedule step to attribute their calls to.
SCHEDULE_SAMPLERS = [
    "euler", "euler_cfg_pp", "euler_ancestral", "euler_ancestral_cfg_pp", "heun", "heunpp2", "exp_heun_2_x0",
    "exp_heun_2_x0_sde", "dpm_2", "dpm_2_ancestral", "lms", "dpmpp_2s_ancestral", "dpmpp_2s_ancestral_cfg_pp",
    "dpmpp_sde", "dpmpp_sde_gpu", "dpmpp_2m", "dpmpp_2m_cfg_pp", "dpmpp_2m_sde", "dpmpp_2m_sde_gpu",
    "dpmpp_2m_sde_heun", "dpmpp_2m_sde_heun_gpu", "dpmpp_3m_sde", "dpmpp_3m_sde_gpu", "ddpm", "lcm", "ipndm",
    "ipndm_v", "deis", "res_multistep", "res_multistep_cfg_pp", "res_multistep_ancestral",
    "res_multistep_ancestral_cfg_pp", "gradient_estimation", "gradient_estimation_cfg_pp", "er_sde", "seeds_2",
    "seeds_3", "sa_solver", "sa_solver_pece", "ddim", "uni_pc", "uni_pc_bh2",
]


def run_with_record(server, prompt, node_id="5") -> tuple[dict, dict]:
    """Run a prompt; its history entry and the stats record this very prompt published for ``node_id``."""
    entry, [record] = server.run_with_stats(prompt, node_id)
    return entry, record


@pytest.mark.parametrize("sampler", SCHEDULE_SAMPLERS)
def test_every_sampler_is_attributed_call_by_call(comfy_server, sampler):
    _, record = run_with_record(comfy_server, krea2_prompt(cfg=1.0, sampler=sampler, cache=FAST))
    check_attribution(record)
    assert record["cached_steps"] == FAST_8_CACHED


@pytest.mark.parametrize("sampler", ["heun", "dpmpp_2s_ancestral"])
def test_two_evaluation_samplers_with_split_cfg(comfy_server, sampler):
    """Split cond/uncond: each evaluation is two calls; the step's first pair is served, the second computed."""
    _, record = run_with_record(comfy_server, krea2_prompt(cfg=3.5, neg_tokens=13, sampler=sampler, cache=FAST))
    assert (record["cfg_mode"], record["has_separate_cfg"]) == ("split", True)
    check_attribution(record, streams=2)
    log = record["call_log"]
    last = record["steps"] - 1
    for step in range(record["steps"]):
        calls = [(branches, was_served) for s, branches, was_served, _, _ in log if s == step]
        # The last step integrates down to sigma 0 with a single evaluation.
        expected = [([0], True), ([1], True)] + ([([0], False), ([1], False)] if step < last else [])
        assert calls == expected, f"step {step}: {calls}"
    assert record["cached_steps"] == FAST_8_CACHED


def test_a_one_sigma_schedule_passes_through_untouched(comfy_server):
    """SplitSigmas at the last step hands the sampler one sigma: nothing is sampled, with or without the node."""
    split = {"class_type": "SplitSigmas", "inputs": {"sigmas": ["11", 0], "step": 8}}
    guider = {"class_type": "CFGGuider", "inputs": {"positive": ["2", 0], "negative": ["3", 0], "cfg": 1.0}}
    latents = []
    for cache in (None, FAST):
        prompt = guided_prompt(guider, cache=cache, sigmas_from=["14", 1], prefix=f"one_sigma_{cache is None}")
        prompt["14"] = split
        prompt_id = comfy_server.queue(prompt)
        entry = comfy_server.wait(prompt_id)
        assert prompt_error(entry) is None, prompt_error(entry)
        comfy_server.stats_for(prompt_id, runs=0)  # nothing sampled, nothing to report
        latents.append(comfy_server.saved_latent(entry, "7"))
    assert torch.equal(*latents)


GUIDERS = {
    "cfg_1": ({"class_type": "CFGGuider", "inputs": {"positive": ["2", 0], "negative": ["3", 0], "cfg": 1.0}},
              {"guider": "CFGGuider", "cfg": 1.0, "conds_per_step": 1}, "none"),
    "cfg_split": ({"class_type": "CFGGuider", "inputs": {"positive": ["2", 0], "negative": ["3", 0], "cfg": 3.5}},
                  {"guider": "CFGGuider", "cfg": 3.5, "conds_per_step": 2}, "split"),
    "basic": ({"class_type": "BasicGuider", "inputs": {"conditioning": ["2", 0]}},
              {"guider": "Guider_Basic", "conds_per_step": 1}, "none"),
    # cfg2 = 1 drops the negative: cond1 and cond2 (same length) run batched.
    "dual_cfg_two_conds": ({"class_type": "DualCFGGuider", "inputs": {
        "cond1": ["2", 0], "cond2": ["8", 0], "negative": ["3", 0], "cfg_conds": 3.0, "cfg_cond2_negative": 1.0,
        "style": "regular"}},
        {"guider": "Guider_DualCFG", "cfg1": 3.0, "cfg2": 1.0, "style": "regular", "conds_per_step": 2}, "batched"),
    # All three: the 13-token negative runs apart from the batched conds, a second stream.
    "dual_cfg_nested": ({"class_type": "DualCFGGuider", "inputs": {
        "cond1": ["2", 0], "cond2": ["8", 0], "negative": ["3", 0], "cfg_conds": 3.0, "cfg_cond2_negative": 2.0,
        "style": "nested"}},
        {"guider": "Guider_DualCFG", "cfg1": 3.0, "cfg2": 2.0, "style": "nested", "conds_per_step": 3}, "split"),
    "perp_neg": ({"class_type": "PerpNegGuider", "inputs": {
        "positive": ["2", 0], "negative": ["3", 0], "empty_conditioning": ["8", 0], "cfg": 3.5, "neg_scale": 1.0}},
        {"guider": "Guider_PerpNeg", "cfg": 3.5, "neg_scale": 1.0, "conds_per_step": 3}, "split"),
}


@pytest.mark.parametrize("name", list(GUIDERS))
def test_every_stock_guider_reports_the_guidance_it_uses_and_caches_every_stream(comfy_server, name):
    guider, guidance, mode = GUIDERS[name]
    _, record = run_with_record(comfy_server, guided_prompt(guider, cache=FAST, prefix=f"guider_{name}"))
    assert record["guidance"] == guidance
    assert record["cfg_mode"] == mode and record["has_separate_cfg"] == (mode == "split")
    assert record["cfg"] == guidance.get("cfg", guidance.get("cfg1", 1.0))
    # Every stream cache-dit serves is cached on the masked steps (a step counts when all are).
    assert record["cached_steps"] == FAST_8_CACHED
    check_attribution(record, streams=2 if mode == "split" else 1)


def test_the_same_node_under_another_id_reports_under_its_own_id(comfy_server):
    """ComfyUI may reuse a node's output for a node with the same inputs; the stats follow the id."""
    run_with_record(comfy_server, krea2_prompt(cache=FAST, seed=21))
    renamed = krea2_prompt(cache=FAST, seed=22)
    renamed["15"] = renamed.pop("5")
    renamed["6"]["inputs"]["model"] = ["15", 0]
    _, record = run_with_record(comfy_server, renamed, node_id="15")
    assert record["cached_steps"] == FAST_8_CACHED
