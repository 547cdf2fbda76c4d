"""Wan through CacheDiTDBCache with what users put around a cache node: LoRA, TorchCompileModel,
multi-GPU sampling and skip layer guidance (real server, the tiny seeded-random Wan).

The routing these exercise does not depend on the family; Wan is the one cheap to run (a Z-Image
run takes 40-60 s on 2 CPU cores, see test_families_comfyui).
"""

from __future__ import annotations

import pytest
import torch

from comfy_harness import prompt_error
from family_prompts import family_prompt
from krea2_prompts import with_lora

pytestmark = pytest.mark.comfyui

FAST = {"steps_mask": "fast"}
FAST_8_CACHED = [3, 5, 6]
OFF = {"residual_diff_threshold": 0.0}
LORA = "wan_tiny_lora.safetensors"


def run(server, prompt, node_id="5") -> tuple[torch.Tensor, dict | None]:
    entry = server.run(prompt, timeout=900)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    if node_id is None:
        return server.saved_latent(entry, "7"), None
    [record] = server.stats_for(entry["prompt"][1], node_id)
    return server.saved_latent(entry, "7"), record


def insert_after_loader(prompt: dict, node_id: str, node: dict) -> dict:
    """``node`` (its "model" input left out) between the loader and the next node."""
    consumer = "5" if "5" in prompt else "6"
    prompt[node_id] = {**node, "inputs": {"model": prompt[consumer]["inputs"]["model"], **node["inputs"]}}
    prompt[consumer]["inputs"]["model"] = [node_id, 0]
    return prompt


# --- LoRA -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora(family_server):
    """A rank-4 LoRA on every block's self-attention q and FFN output, in ComfyUI's native key names."""
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(12)
    weights = {}
    for block in range(4):
        for layer, (rows, cols) in {"self_attn.q": (128, 128), "ffn.2": (128, 256)}.items():
            name = f"diffusion_model.blocks.{block}.{layer}"
            weights[f"{name}.lora_A.weight"] = torch.randn(4, cols, generator=generator) * 0.3
            weights[f"{name}.lora_B.weight"] = torch.randn(rows, 4, generator=generator) * 0.3
    save_file(weights, str(family_server.base_dir / "models" / "loras" / LORA))
    return LORA


def test_a_lora_before_or_after_the_node_gives_the_same_image(family_server, lora):
    def lora_prompt(order, prefix):
        return with_lora(family_prompt("wan", cfg=3.5, cache=FAST, seed=41, prefix=prefix), lora, 1.0, order)

    before, before_record = run(family_server, lora_prompt("lora_first", "lora_a"))
    after, after_record = run(family_server, lora_prompt("cache_first", "lora_b"))
    no_lora, _ = run(family_server, family_prompt("wan", cfg=3.5, cache=FAST, seed=41, prefix="lora_none"))
    assert torch.equal(before, after)
    assert before_record["cached_steps"] == after_record["cached_steps"] == FAST_8_CACHED
    assert not torch.equal(before, no_lora), "the LoRA must change the result, or the check says nothing"


# --- TorchCompileModel --------------------------------------------------------------------------

@pytest.mark.parametrize("place", ["before", "after"])
def test_torch_compile_model_before_or_after_the_node_caches_the_same_steps(family_server, place):
    eager, eager_record = run(family_server, family_prompt("wan", cache=FAST, seed=61, prefix="eager"))
    prompt = family_prompt("wan", cache=FAST, seed=61, prefix=f"compiled_{place}")
    compile_node = {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}}
    if place == "before":
        insert_after_loader(prompt, "20", compile_node)
    else:
        prompt["20"] = {**compile_node, "inputs": {"model": ["5", 0], **compile_node["inputs"]}}
        prompt["6"]["inputs"]["model"] = ["20", 0]
    compiled, record = run(family_server, prompt)
    assert record["cached_steps"] == eager_record["cached_steps"] == FAST_8_CACHED
    assert record["block_evals"] == eager_record["block_evals"]
    assert float((compiled - eager).norm() / eager.norm()) < 1e-3


# --- multi-GPU ----------------------------------------------------------------------------------

def two_device_prompt(cache, prefix):
    """Split CFG (a 13-token negative) with a second device copy: cond on one device, uncond on the other."""
    prompt = family_prompt("wan", cfg=3.5, neg_tokens=13, cache=cache, seed=71, prefix=prefix)
    return insert_after_loader(prompt, "20", {"class_type": "Krea2TestMultiGPU", "inputs": {}})


def test_two_devices_off_is_bit_identical_and_a_mask_caches_on_both(family_server):
    plain, _ = run(family_server, two_device_prompt(None, "mgpu_plain"), node_id=None)
    off, off_record = run(family_server, two_device_prompt(OFF, "mgpu_off"))
    assert off_record["device_count"] == 2 and off_record["cached_steps"] == []
    assert torch.equal(off, plain)
    _, record = run(family_server, two_device_prompt(FAST, "mgpu_fast"))
    devices = {d["device"]: d for d in record["devices"]}
    assert list(devices) == ["cpu", "cpu:1"] and record["model"] == "Wan 2.1/2.2 (ComfyUI native)"
    assert all(d["cached_steps"] == FAST_8_CACHED for d in devices.values())
    assert record["cached_steps"] == FAST_8_CACHED and record["cfg_mode"] == "split"


# --- skip layer guidance ----------------------------------------------------------------------

def test_skip_layer_guidance_extra_calls_run_the_models_own_loop(family_server):
    """SkipLayerGuidanceDiT replaces a block (``patches_replace``) in an extra cond call per step: that
    call runs the model's own loop in full; the sampler's calls are cached as without it."""
    slg = {"class_type": "SkipLayerGuidanceDiT", "inputs": {
        "double_layers": "1", "single_layers": "", "scale": 3.0, "start_percent": 0.0, "end_percent": 1.0,
        "rescaling_scale": 0.0}}
    plain, _ = run(family_server, insert_after_loader(family_prompt("wan", cfg=3.5, seed=81, prefix="slg"), "20",
                                                      slg), node_id=None)
    off, _ = run(family_server, insert_after_loader(family_prompt("wan", cfg=3.5, seed=81, cache=OFF), "20", slg))
    assert torch.equal(off, plain)
    _, record = run(family_server, insert_after_loader(family_prompt("wan", cfg=3.5, seed=81, cache=FAST), "20", slg))
    assert record["cached_steps"] == FAST_8_CACHED and record["calls"] == 8
    assert any("patches_replace.dit" in w for w in record["warnings"]), record["warnings"]


# --- the log -----------------------------------------------------------------------------------

def test_the_log_names_the_node_the_user_placed(family_server):
    """A Wan run of CacheDiTDBCache logs its warning (EasyCache on the same model: the node steps aside)
    and its summary as that node, not as Krea-2's."""
    start = len(family_server.log_text())
    easycache = {"class_type": "EasyCache", "inputs": {"reuse_threshold": 1.5, "start_percent": 0.15,
                                                       "end_percent": 0.95, "verbose": False}}
    _, record = run(family_server, insert_after_loader(family_prompt("wan", seed=91, cache=FAST), "20", easycache))
    assert record["status"] == "skipped" and "EasyCache" in record["warnings"][0]
    logged = family_server.log_text()[start:]
    assert f"Cache-DiT DBCache [node 5]: {record['warnings'][0]}" in logged, logged[-3000:]
    assert "Cache-DiT DBCache [node 5]: cached steps 0/8" in logged, logged[-3000:]
    assert "Krea-2 Cache-DiT" not in logged
