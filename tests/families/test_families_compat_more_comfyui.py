"""The other families through CacheDiTDBCache with what users put around a cache node: a LoRA in the
family's own keys, TorchCompileModel and multi-GPU sampling (real server, the seeded-random models of
devkit/comfy_models.py).

TorchCompileModel before and after the node on Wan, Z-Image, Flux.1 (its model compiled around
both wrapped lists) and Qwen-Image; two devices on Wan, Z-Image and Qwen-Image (Flux's and Chroma's,
one decision per block list, are in test_families_flux_comfyui and test_families_chroma_comfyui); a
LoRA in native keys on Z-Image, Flux.1 (both lists) and Qwen-Image (its LoRA format: module names
without a prefix); Wan's LoRA tests, before and after the node, are in test_families_compat_comfyui.
A Z-Image run takes 40-60 s on 2 CPU cores, so each check is the cheapest run that shows it on the
family's own path.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_models import FAMILY_MODELS
from devkit.family_prompts import FAMILIES, family_prompt
from helpers import (FAST, FAST_8_CACHED, OFF, check_one_stream_per_device, insert_after_loader, latent_and_record,
                     write_native_lora)
from devkit.krea2_prompts import with_lora

pytestmark = pytest.mark.comfyui

SEED = 51
# The weights a test LoRA changes, in each family's native names: attention and MLP outputs.
LORA_LAYERS = {
    "zimage": [f"layers.{block}.{layer}" for block in range(2) for layer in ("attention.out", "feed_forward.w2")],
    "flux1": [*(f"double_blocks.{block}.img_attn.proj" for block in range(2)),
              *(f"single_blocks.{block}.linear2" for block in range(3))],
    "qwen_image": [f"transformer_blocks.{block}.{layer}" for block in range(2)
                   for layer in ("attn.to_out.0", "img_mlp.net.2")],
}
# How a LoRA file names its keys: ComfyUI's own ``diffusion_model.`` prefix, or the family's LoRA format
# (Qwen-Image's LoRAs name its modules as they are, ``transformer_blocks.N...``, without a prefix).
LORA_PREFIX = {"qwen_image": ""}
lora_families = pytest.mark.parametrize("family", list(LORA_LAYERS), scope="module")


def run(server, prompt, node_id="5") -> tuple[torch.Tensor, dict | None]:
    return latent_and_record(server, prompt, node_id, timeout=900)


@pytest.fixture(scope="module")
def eager(family_server, family) -> tuple[torch.Tensor, dict]:
    """The reference: CFG 1, mask fast, no LoRA, not compiled."""
    return run(family_server, family_prompt(family, cache=FAST, seed=SEED, prefix=f"{family}_eager"))


# --- LoRA -------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def lora(family_server, family):
    """A rank-4 LoRA on ``LORA_LAYERS`` of ``family``, in ComfyUI's native key names.

    Sized so that each update is about as large as the weight it changes (std 1/sqrt(fan_in)).
    """
    checkpoint = family_server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS[family]
    return write_native_lora(family_server, checkpoint,
                             LORA_LAYERS[family], f"{family}_test_lora.safetensors",
                             prefix=LORA_PREFIX.get(family, "diffusion_model."))


@lora_families
def test_a_lora_in_the_familys_own_keys_changes_the_image_and_the_node_still_caches(family_server, family, eager,
                                                                                   lora):
    reference, _ = eager
    start = len(family_server.log_text())
    latent, record = run(family_server, with_lora(family_prompt(family, cache=FAST, seed=SEED, prefix=f"{family}_lora"),
                                                  lora, 1.0, "lora_first"))
    assert record["cached_steps"] == FAST_8_CACHED and record["model"] == FAMILIES[family].name
    assert torch.isfinite(latent).all()
    assert not torch.equal(latent, reference), "the LoRA must change the result, or the check says nothing"
    # ComfyUI's loader found its keys (an unmatched key is logged and changes nothing).
    assert "lora key not loaded" not in family_server.log_text()[start:]


# --- TorchCompileModel --------------------------------------------------------------------------

@pytest.mark.parametrize("family", ["wan", "zimage", "flux1", "qwen_image"], scope="module")
@pytest.mark.parametrize("place", ["before", "after"])
def test_torch_compile_model_before_or_after_the_node_caches_the_same_steps(family_server, family, eager, place):
    reference, eager_record = eager
    prompt = family_prompt(family, cache=FAST, seed=SEED, prefix=f"{family}_compiled_{place}")
    compile_node = {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}}
    if place == "before":
        insert_after_loader(prompt, "20", compile_node)
    else:
        prompt["20"] = {**compile_node, "inputs": {"model": ["5", 0], **compile_node["inputs"]}}
        prompt["6"]["inputs"]["model"] = ["20", 0]
    compiled, record = run(family_server, prompt)
    assert record["cached_steps"] == eager_record["cached_steps"] == FAST_8_CACHED
    assert record["block_evals"] == eager_record["block_evals"]
    assert float((compiled - reference).norm() / reference.norm()) < 1e-3


# --- multi-GPU ----------------------------------------------------------------------------------

def two_device_prompt(family, cache, prefix):
    """Split CFG (8 and 13 caption tokens) with a second device copy: cond on one device, uncond on the other."""
    prompt = family_prompt(family, cfg=3.5, neg_tokens=13, cache=cache, seed=71, prefix=f"{family}_{prefix}")
    return insert_after_loader(prompt, "20", {"class_type": "Krea2TestMultiGPU", "inputs": {}})


@pytest.mark.parametrize("family", ["wan", "zimage", "qwen_image"])
def test_two_devices_off_is_bit_identical_and_a_mask_caches_on_both(family_server, family):
    plain, _ = run(family_server, two_device_prompt(family, None, "mgpu_plain"), node_id=None)
    off, off_record = run(family_server, two_device_prompt(family, OFF, "mgpu_off"))
    assert off_record["device_count"] == 2 and off_record["cached_steps"] == []
    assert torch.equal(off, plain)
    _, record = run(family_server, two_device_prompt(family, FAST, "mgpu_fast"))
    check_one_stream_per_device(record, FAMILIES[family].name, FAST_8_CACHED)
