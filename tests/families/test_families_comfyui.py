"""The cache node on each family in the real ComfyUI server: Krea-2 (its own node, Krea2CacheDiT) and
the Cache-DiT DBCache node on Wan 2.1/2.2, Z-Image, Qwen-Image, Flux.1 and Flux.2 (Chroma's own checks
are in test_families_chroma_comfyui).

Tiny seeded-random checkpoints in each family's native format (devkit/comfy_models.py; Krea-2's is
the session's main test server's) that ComfyUI's UNETLoader detects as that model; the same graph as
the Krea-2 tests with each family's conditioning width and latent (devkit/family_prompts.py). Random
weights: these tests check what was cached and how calls were routed, never image quality. The checks
that are the same on every family run on Krea-2 too (``every_family``); the rest run on the other
families, Krea-2's own versions of them being in the Krea-2 test files.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_harness import prompt_error
from devkit.comfy_models import FAMILY_MODELS
from devkit.family_prompts import FAMILIES, SHARED, family_prompt
from helpers import FAST, FAST_8_CACHED, OFF, check_left_to_easycache, check_threshold_caching, run_ok
from record_checks import blocks_seen, with_probe

pytestmark = pytest.mark.comfyui

every_family = pytest.mark.parametrize("family", SHARED)
family_ids = pytest.mark.parametrize("family", [family for family in SHARED if family != "krea2"])
# Z-Image and Qwen-Image are detected only at full width: one of their runs takes 15-60 s on 2 CPU
# cores, so the checks that add little for them (the family-independent path) run on Wan alone.
wan_only = pytest.mark.parametrize("family", ["wan"])


@pytest.fixture
def server(request, comfy_root, family):
    """The session server that holds ``family``'s model: Krea-2's is the main test server."""
    return request.getfixturevalue("comfy_server" if family == "krea2" else "family_server")


def check_record(record: dict, family: str, steps: int = 8):
    spec = FAMILIES[family]
    assert record["status"] == "ok" and record["model"] == spec.name and record["steps"] == steps
    calls_per_step = record["calls"] // steps
    # Every call of a computed step runs every block; a cached one only the Fn (and Bn) blocks.
    assert record["block_evals_uncached"] == steps * calls_per_step * spec.blocks


@every_family
def test_cfg_1_is_one_stream(server, family):
    _, [stats] = server.run_with_stats(family_prompt(family, cfg=1.0, cache=FAST))
    check_record(stats, family)
    assert (stats["cfg"], stats["cfg_mode"], stats["has_separate_cfg"]) == (1.0, "none", False)
    assert stats["node_id"] == "5"
    assert stats["cached_steps"] == FAST_8_CACHED and stats["calls"] == 8
    assert all(call[1] == [0] for call in stats["call_log"]), "CFG 1 has no uncond pass"


@every_family
def test_cfg_batched_is_one_stream(server, family):
    _, [stats] = server.run_with_stats(family_prompt(family, cfg=3.5, cache=FAST))
    check_record(stats, family)
    assert (stats["cfg_mode"], stats["has_separate_cfg"]) == ("batched", False)
    assert stats["cached_steps"] == FAST_8_CACHED and stats["calls"] == 8
    assert stats["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"


@every_family
def test_cfg_split_by_conditioning_shape_uses_separate_cfg(server, family):
    """Conds of 8 and 13 tokens cannot batch (Z-Image: its token count is a per-call constant; Flux.2
    pads both to 512 tokens, so its negative is 600)."""
    neg_tokens = FAMILIES[family].split_tokens
    _, [stats] = server.run_with_stats(family_prompt(family, cfg=3.5, neg_tokens=neg_tokens, cache=FAST))
    check_record(stats, family)
    assert (stats["cfg_mode"], stats["has_separate_cfg"]) == ("split", True)
    assert stats["cached_steps"] == FAST_8_CACHED
    assert [c[1] for c in stats["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
    assert stats["calls"] == 16 and stats["extra_calls"] == 0
    assert {s["branches"][0] for s in stats["streams"]} == {0, 1}


# Krea-2's graph (seed 0) is the Krea-2 node tests' baseline: its uncached run serves both.
@pytest.mark.parametrize("family, cfg, neg_tokens, seed", [
    ("krea2", 3.5, 8, 0), ("wan", 1.0, 8, 3), ("wan", 3.5, 8, 3), ("wan", 3.5, 13, 3), ("zimage", 3.5, 13, 3),
    ("qwen_image", 3.5, 13, 3), ("flux1", 3.5, 8, 3), ("flux1", 3.5, 13, 3), ("flux2", 3.5, 8, 3),
    ("flux2", 3.5, 600, 3)],
    ids=["krea2-batched", "wan-cfg1", "wan-batched", "wan-split", "zimage-split", "qwen_image-split", "flux1-batched",
         "flux1-split", "flux2-batched", "flux2-split"])
def test_exact_when_caching_is_off(server, uncached_latent, family, cfg, neg_tokens, seed):
    plain = uncached_latent(server, family, cfg=cfg, neg_tokens=neg_tokens, seed=seed)
    entry, [stats] = server.run_with_stats(
        family_prompt(family, cfg=cfg, neg_tokens=neg_tokens, seed=seed, cache=OFF, prefix="off"))
    assert stats["cached_steps"] == [] and stats["calls"] == (8 if neg_tokens == 8 else 16)
    assert torch.equal(server.saved_latent(entry, "7"), plain)


@pytest.mark.parametrize("family, seed", [("krea2", 0), ("wan", 4)], ids=["krea2", "wan"])
def test_a_cached_run_differs_and_the_next_plain_run_is_unchanged(server, uncached_latent, family, seed):
    """Caching changes the result (the served residual is really used), and leaves the shared model clean:
    the graph without the node (as when the node is bypassed) gives the uncached latent again after it."""
    before = uncached_latent(server, family, cfg=3.5, seed=seed)
    cached = run_ok(server, family_prompt(family, cfg=3.5, seed=seed, cache={"steps_mask": "ultra"}))
    after = run_ok(server, family_prompt(family, cfg=3.5, seed=seed, prefix="after"))
    cached, after = (server.saved_latent(e, "7") for e in (cached, after))
    assert torch.equal(before, after)
    assert not torch.equal(cached, before) and torch.isfinite(cached).all()


@wan_only
def test_the_medium_mask_caches_its_steps(family_server, family):
    _, [stats] = family_server.run_with_stats(family_prompt(family, cache={"steps_mask": "medium"}))
    assert stats["cached_steps"] == [4, 6], "cache-dit's 'medium' mask for 8 steps"
    assert all(stats["step_reasons"][s] == "mask" for s in (4, 6))


@family_ids
def test_threshold_caching_decides_by_the_measured_change(family_server, family):
    """At threshold 2 every step the limits allow is cached; in between, each step after warmup is cached
    exactly when its measured change is below the threshold (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: family_server.run_with_stats(
        family_prompt(family, cache={"residual_diff_threshold": threshold}))[1][0], full=True)


@family_ids
def test_attention_sees_each_blocks_true_index_on_computed_and_cached_steps(family_server, family, tmp_path):
    """Flux: both lists skip their middle blocks on a cached step, and each block still sees its own list's
    index, size and type ("double" / "single"), as in the model's own loop."""
    lists = FAMILIES[family].block_lists
    plain_log, cached_log = tmp_path / "plain.jsonl", tmp_path / "cached.jsonl"
    run_ok(family_server, with_probe(family_prompt(family, seed=31), plain_log))
    bn = 1 if min(size for _, size in lists) > 2 else 0
    cache = {**FAST, "Bn_compute_blocks": bn}
    _, [record] = family_server.run_with_stats(with_probe(family_prompt(family, cache=cache, seed=31), cached_log))
    assert record["cached_steps"] == FAST_8_CACHED
    every_block = [(kind, i, size) for kind, size in lists for i in range(size)]
    assert blocks_seen(plain_log) == [every_block] * 8
    ran_when_cached = [(kind, i, size) for kind, size in lists for i in range(size) if i == 0 or i >= size - bn]
    expected = [ran_when_cached if step in FAST_8_CACHED else every_block for step in range(8)]
    assert blocks_seen(cached_log) == expected


@family_ids
def test_easycache_on_the_same_model_leaves_the_run_to_it(family_server, family):
    def with_easycache(prompt):
        prompt["14"] = {"class_type": "EasyCache", "inputs": {
            "model": ["1", 0], "reuse_threshold": 1.5, "start_percent": 0.15, "end_percent": 0.95, "verbose": False}}
        prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["14", 0]
        return prompt

    alone = run_ok(family_server, with_easycache(family_prompt(family, seed=40, prefix="alone")))
    entry, [stats] = family_server.run_with_stats(with_easycache(family_prompt(family, seed=40, cache=FAST)))
    saved = family_server.saved_latent
    check_left_to_easycache(stats, (saved(entry, "7"),), (saved(alone, "7"),))


@family_ids
def test_calls_with_a_patch_the_block_loop_applies_are_computed_in_full(family_server, family):
    """A ``double_block`` patch (a ControlNet's) runs in the model's loop between blocks, by index: the
    cache would skip it, so such calls run in full, exactly as without the node, and the stats say so.
    Flux's loop applies no such patch: there a ``patches_replace`` of its middle single block stands in."""
    flux = family.startswith("flux")
    patch = ({"class_type": "Krea2TestBlockReplace", "inputs": {"kind": "single_block", "block": 1, "scale": 0.5}}
             if flux else {"class_type": "Krea2TestDoubleBlockPatch", "inputs": {"block": 1, "scale": 0.5}})
    expected = "patches_replace.dit" if flux else "patches.double_block"

    def with_patch(prompt):
        prompt["20"] = {"class_type": patch["class_type"], "inputs": {"model": ["1", 0], **patch["inputs"]}}
        prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["20", 0]
        return prompt

    plain = run_ok(family_server, with_patch(family_prompt(family, seed=41, prefix="patched")))
    entry, [stats] = family_server.run_with_stats(with_patch(family_prompt(family, seed=41, cache=FAST)))
    assert torch.equal(family_server.saved_latent(entry, "7"), family_server.saved_latent(plain, "7"))
    assert stats["cached_steps"] == [] and stats["calls"] == 0
    assert any(expected in w and "computed in full" in w for w in stats["warnings"]), stats["warnings"]


def test_qwen_image_controlnet_control_is_computed_in_full(family_server):
    """A ControlNet's ``control`` (an argument of the model call, not a patch) is added by Qwen-Image's
    own block loop after a chosen block: such calls run in full, exactly as without the node."""
    def with_control(prompt):
        prompt["21"] = {"class_type": "Krea2TestBlockControl", "inputs": {
            "conditioning": ["2", 0], "features": 3072, "block": 1, "scale": 0.5}}
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
    check_record(stats, "qwen_image")
    assert stats["cached_steps"] == FAST_8_CACHED and stats["calls"] == 8


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
