"""Qwen-Image Edit 2511 with a reference image in the real ComfyUI server: the reference latent
(ComfyUI's ``ReferenceLatent``, as ``TextEncodeQwenImageEditPlus`` adds it) joins the image tokens
before the block stack, and the final layer's output is sliced back to the image's tokens.

ComfyUI tells Edit 2511 from Qwen-Image by one key, ``__index_timestep_zero__`` (its reference
tokens are modulated with timestep 0: the blocks get a doubled modulation and the index where the
reference starts). The stand-in is the family tests' narrow Qwen-Image checkpoint with that key. CFG 1:
- ComfyUI detects the stand-in as 2511 (its latent differs from Qwen-Image's on the same weights);
- the cache node with caching off is bit-identical to the graph without it, reference included;
- the ``fast`` mask caches its step of 4 with the reference;
- the Forecast node forecasts its preset's steps with the reference (its final layer reads a
  forecast of the image and reference tokens, the model slices the reference off).
Qwen-Image's own reference method (``index``: references on cond and uncond, off and the mask at 8
steps) is checked in ``test_families_qwen_image_comfyui.py``.
"""

from __future__ import annotations

import pytest
import torch

from devkit.family_prompts import FAMILIES, family_prompt
from helpers import FAST, OFF, latent_and_record
from devkit.krea2_prompts import with_forecast
from record_checks import check_forecast

pytestmark = pytest.mark.comfyui

FAMILY = "qwen_image"
EDIT_2511 = "qwen_image_edit_2511_tiny.safetensors"
SEED = 73
OFF_STEPS = 2
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1


@pytest.fixture(scope="module")
def edit_server(family_server):
    """``family_server`` with the Edit 2511 stand-in (ComfyUI lists the folder again when it changes)."""
    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    models = family_server.base_dir / "models" / "diffusion_models"
    state = load_file(str(models / FAMILIES[FAMILY].model))
    with safe_open(str(models / FAMILIES[FAMILY].model), "pt") as checkpoint:
        metadata = checkpoint.metadata()   # the stand-in's size, for the test node pack's loader
    state["__index_timestep_zero__"] = torch.tensor([])
    save_file(state, str(models / f".{EDIT_2511}.part"), metadata=metadata)
    del state
    (models / f".{EDIT_2511}.part").rename(models / EDIT_2511)
    return family_server


def edit_prompt(steps: int, cache: dict | None = None, model: str = EDIT_2511, prefix: str = "edit") -> dict:
    """The Qwen-Image graph at CFG 1 with a 64x64 reference latent on the positive conditioning."""
    prompt = family_prompt(FAMILY, cfg=1.0, steps=steps, seed=SEED, cache=cache, model=model, prefix=prefix)
    prompt["30"] = {"class_type": "Krea2TestLatent", "inputs": {"seed": 5, "width": 64, "height": 64}}
    prompt["31"] = {"class_type": "ReferenceLatent", "inputs": {"conditioning": ["2", 0], "latent": ["30", 0]}}
    prompt["6"]["inputs"]["positive"] = ["31", 0]
    return prompt


def check_record(record: dict, steps: int):
    assert (record["status"], record["model"], record["steps"]) == ("ok", FAMILIES[FAMILY].name, steps)
    assert (record["cfg_mode"], record["calls"], record["extra_calls"]) == ("none", steps, 0)


def test_caching_off_is_bit_identical_with_the_reference(edit_server):
    plain, _ = latent_and_record(edit_server, edit_prompt(OFF_STEPS, prefix="edit_plain"), timeout=900)
    qwen, _ = latent_and_record(edit_server, edit_prompt(OFF_STEPS, model=FAMILIES[FAMILY].model, prefix="edit_qwen"),
                                timeout=900)
    assert not torch.equal(plain, qwen), "ComfyUI should detect the stand-in as Edit 2511 (timestep 0 on references)"
    off, record = latent_and_record(edit_server, edit_prompt(OFF_STEPS, cache=OFF, prefix="edit_off"), timeout=900)
    check_record(record, OFF_STEPS)
    assert record["cached_steps"] == []
    assert torch.equal(off, plain), "the node with caching off must not change the latent"


def test_the_mask_caches_with_the_reference(edit_server):
    latent, record = latent_and_record(edit_server, edit_prompt(STEPS, cache=FAST, prefix="edit_fast"), timeout=900)
    check_record(record, STEPS)
    assert record["cached_steps"] == MASK_CACHED
    assert record["block_evals"] == STEPS * 2 - len(MASK_CACHED), "a cached step runs the first block only"
    assert torch.isfinite(latent).all()


def test_the_spectrum_node_forecasts_with_the_reference(edit_server):
    """turbo_5_of_8: steps 2, 4 and 6 forecast, each a call that runs no block."""
    prompt = with_forecast(edit_prompt(8, cache={}, prefix="edit_spectrum"))
    latent, record = latent_and_record(edit_server, prompt, timeout=900)
    check_forecast(record, FAMILY, calls_per_step=1)
    assert torch.isfinite(latent).all()
