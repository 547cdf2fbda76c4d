"""Wan through CacheDiTDBCache with what users put around a cache node: LoRA before or after the node,
skip layer guidance, ControlNet-style patches and another step cache (real server, the tiny
seeded-random Wan). TorchCompileModel and multi-GPU sampling on Wan and the other families are family
scenarios (test_family_scenarios_comfyui).

The routing these exercise does not depend on the family; Wan is the one cheap to run (a Z-Image
run takes 40-60 s on 2 CPU cores).
"""

from __future__ import annotations

import pytest
import torch

from devkit.family_prompts import family_prompt
from helpers import EASYCACHE, FAST, FAST_8_CACHED, OFF, insert_after_loader, latent_and_record
from devkit.krea2_prompts import with_lora

pytestmark = pytest.mark.comfyui

LORA = "wan_tiny_lora.safetensors"


def run(server, prompt, node_id="5") -> tuple[torch.Tensor, dict | None]:
    return latent_and_record(server, prompt, node_id, timeout=900)


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
    _, record = run(family_server, insert_after_loader(family_prompt("wan", seed=91, cache=FAST), "20", EASYCACHE))
    assert record["status"] == "skipped" and "EasyCache" in record["warnings"][0]
    logged = family_server.log_text()[start:]
    assert f"Cache-DiT DBCache [node 5]: {record['warnings'][0]}" in logged, logged[-3000:]
    assert "Cache-DiT DBCache [node 5]: cached steps 0/8" in logged, logged[-3000:]
    assert "Krea-2 Cache-DiT" not in logged
