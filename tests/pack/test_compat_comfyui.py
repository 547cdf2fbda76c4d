"""The node with the rest of ComfyUI (real server): model patches that use block indices,
LoRAs before or after it, fp8 weights, and edit (reference latent) conditioning.

Each check compares against the same graph without the node, or without the patch,
LoRA or reference, as its reference.
"""

from __future__ import annotations

import json
from collections import defaultdict

import pytest
import torch

from helpers import FAST, FAST_8_CACHED, OFF, latent_and_record as run
from devkit.krea2_prompts import krea2_prompt, with_lora

pytestmark = pytest.mark.comfyui

TINY_BLOCKS = 4


# --- model patches that use block indices ----------------------------------------------------

def with_probe(prompt: dict, log_path, scale_block=-1, scale=1.0) -> dict:
    """Krea2TestAttentionProbe right after the loader (before the Cache-DiT node, if any)."""
    prompt["20"] = {"class_type": "Krea2TestAttentionProbe", "inputs": {
        "model": ["1", 0], "log_path": str(log_path), "scale_block": scale_block, "scale": scale}}
    consumer = "5" if "5" in prompt else "6"
    prompt[consumer]["inputs"]["model"] = ["20", 0]
    return prompt


def seen_by_patches(log_path) -> dict[str, list]:
    """Per patch kind: for each model call (in order), the (block_index, total_blocks) it saw."""
    calls: dict[str, list] = defaultdict(list)
    last_sigma: dict[str, float] = {}
    for line in log_path.read_text().splitlines():
        event = json.loads(line)
        kind = event["kind"]
        if event["block_index"] == 0 or kind not in last_sigma or event["sigma"] != last_sigma[kind]:
            calls[kind].append([])
        last_sigma[kind] = event["sigma"]
        calls[kind][-1].append((event["block_index"], event["total_blocks"]))
    return calls


def test_patches_see_each_blocks_true_index_on_computed_and_cached_steps(comfy_server, tmp_path):
    plain_log, cached_log = tmp_path / "plain.jsonl", tmp_path / "cached.jsonl"
    run(comfy_server, with_probe(krea2_prompt(seed=31), plain_log))
    _, record = run(comfy_server, with_probe(krea2_prompt(cache={**FAST, "Bn_compute_blocks": 1}, seed=31),
                                             cached_log))
    assert record["cached_steps"] == FAST_8_CACHED
    every_block = [(i, TINY_BLOCKS) for i in range(TINY_BLOCKS)]
    plain, cached = seen_by_patches(plain_log), seen_by_patches(cached_log)
    for kind in ("attn1_patch", "attn1_output_patch"):
        assert plain[kind] == [every_block] * 8, kind
        # Computed steps run every block; cached ones the first (Fn 1) and last (Bn 1), under their own index.
        expected = [[(0, TINY_BLOCKS), (TINY_BLOCKS - 1, TINY_BLOCKS)] if step in FAST_8_CACHED else every_block
                    for step in range(8)]
        assert cached[kind] == expected, kind


def test_a_patch_on_a_chosen_block_acts_on_that_block(comfy_server, tmp_path):
    """With caching off, a patch scaling block 2's attention gives the image it gives without the node."""
    without, _ = run(comfy_server, with_probe(krea2_prompt(seed=32, prefix="scaled"), tmp_path / "a.jsonl", 2, 0.5))
    with_node, _ = run(comfy_server, with_probe(krea2_prompt(cache=OFF, seed=32, prefix="scaled_node"),
                                                tmp_path / "b.jsonl", 2, 0.5))
    unscaled, _ = run(comfy_server, with_probe(krea2_prompt(cache=OFF, seed=32, prefix="unscaled"),
                                               tmp_path / "c.jsonl"))
    assert torch.equal(with_node, without)
    assert not torch.equal(with_node, unscaled), "the patch must change the image, or the check says nothing"


# --- LoRAs ------------------------------------------------------------------------------------

LORA = "krea2_compat_lora.safetensors"


@pytest.fixture(scope="module")
def lora(comfy_server, tiny_shape):
    from safetensors.torch import save_file

    from devkit.comfy_models import make_lora

    save_file(make_lora(tiny_shape, native_names=True), str(comfy_server.base_dir / "models" / "loras" / LORA))
    return LORA


def lora_prompt(order: str, strength: float, seed: int, prefix: str) -> dict:
    """LoraLoaderModelOnly before ("lora_first") or after ("cache_first") the Cache-DiT node."""
    return with_lora(krea2_prompt(cache=FAST, seed=seed, prefix=prefix), LORA, strength, order)


def test_a_lora_before_or_after_the_node_gives_the_same_image(comfy_server, lora):
    before, before_record = run(comfy_server, lora_prompt("lora_first", 1.0, seed=41, prefix="lora_a"))
    after, after_record = run(comfy_server, lora_prompt("cache_first", 1.0, seed=41, prefix="lora_b"))
    no_lora, _ = run(comfy_server, krea2_prompt(cache=FAST, seed=41, prefix="lora_none"))
    assert torch.equal(before, after)
    assert before_record["cached_steps"] == after_record["cached_steps"] == FAST_8_CACHED
    assert not torch.equal(before, no_lora), "the LoRA must change the image, or the check says nothing"


def renumbered_cache_node(prompt: dict, node_id: str = "15") -> dict:
    """The same graph with the Cache-DiT node under another id: the same computation, which
    ComfyUI's own cache cannot serve from an earlier prompt."""
    prompt[node_id] = prompt.pop("5")
    for node in prompt.values():
        for name, value in node["inputs"].items():
            if value == ["5", 0]:
                node["inputs"][name] = [node_id, 0]
    return prompt


def test_a_lora_strength_change_between_runs_starts_a_fresh_cache(comfy_server, lora):
    first, _ = run(comfy_server, renumbered_cache_node(lora_prompt("cache_first", 0.5, seed=42, prefix="half_first")),
                   node_id="15")
    run(comfy_server, lora_prompt("cache_first", 1.0, seed=42, prefix="strength_1"))
    after_change, record = run(comfy_server, lora_prompt("cache_first", 0.5, seed=42, prefix="strength_half"))
    assert record["cached_steps"] == FAST_8_CACHED and record["cache_contexts"] == 1
    # Nothing of the strength-1 run carries over: the image is the one strength 0.5 gives first.
    assert torch.equal(after_change, first)


# --- fp8 weights ------------------------------------------------------------------------------

FP8_SCALED = "krea2_tiny_fp8_scaled.safetensors"


@pytest.fixture(scope="module")
def fp8_scaled(comfy_server, tiny_shape):
    from safetensors.torch import save_file

    from devkit.comfy_models import fp8_scaled_state_dict
    from devkit.krea2_synthetic import native_state_dict

    save_file(fp8_scaled_state_dict(native_state_dict(tiny_shape, seed=0)),
              str(comfy_server.base_dir / "models" / "diffusion_models" / FP8_SCALED))
    return FP8_SCALED


@pytest.mark.parametrize("model, weight_dtype", [("krea2_tiny.safetensors", "fp8_e4m3fn"),
                                                  (FP8_SCALED, "default")], ids=["fp8_e4m3fn", "fp8_scaled"])
def test_fp8_weights_cache_the_same_steps_and_measure_their_changes(comfy_server, fp8_scaled, model, weight_dtype):
    reference, reference_record = run(comfy_server, krea2_prompt(cache=FAST, seed=43, prefix="fp32"))
    prompt = krea2_prompt(cache=FAST, seed=43, model=model, prefix=f"fp8_{weight_dtype}")
    prompt["1"]["inputs"]["weight_dtype"] = weight_dtype
    latent, record = run(comfy_server, prompt)
    assert record["status"] == "ok" and record["cached_steps"] == reference_record["cached_steps"]
    assert all(d is not None and 0 < d < 10 for d in record["residual_diffs"][1:]), record["residual_diffs"]
    # Under a step mask the threshold decides no step, so there is no threshold to suggest.
    assert record["threshold_suggestions"] == [] == reference_record["threshold_suggestions"]
    # Quantized weights sample close to, not exactly, the fp32 image.
    assert 0 < float((latent - reference).norm() / reference.norm()) < 0.2


# --- edit (reference latent) conditioning -----------------------------------------------------

def with_references(prompt: dict, on: str, method: str, ref_size: int = 64) -> dict:
    """Reference latents (Krea2TestLatent, ``ref_size`` px) on "cond", "uncond" or "both"."""
    prompt["30"] = {"class_type": "Krea2TestLatent", "inputs": {"seed": 5, "width": ref_size, "height": ref_size}}
    for name, cond in (("cond", "2"), ("uncond", "3")):
        if on in (name, "both"):
            prompt[f"3{cond}"] = {"class_type": "ReferenceLatent",
                                  "inputs": {"conditioning": [cond, 0], "latent": ["30", 0]}}
            prompt[f"4{cond}"] = {"class_type": "FluxKontextMultiReferenceLatentMethod",
                                  "inputs": {"conditioning": [f"3{cond}", 0], "reference_latents_method": method}}
            prompt["6"]["inputs"]["positive" if name == "cond" else "negative"] = [f"4{cond}", 0]
    return prompt


EDIT_CASES = [(1.0, "cond", "none"), (3.5, "cond", "split"), (3.5, "uncond", "split"), (3.5, "both", "batched")]


@pytest.mark.parametrize("method", ["index", "index_timestep_zero"])
@pytest.mark.parametrize("cfg, on, mode", EDIT_CASES, ids=[f"cfg{c}_{o}" for c, o, _ in EDIT_CASES])
def test_edit_references_are_routed_and_cached(comfy_server, cfg, on, mode, method):
    seed = 50
    plain, _ = run(comfy_server, with_references(krea2_prompt(cfg=cfg, seed=seed, prefix="edit_plain"), on, method))
    off, off_record = run(comfy_server, with_references(krea2_prompt(cfg=cfg, cache=OFF, seed=seed,
                                                                     prefix="edit_off"), on, method))
    assert torch.equal(off, plain), "routing alone must not change the image"
    assert off_record["cfg_mode"] == mode
    _, record = run(comfy_server, with_references(krea2_prompt(cfg=cfg, cache=FAST, seed=seed,
                                                               prefix="edit_fast"), on, method))
    assert record["cfg_mode"] == mode and record["cached_steps"] == FAST_8_CACHED
    assert record["extra_calls"] == 0 and record["cache_contexts"] == 1


def test_a_reference_size_change_between_runs_starts_clean(comfy_server):
    prompt = lambda size, prefix: with_references(  # noqa: E731
        krea2_prompt(cfg=3.5, cache=FAST, seed=51, prefix=prefix), "both", "index", ref_size=size)
    first, _ = run(comfy_server, renumbered_cache_node(prompt(96, "ref_96_first")), node_id="15")
    run(comfy_server, prompt(64, "ref_64"))
    changed, record = run(comfy_server, prompt(96, "ref_96"))
    assert record["cached_steps"] == FAST_8_CACHED and record["cache_contexts"] == 1
    assert torch.equal(changed, first)
