"""What is Qwen-Image's own through CacheDiTDBCache in the real server (the scenarios every family runs are in
test_family_scenarios_comfyui; the Edit 2511 model in test_qwen_image_edit_comfyui): a ControlNet's ``control``
added by its own block loop, and Edit's reference latents joining the cached stack.

Tiny seeded-random checkpoint (``family_server``; 128 wide, loaded at its size by the test node pack's loader);
random weights: what was cached and how calls were routed, never image quality.
"""

from __future__ import annotations

import pytest
import torch

from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, FAST_8_CACHED, OFF, run_ok

pytestmark = pytest.mark.comfyui


def test_qwen_image_controlnet_control_is_computed_in_full(family_server):
    """A ControlNet's ``control`` (an argument of the model call, not a patch) is added by Qwen-Image's
    own block loop after a chosen block: such calls run in full, exactly as without the node."""
    def with_control(prompt):
        prompt["21"] = {"class_type": "Krea2TestBlockControl", "inputs": {
            "conditioning": ["2", 0], "features": 128, "block": 1, "scale": 0.5}}
        prompt["6"]["inputs"]["positive"] = ["21", 0]
        return prompt

    plain = run_ok(family_server, with_control(family_prompt("qwen_image", seed=42, prefix="controlled")))
    entry, [stats] = family_server.run_with_stats(with_control(family_prompt("qwen_image", seed=42, cache=FAST)))
    assert torch.equal(family_server.saved_latent(entry, "7"), family_server.saved_latent(plain, "7"))
    assert stats["cached_steps"] == [] and stats["calls"] == 0
    assert any("control" in w and "computed in full" in w for w in stats["warnings"]), stats["warnings"]


def test_qwen_image_edit_reference_latents_join_the_cached_stack(family_server):
    """Qwen-Image Edit: a reference latent's tokens join the image tokens before the blocks, so the
    cache runs on the longer sequence: the mask's steps are cached, and off is exactly no node."""
    def with_reference(prompt):
        prompt["21"] = {"class_type": "Krea2TestLatent", "inputs": {"seed": 5, "width": 64, "height": 64}}
        for cond, node in (("2", "22"), ("3", "23")):
            prompt[node] = {"class_type": "ReferenceLatent", "inputs": {"conditioning": [cond, 0],
                                                                        "latent": ["21", 0]}}
        prompt["6"]["inputs"].update(positive=["22", 0], negative=["23", 0])
        return prompt

    plain = run_ok(family_server, with_reference(family_prompt("qwen_image", seed=43, prefix="edit")))
    off, [off_stats] = family_server.run_with_stats(with_reference(
        family_prompt("qwen_image", seed=43, cache=OFF, prefix="edit_off")))
    assert torch.equal(family_server.saved_latent(off, "7"), family_server.saved_latent(plain, "7"))
    assert off_stats["cached_steps"] == [] and off_stats["calls"] == 8
    _, [stats] = family_server.run_with_stats(with_reference(family_prompt("qwen_image", seed=43, cache=FAST)))
    spec = FAMILIES["qwen_image"]
    assert stats["status"] == "ok" and stats["model"] == spec.name and stats["steps"] == 8
    assert stats["block_evals_uncached"] == stats["calls"] * spec.blocks
    assert stats["cached_steps"] == FAST_8_CACHED and stats["calls"] == 8
