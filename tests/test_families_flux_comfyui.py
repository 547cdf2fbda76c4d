"""Flux through CacheDiTDBCache beyond the family tests: two block lists in the record, the Flux.2
file with a guidance embedding, a ControlNet's ``control``, reference latents (real server, tiny
seeded-random Flux.1 dev, Flux.2 dev and Flux.2 Klein from tests/comfy_models.py).

The family tests (test_families_comfyui, families "flux1" and "flux2" = Klein) check CFG modes, the
step mask, the threshold, true block indices and types, EasyCache and loop patches.
"""

from __future__ import annotations

import pytest
import torch

from comfy_models import FAMILY_MODELS
from family_prompts import family_prompt
from helpers import FAST, FAST_8_CACHED, OFF, run_ok

pytestmark = pytest.mark.comfyui


def test_flux2_with_guidance_embedding_caches_both_lists_and_off_is_exact(family_server):
    """The Flux.2 file with guidance_in (dev) under the same config as Klein: the mask skips the middle
    blocks of both lists on its steps; caching off is bit-identical to no node."""
    dev = FAMILY_MODELS["flux2"]
    plain = run_ok(family_server, family_prompt("flux2", model=dev, cfg=3.5, seed=5, prefix="flux2dev_plain"))
    off, [off_stats] = family_server.run_with_stats(family_prompt("flux2", model=dev, cfg=3.5, seed=5, cache=OFF))
    assert off_stats["cached_steps"] == [] and off_stats["cfg_mode"] == "batched"
    assert torch.equal(family_server.saved_latent(off, "7"), family_server.saved_latent(plain, "7"))
    cached, [stats] = family_server.run_with_stats(family_prompt("flux2", model=dev, cfg=3.5, seed=5, cache=FAST))
    assert stats["cached_steps"] == FAST_8_CACHED
    assert [(b["blocks"], b["size"], b["cached_steps"]) for b in stats["block_lists"]] == [
        ("double_blocks", 2, FAST_8_CACHED), ("single_blocks", 3, FAST_8_CACHED)]
    # Fn 1, Bn 0: a cached call runs the first block of each list, a computed one all 5.
    assert stats["block_evals"] == 5 * 5 + 3 * 2
    latent = family_server.saved_latent(cached, "7")
    assert torch.isfinite(latent).all() and not torch.equal(latent, family_server.saved_latent(plain, "7"))


def test_a_list_that_computes_while_the_other_caches_is_counted_per_list(family_server):
    """Each list is its own cache context with its own residual: at a threshold, one list may skip a
    step the other computes. The run counts such a step as computed (cached_steps: every list skipped),
    the list's own entry counts it, and block_evals counts what ran."""
    _, [stats] = family_server.run_with_stats(family_prompt("flux1", cfg=1.0, seed=8,
                                                             cache={"residual_diff_threshold": 0.77}))
    double, single = (b["cached_steps"] for b in stats["block_lists"])
    assert set(double) != set(single), f"the lists decided alike at this threshold: {double}, {single}"
    assert stats["cached_steps"] == sorted(set(double) & set(single))
    # Fn 1, Bn 0, one call per step: a list that skips runs its first block only.
    ran = sum((1 if step in double else 2) + (1 if step in single else 3) for step in range(8))
    assert stats["block_evals"] == ran
    by_list = {(s["blocks"], tuple(s["cached_steps"])) for s in stats["streams"]}
    assert by_list == {("double_blocks", tuple(double)), ("single_blocks", tuple(single))}


def test_a_controlnet_control_is_computed_in_full(family_server):
    """A Flux ControlNet's ``control`` adds to the image tokens after chosen blocks in the model's own
    loop (a keyword of the model call, not a patch): calls carrying it run in full, as without the node."""
    def with_control(prompt):
        prompt["21"] = {"class_type": "Krea2TestBlockControl", "inputs": {"conditioning": ["2", 0], "block": 1,
                                                                         "features": 128, "scale": 0.5}}
        prompt["6"]["inputs"]["positive"] = ["21", 0]
        return prompt

    without = run_ok(family_server, family_prompt("flux1", seed=9, prefix="flux_nocontrol"))
    plain = run_ok(family_server, with_control(family_prompt("flux1", seed=9, prefix="flux_control")))
    assert not torch.equal(family_server.saved_latent(plain, "7"), family_server.saved_latent(without, "7")), \
        "the control must change the result, or the check says nothing"
    entry, [stats] = family_server.run_with_stats(with_control(family_prompt("flux1", seed=9, cache=FAST)))
    assert torch.equal(family_server.saved_latent(entry, "7"), family_server.saved_latent(plain, "7"))
    assert stats["cached_steps"] == [] and stats["calls"] == 0
    assert any("control" in w and "computed in full" in w for w in stats["warnings"]), stats["warnings"]


@pytest.mark.parametrize("method", ["offset", "index_timestep_zero"])
def test_reference_latents_are_cached(family_server, method):
    """Kontext / Flux.2 edit: reference latents join the image tokens ("offset"), or also get a zero
    timestep of their own (``timestep_zero_index``: the blocks take per-token modulation dims). Both
    are cached like any call: the reference tokens are part of each list's residual."""
    def with_reference(prompt):
        prompt["22"] = {"class_type": "EmptyFlux2LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}
        prompt["23"] = {"class_type": "ReferenceLatent", "inputs": {"conditioning": ["2", 0], "latent": ["22", 0]}}
        prompt["24"] = {"class_type": "FluxKontextMultiReferenceLatentMethod",
                        "inputs": {"conditioning": ["23", 0], "reference_latents_method": method}}
        prompt["6"]["inputs"]["positive"] = ["24", 0]
        return prompt

    plain = run_ok(family_server, with_reference(family_prompt("flux2", seed=10, prefix=f"flux_ref_{method}")))
    off, [off_stats] = family_server.run_with_stats(with_reference(family_prompt("flux2", seed=10, cache=OFF)))
    assert torch.equal(family_server.saved_latent(off, "7"), family_server.saved_latent(plain, "7"))
    cached, [stats] = family_server.run_with_stats(with_reference(family_prompt("flux2", seed=10, cache=FAST)))
    assert stats["cached_steps"] == FAST_8_CACHED and torch.isfinite(family_server.saved_latent(cached, "7")).all()


def test_multi_gpu_sampling_of_flux_runs_uncached_saying_why(family_server):
    """The devices' shared decision expects one cache-dit decision per call; Flux makes one per list."""
    def two_devices(prompt):
        prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
        prompt["5"]["inputs"]["model"] = ["20", 0]
        return prompt

    entry, [stats] = family_server.run_with_stats(two_devices(family_prompt("flux1", cfg=3.5, neg_tokens=13,
                                                                             seed=12, cache=FAST)))
    assert stats["status"] == "skipped" and stats["cached_steps"] == []
    assert any("several block lists" in w for w in stats["warnings"]), stats["warnings"]
    assert torch.isfinite(family_server.saved_latent(entry, "7")).all()
