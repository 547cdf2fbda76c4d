"""Krea-2's text path computed once per batch of conds and reused: bit-identical in every call layout (real server).

Per layout, three things hold:
- with caching off, the node's latent equals the graph's without the node (reuse changes no bit);
- with caching on (mask ``fast``), the latent equals the same cached run with reuse switched
  off (a pass-through ``model_function_wrapper`` switches it off, as any such wrapper does);
- the record counts it: one computation per distinct batch of conds, every other call reused.
And when hooks change the text path's weights mid-run, every call computes it.
"""

from __future__ import annotations

import pytest
import torch
from helpers import FAST, OFF, latent_and_record
from devkit.krea2_prompts import TINY_MODEL, guided_prompt, krea2_prompt

pytestmark = pytest.mark.comfyui

STEPS = 8
LORA = "krea2_text_path_lora.safetensors"
DIFFUSERS_LOADER = {"class_type": "Krea2DiffusersLoader", "inputs": {"model_name": TINY_MODEL, "weight_dtype": "default"}}


def with_references(prompt: dict) -> dict:
    """Reference latents on cond and uncond (edit conditioning)."""
    prompt["30"] = {"class_type": "Krea2TestLatent", "inputs": {"seed": 5, "width": 64, "height": 64}}
    for name, cond in (("positive", "2"), ("negative", "3")):
        prompt[f"3{cond}"] = {"class_type": "ReferenceLatent", "inputs": {"conditioning": [cond, 0], "latent": ["30", 0]}}
        prompt["6"]["inputs"][name] = [f"3{cond}", 0]
    return prompt


def with_two_devices(prompt: dict) -> dict:
    prompt["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
    prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["20", 0]
    return prompt


def with_prompt_switch(prompt: dict) -> dict:
    """The positive prompt changes halfway (ConditioningSetTimestepRange): new conds mid-run."""
    prompt["21"] = {"class_type": "ConditioningSetTimestepRange", "inputs": {"conditioning": ["2", 0], "start": 0.0, "end": 0.5}}
    prompt["22"] = {"class_type": "Krea2TestConditioning", "inputs": {"seed": 9, "tokens": 8, "features": 120}}
    prompt["23"] = {"class_type": "ConditioningSetTimestepRange", "inputs": {"conditioning": ["22", 0], "start": 0.5, "end": 1.0}}
    prompt["24"] = {"class_type": "ConditioningCombine", "inputs": {"conditioning_1": ["21", 0], "conditioning_2": ["23", 0]}}
    prompt["6"]["inputs"]["positive"] = ["24", 0]
    return prompt


DUAL_CFG_NESTED = {"class_type": "DualCFGGuider", "inputs": {
    "cond1": ["2", 0], "cond2": ["8", 0], "negative": ["3", 0], "cfg_conds": 3.0, "cfg_cond2_negative": 2.0,
    "style": "nested"}}

# layout -> (prompt builder taking the cache node's inputs (None: no node), its calls, distinct batches)
LAYOUTS = {
    "cfg_1": (lambda cache, p: krea2_prompt(cfg=1.0, cache=cache, seed=61, prefix=p), 8, 1),
    "batched": (lambda cache, p: krea2_prompt(cfg=3.5, cache=cache, seed=62, prefix=p), 8, 1),
    "split": (lambda cache, p: krea2_prompt(cfg=3.5, neg_tokens=13, cache=cache, seed=63, prefix=p), 16, 2),
    "two_latents": (lambda cache, p: krea2_prompt(cfg=3.5, batch=2, cache=cache, seed=64, prefix=p), 8, 1),
    # cond1+cond2 batched, the 13-token negative apart: two batches per step.
    "three_conds": (lambda cache, p: guided_prompt(DUAL_CFG_NESTED, cache=cache, seed=65, prefix=p), 16, 2),
    "edit_references": (lambda cache, p: with_references(krea2_prompt(cfg=3.5, cache=cache, seed=66, prefix=p)),
                        8, 1),
    # Three batches: (first positive, negative) early, (second positive, negative) late, and
    # the step at the boundary, where ComfyUI runs both positives with the negative.
    "prompt_switch": (lambda cache, p: with_prompt_switch(krea2_prompt(cfg=3.5, cache=cache, seed=67, prefix=p)),
                      8, 3),
    # The pack's diffusers loader: the same reuse on diffusers' Krea2Transformer2DModel.
    "diffusers_loader": (lambda cache, p: krea2_prompt(cfg=3.5, neg_tokens=13, cache=cache, seed=70, prefix=p,
                                                       loader=DIFFUSERS_LOADER), 16, 2),
    # cond on one copy of the model, uncond on the other: each copy computes its own once.
    "two_devices": (lambda cache, p: with_two_devices(krea2_prompt(cfg=3.5, neg_tokens=13, cache=cache, seed=68,
                                                                   prefix=p)), 16, 2),
}


def reuse_switched_off(prompt: dict) -> dict:
    """The same graph with a pass-through model_function_wrapper before the Cache-DiT node."""
    prompt["25"] = {"class_type": "Krea2TestModelFunctionWrapper", "inputs": {"model": prompt["5"]["inputs"]["model"]}}
    prompt["5"]["inputs"]["model"] = ["25", 0]
    return prompt


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_the_text_path_is_reused_bit_identically(comfy_server, layout):
    build, calls, batches = LAYOUTS[layout]
    plain, _ = latent_and_record(comfy_server, build(None, f"text_{layout}_plain"))
    off, record = latent_and_record(comfy_server, build(OFF, f"text_{layout}_off"))
    assert record["calls"] == calls
    assert record["text_path"] == {"computed": batches, "reused": calls - batches, "off": None}
    assert torch.equal(off, plain), "reusing the text path must not change a bit"

    cached, record = latent_and_record(comfy_server, build(FAST, f"text_{layout}_fast"))
    assert record["cached_steps"] and record["text_path"]["reused"] == calls - batches
    recomputed, record = latent_and_record(comfy_server, reuse_switched_off(build(FAST, f"text_{layout}_fast_all")))
    assert record["text_path"] == {"computed": calls, "reused": 0,
                                   "off": "a model function wrapper can change the conditioning of any call"}
    assert torch.equal(cached, recomputed)


@pytest.fixture(scope="module")
def text_path_lora(comfy_server, tiny_shape):
    """A strong LoRA on the text path's projection (txtmlp), nothing else."""
    from devkit.krea2_synthetic import native_state_dict
    from safetensors.torch import save_file

    weights = native_state_dict(tiny_shape)
    generator = torch.Generator().manual_seed(12)
    lora = {}
    for layer in ("txtmlp.1", "txtmlp.3"):
        rows, cols = weights[f"{layer}.weight"].shape
        lora[f"diffusion_model.{layer}.lora_A.weight"] = torch.randn(4, cols, generator=generator) * 0.5
        lora[f"diffusion_model.{layer}.lora_B.weight"] = torch.randn(rows, 4, generator=generator) * 0.5
    save_file(lora, str(comfy_server.base_dir / "models" / "loras" / LORA))
    return LORA


def with_scheduled_hook(prompt: dict, lora: str) -> dict:
    """The positive cond carries a LoRA hook whose strength is 0 for the first half, 1 after."""
    prompt.update({
        "40": {"class_type": "CreateHookLoraModelOnly", "inputs": {"lora_name": lora, "strength_model": 1.0}},
        "41": {"class_type": "CreateHookKeyframe", "inputs": {"strength_mult": 0.0, "start_percent": 0.0}},
        "42": {"class_type": "CreateHookKeyframe",
               "inputs": {"strength_mult": 1.0, "start_percent": 0.5, "prev_hook_kf": ["41", 0]}},
        "43": {"class_type": "SetHookKeyframes", "inputs": {"hooks": ["40", 0], "hook_kf": ["42", 0]}},
        "44": {"class_type": "ConditioningSetProperties",
               "inputs": {"cond_NEW": ["2", 0], "strength": 1.0, "set_cond_area": "default", "hooks": ["43", 0]}},
    })
    prompt["6"]["inputs"]["positive"] = ["44", 0]
    return prompt


def test_a_hook_that_changes_the_text_path_weights_mid_run_recomputes_it(comfy_server, text_path_lora):
    build = lambda cache, p: with_scheduled_hook(krea2_prompt(cfg=1.0, cache=cache, seed=69, prefix=p),  # noqa: E731
                                                 text_path_lora)
    plain, _ = latent_and_record(comfy_server, build(None, "text_hook_plain"))
    unhooked, _ = latent_and_record(comfy_server, krea2_prompt(cfg=1.0, seed=69, prefix="text_hook_none"))
    assert not torch.equal(plain, unhooked), "the hook must change the image, or the check says nothing"
    off, record = latent_and_record(comfy_server, build(OFF, "text_hook_off"))
    assert torch.equal(off, plain), "the text path computed with the weights of each step"
    assert record["text_path"] == {"computed": STEPS, "reused": 0,
                                   "off": "hooks on the conditioning can change the weights between steps"}
