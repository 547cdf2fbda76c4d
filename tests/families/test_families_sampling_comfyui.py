"""Samplers that call the model more than once per step, on Wan, Z-Image, Qwen-Image and Flux (real server).

As for Krea-2 (test_sampling_comfyui): each step's first evaluation at ``sigma[i]`` is the call
cache-dit serves; the sampler's further evaluations of the step (heun's corrector at
``sigma[i+1]``, dpm_2's midpoint, dpmpp_sde's intermediate sigma) are computed in full beside the
cache, and with caching off the image is the graph's without the node, bit for bit.
Wan covers the samplers and CFG layouts; Z-Image (a few seconds a call on 2 CPU cores) heun with
split CFG (conds of 8 and 13 caption tokens) over 3 steps, with caching off: every call routed as on
Wan, the further evaluations through the original ``layers``, bit-identical to the graph without
the node. Flux.1 and Flux.2 (two block lists, tiny): heun with split CFG, a mask cached in both lists
and caching off bit-identical; Qwen-Image (3072 wide): heun at CFG 1 over 3 steps with caching off.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_harness import prompt_error
from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, FAST_8_CACHED, OFF
from record_checks import check_two_evaluation_record

pytestmark = pytest.mark.comfyui

STEPS = 8


@pytest.mark.parametrize("sampler", ["heun", "dpm_2", "dpmpp_sde"])
@pytest.mark.parametrize("cfg, neg_tokens, branches, mode", [
    (1.0, 8, [[0]], "none"), (3.5, 8, [[1, 0]], "batched"), (3.5, 13, [[0], [1]], "split")],
    ids=["cfg1", "batched", "split"])
def test_wan_serves_each_steps_first_evaluation_and_computes_the_rest(family_server, sampler, cfg, neg_tokens,
                                                                      branches, mode):
    _, [record] = family_server.run_with_stats(
        family_prompt("wan", cfg=cfg, neg_tokens=neg_tokens, sampler=sampler, cache=FAST, prefix=f"wan_{sampler}"))
    check_two_evaluation_record(record, "wan", branches, mode)


def latents_plain_and_off(server, family: str, **prompt_args) -> tuple[torch.Tensor, torch.Tensor, dict]:
    plain = server.run(family_prompt(family, prefix=f"{family}_plain", **prompt_args), timeout=900)
    assert prompt_error(plain) is None, prompt_error(plain)
    entry, [record] = server.run_with_stats(family_prompt(family, cache=OFF, prefix=f"{family}_off", **prompt_args),
                                            timeout=900)
    return server.saved_latent(plain, "7"), server.saved_latent(entry, "7"), record


def test_wan_caching_off_with_a_two_evaluation_sampler_is_bit_identical(family_server):
    """Split CFG: each step is four calls, two served (both computing) and two computed around the cache."""
    plain, off, record = latents_plain_and_off(family_server, "wan", cfg=3.5, neg_tokens=13, sampler="heun", seed=5)
    assert record["cached_steps"] == [] and record["calls"] == 2 * (2 * STEPS - 1)
    assert torch.equal(off, plain)


def test_zimage_heun_with_split_cfg_routes_every_call_and_off_is_bit_identical(family_server):
    plain, off, record = latents_plain_and_off(family_server, "zimage", cfg=3.5, neg_tokens=13, sampler="heun",
                                               steps=3, seed=5)
    check_two_evaluation_record(record, "zimage", [[0], [1]], "split", steps=3, cached_steps=[])
    assert record["block_evals"] == record["calls"] * FAMILIES["zimage"].blocks
    assert torch.equal(off, plain)


@pytest.mark.parametrize("family", ["flux1", "flux2"])
def test_flux_heun_with_split_cfg_serves_first_evaluations_and_off_is_bit_identical(family_server, family):
    """Two block lists: the calls cache-dit serves go through both lists' wrappers, the corrector calls
    through the original lists; a masked step is cached in both lists, and off equals no node."""
    neg_tokens = FAMILIES[family].split_tokens
    _, [record] = family_server.run_with_stats(
        family_prompt(family, cfg=3.5, neg_tokens=neg_tokens, sampler="heun", cache=FAST, prefix=f"{family}_heun"))
    check_two_evaluation_record(record, family, [[0], [1]], "split")
    assert [(blocks["blocks"], blocks["cached_steps"]) for blocks in record["block_lists"]] == \
        [("double_blocks", FAST_8_CACHED), ("single_blocks", FAST_8_CACHED)]
    plain, off, record = latents_plain_and_off(family_server, family, cfg=3.5, neg_tokens=neg_tokens,
                                               sampler="heun", seed=5)
    assert record["cached_steps"] == [] and record["block_evals"] == record["calls"] * FAMILIES[family].blocks
    assert torch.equal(off, plain)


def test_qwen_image_heun_routes_every_call_and_off_is_bit_identical(family_server):
    """CFG 1 over 3 steps (Qwen-Image is 3072 wide even when shallow): routed as on Wan, off = no node."""
    plain, off, record = latents_plain_and_off(family_server, "qwen_image", cfg=1.0, sampler="heun", steps=3, seed=5)
    check_two_evaluation_record(record, "qwen_image", [[0]], "none", steps=3, cached_steps=[])
    assert record["block_evals"] == record["calls"] * FAMILIES["qwen_image"].blocks
    assert torch.equal(off, plain)
