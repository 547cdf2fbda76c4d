"""The "Load Krea-2 (diffusers)" node in the real ComfyUI server, against ComfyUI's own loader.

The same seeded weights are written in every layout the node reads; each must sample
(KSampler, fp32, CPU) what UNETLoader samples from the original-format file. LoRAs go
through LoraLoaderModelOnly on both paths. Bad inputs must fail with one clear error.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from devkit.comfy_models import make_lora
from devkit.krea2_prompts import TINY_MODEL, krea2_prompt
from loader_prompts import LOADER_NODE, load_error, loader, relative_error, sample
from devkit.krea2_synthetic import diffusers_transformer, native_state_dict

pytestmark = pytest.mark.comfyui

TINY_SEED = 0  # the seed conftest's krea2_tiny.safetensors was generated with
EQUIVALENCE_TOLERANCE = 1e-4

NATIVE_PREFIXED = "krea2_tiny_prefixed.safetensors"
DIFFUSERS_FILE = "krea2_tiny_diffusers.safetensors"
DIFFUSERS_FOLDER = "krea2_tiny_pipeline"
FLUX_FILE = "flux_like.safetensors"
TRUNCATED_FILE = "krea2_truncated.safetensors"
FP8_FILE = "krea2_tiny_fp8_scaled.safetensors"
FOREIGN_FOLDER = "flux_transformer"
NATIVE_LORA = "krea2_lora_native.safetensors"
DIFFUSERS_LORA = "krea2_lora_diffusers.safetensors"


@pytest.fixture(scope="module")
def models(comfy_server, tiny_shape):
    """Every layout of the tiny Krea-2 (and the bad inputs), written into the server's model folders."""
    root = comfy_server.base_dir / "models"
    files, folders, loras = root / "diffusion_models", root / "diffusers", root / "loras"
    native = native_state_dict(tiny_shape, TINY_SEED)
    save_file({"model.diffusion_model." + k: v for k, v in native.items()}, str(files / NATIVE_PREFIXED))
    reference = diffusers_transformer(tiny_shape, TINY_SEED)
    save_file({k: v.contiguous() for k, v in reference.state_dict().items()}, str(files / DIFFUSERS_FILE))
    reference.save_pretrained(str(folders / DIFFUSERS_FOLDER / "transformer"), max_shard_size="1MB")
    (folders / DIFFUSERS_FOLDER / "model_index.json").write_text(json.dumps({"_class_name": "Krea2Pipeline"}))

    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(8, 8)}, str(files / FLUX_FILE))
    whole = (files / TINY_MODEL).read_bytes()
    (files / TRUNCATED_FILE).write_bytes(whole[: len(whole) * 2 // 3])
    quantized = dict(native)
    quantized["blocks.0.attn.wq.weight"] = quantized["blocks.0.attn.wq.weight"].to(torch.float8_e4m3fn)
    quantized["blocks.0.attn.wq.weight_scale"] = torch.tensor(1.0)
    save_file(quantized, str(files / FP8_FILE))
    (folders / FOREIGN_FOLDER).mkdir(exist_ok=True)
    (folders / FOREIGN_FOLDER / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel"}))

    save_file(make_lora(tiny_shape, native_names=True), str(loras / NATIVE_LORA))
    save_file(make_lora(tiny_shape, native_names=False), str(loras / DIFFUSERS_LORA))
    return root


def with_lora(prompt: dict, lora_name: str) -> dict:
    prompt["8"] = {"class_type": "LoraLoaderModelOnly",
                   "inputs": {"model": ["1", 0], "lora_name": lora_name, "strength_model": 1.0}}
    prompt["6"]["inputs"]["model"] = ["8", 0]
    return prompt


SAMPLING = {"steps": 4, "cfg": 2.0, "size": 48}


@pytest.fixture(scope="module")
def native_latent(comfy_server, models):
    return sample(comfy_server, krea2_prompt(**SAMPLING, prefix="native"))


# --- node contract -----------------------------------------------------------------------

def test_node_contract_and_listing(comfy_server, models):
    info = comfy_server.get(f"/object_info/{LOADER_NODE}")[LOADER_NODE]
    assert info["display_name"] == "Load Krea-2 (diffusers)" and info["category"] == "model/loaders/Krea-2"
    assert info["output"] == ["MODEL"] and all(info["output_tooltips"])
    required = info["input"]["required"]
    assert required["weight_dtype"][1]["options"] == ["default", "bf16", "fp16", "fp32"]
    assert all(spec[1].get("tooltip") for spec in required.values())
    listed = set(required["model_name"][1]["options"])
    assert {TINY_MODEL, NATIVE_PREFIXED, DIFFUSERS_FILE, DIFFUSERS_FOLDER, FP8_FILE} <= listed
    assert not {FLUX_FILE, FOREIGN_FOLDER} & listed


# --- equivalence with ComfyUI's own loader ---------------------------------------------------

@pytest.mark.parametrize("model_name", [TINY_MODEL, NATIVE_PREFIXED, DIFFUSERS_FILE, DIFFUSERS_FOLDER])
def test_every_layout_samples_like_the_native_loader(comfy_server, native_latent, model_name):
    latent = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(model_name), prefix="diffusers"))
    error = relative_error(latent, native_latent)
    print(f"{model_name}: relative error {error:.2e} against UNETLoader")
    assert error < EQUIVALENCE_TOLERANCE


def test_bf16_weights_stay_close_to_native(comfy_server, native_latent):
    latent = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(TINY_MODEL, "bf16"), prefix="bf16"))
    assert latent.dtype == torch.float32 and torch.isfinite(latent).all()
    assert 0 < relative_error(latent, native_latent) < 0.05  # bf16 rounding, not a different model


def test_cache_node_with_caching_off_is_bit_identical(comfy_server):
    plain = sample(comfy_server, krea2_prompt(**SAMPLING, loader=loader(DIFFUSERS_FOLDER), prefix="plain"))
    entry, [stats] = comfy_server.run_with_stats(krea2_prompt(
        **SAMPLING, loader=loader(DIFFUSERS_FOLDER), prefix="cache_off",
        cache={"residual_diff_threshold": 0.0, "steps_mask": "none"}))
    # The node did run on the diffusers model (every call through cache-dit), and cached nothing.
    assert (stats["model"], stats["status"], stats["cached_steps"]) == ("Krea-2 (diffusers)", "ok", [])
    assert stats["calls"] == SAMPLING["steps"] and stats["extra_calls"] == 0
    assert torch.equal(plain, comfy_server.saved_latent(entry, "7"))


# --- LoRA ------------------------------------------------------------------------------

@pytest.mark.parametrize("lora_name", [NATIVE_LORA, DIFFUSERS_LORA])
def test_lora_applies_like_on_the_native_model(comfy_server, native_latent, lora_name):
    native = sample(comfy_server, with_lora(krea2_prompt(**SAMPLING, prefix="lora_native"), lora_name))
    ours = sample(comfy_server, with_lora(krea2_prompt(**SAMPLING, loader=loader(DIFFUSERS_FILE),
                                                       prefix="lora_diffusers"), lora_name))
    assert relative_error(native, native_latent) > 1e-2, "the LoRA should change the result"
    assert relative_error(ours, native) < EQUIVALENCE_TOLERANCE
    assert "lora key not loaded" not in comfy_server.log_text()


# --- bad input ---------------------------------------------------------------------------

def test_quantized_file_points_to_load_diffusion_model(comfy_server, models):
    error = load_error(comfy_server, FP8_FILE, prefix="krea2_bad")
    assert FP8_FILE in error and "quantized" in error and "'Load Diffusion Model'" in error


def test_file_of_another_model_is_refused(comfy_server, models):
    error = load_error(comfy_server, FLUX_FILE, prefix="krea2_bad")
    assert error.startswith("ValueError: "), "the editor shows a plain type name, not the pack's folder path"
    assert f"{FLUX_FILE} is not a Krea-2 transformer checkpoint" in error
    assert "txtfusion.projector.weight" in error


def test_truncated_file_is_refused(comfy_server, models):
    error = load_error(comfy_server, TRUNCATED_FILE, prefix="krea2_bad")
    assert TRUNCATED_FILE in error and "truncated or corrupt" in error


def test_folder_of_another_model_is_refused(comfy_server, models):
    error = load_error(comfy_server, FOREIGN_FOLDER, prefix="krea2_bad")
    assert "FluxTransformer2DModel, not a Krea-2 transformer (Krea2Transformer2DModel)" in error
    assert FOREIGN_FOLDER in error


def test_unknown_name_fails_validation(comfy_server, models):
    with pytest.raises(RuntimeError, match=r"model_name must be a Krea-2 file in models/diffusion_models or a folder "
                       r"in models/diffusers \('no_such_model.safetensors' is neither\)"):
        comfy_server.queue(krea2_prompt(steps=1, loader=loader("no_such_model.safetensors")))


# --- placement by ComfyUI's model management ---------------------------------------------

PLACEMENT_SCRIPT = r"""
import json, sys, torch
import comfy.options
comfy.options.enable_args_parsing()
sys.argv = ["placement", "--cpu"]
from devkit.comfy_harness import load_pack
load_pack()
from krea2_cachedit.nodes.diffusers_model import load_krea2_diffusers

report = {{}}
for budget in (10**12, 300_000):  # everything fits / most Linear layers must stay offloaded
    patcher = load_krea2_diffusers({path!r})
    # Loading onto the meta device shows which weights ModelPatcher (and our patcher) moved.
    patcher.load(device_to=torch.device("meta"), lowvram_model_memory=budget)
    left = {{}}
    for module_name, module in patcher.model.named_modules():
        for name, param in module.named_parameters(recurse=False):
            if not param.is_meta:
                left[module_name + "." + name] = bool(getattr(module, "comfy_cast_weights", False))
    report[str(budget)] = left
print(json.dumps(report))
"""


def test_model_management_places_every_weight(comfy_root, comfy_server, models):
    """A weight left on the offload device must be one that ComfyUI casts at use time, or GPU runs fail."""
    import subprocess

    from devkit.comfy_harness import comfyui_python, repo_env

    script = PLACEMENT_SCRIPT.format(path=str(models / "diffusion_models" / DIFFUSERS_FILE))
    run = subprocess.run([comfyui_python(comfy_root), "-c", script], cwd=comfy_root, env=repo_env(),
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report[str(10**12)] == {}
    offloaded = report["300000"]
    assert offloaded, "a 300 kB budget should leave Linear layers offloaded"
    assert all(offloaded.values()), [name for name, casts in offloaded.items() if not casts]
