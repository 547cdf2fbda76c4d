"""Krea-2 GGUF files through "Load Krea-2 (diffusers)" in the real ComfyUI server.

The tiny seeded Krea-2 is written as GGUF (``krea2_gguf_files``: city96's layout) and, as the
reference, as a safetensors file of the values the GGUF holds (decoded by the ``gguf``
package). A GGUF must sample what the safetensors loader samples from those values, stay
within its quantization's error of the original weights, cache with Krea-2 Cache-DiT as the
safetensors model does, and take LoRAs. Bad files fail with one clear error.
"""

from __future__ import annotations

import pytest
import torch
from safetensors.torch import save_file

from devkit.comfy_models import make_lora
from helpers import FAST, FAST_8_CACHED, OFF
from krea2_gguf_files import dequantized_state_dict, write_krea2_gguf
from devkit.krea2_prompts import TINY_MODEL, krea2_prompt
from loader_prompts import LOADER_NODE, load_error, loader, relative_error, sample
from devkit.krea2_synthetic import native_state_dict

pytestmark = pytest.mark.comfyui

TINY_SEED = 0  # the weights of conftest's krea2_tiny.safetensors
FILE_TYPES = ["F16", "Q8_0", "Q4_K"]
# Relative error of a 4-step latent against the original fp32 weights, per file type: above the
# type's own rounding (so the file really is quantized) and below what a wrong decode would give.
QUANTIZATION_ERROR = {"F16": (1e-5, 5e-3), "Q8_0": (1e-4, 2e-2), "Q4_K": (1e-3, 0.15)}
# Measured 0 (bit-identical), LoRAs included; decoding in float16 as diffusers' own helper does
# gives 1.3e-4 (Q8_0) and 4.2e-4 (Q4_K).
SAME_VALUES_TOLERANCE = 1e-6
SAMPLING = {"steps": 4, "cfg": 2.0, "size": 48}

FLUX_GGUF = "flux1-dev-Q8_0.gguf"
TRUNCATED_GGUF = "krea2_tiny-truncated.gguf"
LORA = "krea2_gguf_lora.safetensors"


def gguf_name(file_type: str) -> str:
    return f"krea2_tiny-{file_type}.gguf"


def reference_name(file_type: str) -> str:
    return f"krea2_tiny-{file_type}-values.safetensors"


@pytest.fixture(scope="module")
def models(comfy_server, tiny_shape):
    root = comfy_server.base_dir / "models"
    files = root / "diffusion_models"
    native = native_state_dict(tiny_shape, TINY_SEED)
    for file_type in FILE_TYPES:
        write_krea2_gguf(files / gguf_name(file_type), native, file_type)
        save_file(dequantized_state_dict(files / gguf_name(file_type)), str(files / reference_name(file_type)))
    write_krea2_gguf(files / FLUX_GGUF, {"double_blocks.0.img_attn.qkv.weight": torch.zeros(64, 64)}, "Q8_0",
                     architecture="flux")
    whole = (files / gguf_name("Q8_0")).read_bytes()
    (files / TRUNCATED_GGUF).write_bytes(whole[: len(whole) * 2 // 3])
    save_file(make_lora(tiny_shape, native_names=True), str(root / "loras" / LORA))
    return root


def with_lora(prompt: dict) -> dict:
    prompt["8"] = {"class_type": "LoraLoaderModelOnly",
                   "inputs": {"model": ["1", 0], "lora_name": LORA, "strength_model": 1.0}}
    consumer = "5" if "5" in prompt else "6"
    prompt[consumer]["inputs"]["model"] = ["8", 0]
    return prompt


@pytest.fixture(scope="module")
def original_latent(comfy_server, models):
    return sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(TINY_MODEL), prefix="gguf_original"))


def test_gguf_files_are_listed(comfy_server, models):
    info = comfy_server.get(f"/object_info/{LOADER_NODE}")[LOADER_NODE]
    listed = set(info["input"]["required"]["model_name"][1]["options"])
    assert {gguf_name(t) for t in FILE_TYPES} <= listed
    assert FLUX_GGUF not in listed and TRUNCATED_GGUF not in listed


@pytest.mark.parametrize("file_type", FILE_TYPES)
def test_gguf_samples_like_the_safetensors_loader(comfy_server, models, original_latent, file_type):
    ours = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(gguf_name(file_type)), prefix="gguf"))
    same_values = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(reference_name(file_type)),
                                                    prefix="gguf_values"))
    against_values = relative_error(ours, same_values)
    against_original = relative_error(ours, original_latent)
    print(f"{file_type}: relative error {against_values:.2e} against the safetensors loader on the file's values, "
          f"{against_original:.2e} against the original fp32 weights")
    assert against_values < SAME_VALUES_TOLERANCE
    low, high = QUANTIZATION_ERROR[file_type]
    assert low < against_original < high


def test_caching_off_is_bit_identical_to_no_node(comfy_server, models):
    plain = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(gguf_name("Q8_0")), prefix="gguf_plain"))
    entry, [stats] = comfy_server.run_with_stats(krea2_prompt(
        **SAMPLING, loader=loader(gguf_name("Q8_0")), prefix="gguf_cache_off", cache=OFF))
    assert (stats["model"], stats["status"], stats["cached_steps"]) == ("Krea-2 (diffusers)", "ok", [])
    assert stats["calls"] == SAMPLING["steps"] and stats["extra_calls"] == 0
    assert torch.equal(plain, comfy_server.saved_latent(entry, "7"))


def test_fast_mask_caches_what_it_caches_on_the_safetensors_model(comfy_server, models):
    _, [reference] = comfy_server.run_with_stats(krea2_prompt(
        loader=loader(reference_name("Q8_0")), cache=FAST, prefix="gguf_fast_values"))
    entry, [stats] = comfy_server.run_with_stats(krea2_prompt(
        loader=loader(gguf_name("Q8_0")), cache=FAST, prefix="gguf_fast"))
    assert reference["cached_steps"] == FAST_8_CACHED
    assert stats["status"] == "ok" and stats["cached_steps"] == FAST_8_CACHED
    assert stats["block_evals"] == reference["block_evals"] < stats["block_evals_uncached"]


def test_lora_on_a_gguf_applies_like_on_its_values(comfy_server, models):
    gguf, values = loader(gguf_name("Q8_0")), loader(reference_name("Q8_0"))
    plain = sample(comfy_server, krea2_prompt(**SAMPLING, loader=gguf, prefix="gguf_no_lora"))
    ours = sample(comfy_server, with_lora(krea2_prompt(**SAMPLING, loader=gguf, prefix="gguf_lora")))
    theirs = sample(comfy_server, with_lora(krea2_prompt(**SAMPLING, loader=values, prefix="gguf_values_lora")))
    again = sample(comfy_server, krea2_prompt(**SAMPLING, loader=gguf, prefix="gguf_no_lora_again"))
    print(f"LoRA on Q8_0: relative error {relative_error(ours, theirs):.2e} against the safetensors loader")
    assert relative_error(ours, plain) > 1e-2, "the LoRA should change the result"
    assert relative_error(ours, theirs) < SAME_VALUES_TOLERANCE
    assert torch.equal(again, plain), "the LoRA must leave the shared GGUF model unpatched afterwards"
    assert "lora key not loaded" not in comfy_server.log_text()


def test_lora_and_cache_node_together(comfy_server, models):
    gguf, values = loader(gguf_name("Q8_0")), loader(reference_name("Q8_0"))
    entry, [stats] = comfy_server.run_with_stats(with_lora(krea2_prompt(loader=gguf, cache=FAST, prefix="gguf_lf")))
    values_entry, [reference] = comfy_server.run_with_stats(
        with_lora(krea2_prompt(loader=values, cache=FAST, prefix="gguf_values_lf")))
    assert stats["cached_steps"] == reference["cached_steps"] == FAST_8_CACHED
    ours, theirs = comfy_server.saved_latent(entry, "7"), comfy_server.saved_latent(values_entry, "7")
    print(f"LoRA + fast mask on Q8_0: relative error {relative_error(ours, theirs):.2e}")
    assert relative_error(ours, theirs) < SAME_VALUES_TOLERANCE


# --- bad input ---------------------------------------------------------------------------

def test_gguf_of_another_architecture_is_refused(comfy_server, models):
    error = load_error(comfy_server, FLUX_GGUF, prefix="gguf_bad")
    assert f"{FLUX_GGUF} is a 'flux' GGUF, not a Krea-2 transformer" in error
    assert "'Unet Loader (GGUF)'" in error


def test_truncated_gguf_is_refused(comfy_server, models):
    error = load_error(comfy_server, TRUNCATED_GGUF, prefix="gguf_bad")
    assert TRUNCATED_GGUF in error and "not a readable GGUF file" in error and "truncated or corrupt" in error


# --- placement by ComfyUI's model management ---------------------------------------------

OFFLOAD_SCRIPT = r"""
import json, sys, torch
import comfy.options
comfy.options.enable_args_parsing()
sys.argv = ["offload", "--cpu"]
from devkit.comfy_harness import load_pack
load_pack()
import comfy.sd, comfy.utils
from krea2_cachedit.nodes.diffusers_model import load_krea2_diffusers

generator = torch.Generator().manual_seed(0)
x = torch.randn(1, 16, 8, 8, generator=generator)
context = torch.randn(1, 8, 120, generator=generator)
timestep = torch.tensor([0.6])
lora = comfy.utils.load_torch_file({lora!r})
report = {{}}

def call(patcher):
    with torch.no_grad():
        return patcher.model.diffusion_model(x, timestep, context)

base = load_krea2_diffusers({path!r})
before = call(base)
patched, _ = comfy.sd.load_lora_for_models(base, None, lora, 1.0, 0.0)
# Fully loaded: patches sit on the layers; the LoRA'd result is the reference.
patched.load(device_to=torch.device("cpu"), lowvram_model_memory=10**12, full_load=True)
full = call(patched)
# Partly unloaded afterwards (ComfyUI freeing memory): offloaded layers must keep the LoRA, once.
patched.partially_unload(torch.device("cpu"), memory_to_free=10**12)
report["after_partial_unload"] = (call(patched) - full).abs().max().item()
patched.unpatch_model(torch.device("cpu"))
report["lora_changes_result"] = (before - full).abs().max().item() > 1e-3
report["unpatched_equals_base"] = torch.equal(call(base), before)
# Loaded with a small budget from the start: offloaded layers get ComfyUI's LowVramPatch.
patched.load(device_to=torch.device("cpu"), lowvram_model_memory=300_000)
report["lowvram"] = bool(patched.model.model_lowvram)
report["lowvram_diff"] = (call(patched) - full).abs().max().item()
report["offloaded_castable"] = all(getattr(m, "comfy_cast_weights", False) for m in patched.model.modules()
                                   if hasattr(getattr(m, "weight", None), "quant_type"))
patched.unpatch_model(torch.device("cpu"))
print(json.dumps(report))
"""


def test_lora_survives_offloading_and_partial_unloads(comfy_root, comfy_server, models):
    """ComfyUI moves layers between full and partial loading on a GPU; the LoRA must apply exactly once."""
    import subprocess

    from devkit.comfy_harness import comfyui_python, repo_env

    script = OFFLOAD_SCRIPT.format(path=str(models / "diffusion_models" / gguf_name("Q8_0")),
                                   lora=str(models / "loras" / LORA))
    run = subprocess.run([comfyui_python(comfy_root), "-c", script], cwd=comfy_root, env=repo_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    import json

    report = json.loads(run.stdout.strip().splitlines()[-1])
    print(report)
    assert report["lowvram"] and report["offloaded_castable"]
    assert report["after_partial_unload"] == 0 and report["lowvram_diff"] == 0
    assert report["lora_changes_result"] and report["unpatched_equals_base"]
