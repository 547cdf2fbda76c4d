"""The shipped example workflows: valid against the real server's /object_info, and runnable.

Each example is converted from the graph editor's format to an API prompt with
/object_info's input order (the editor's ``widgets_values`` are positional) and
run on the CPU with small stand-ins for the multi-GB Comfy-Org files:

- diffusion model: the tiny generated Krea-2 (native single file) from conftest,
  read by ``UNETLoader`` and by ``Krea2DiffusersLoader`` alike;
- text encoder: Qwen3-VL-4B cannot shrink, so ``CLIPLoader`` is dropped and each
  ``CLIPTextEncode`` becomes ``Krea2TestConditioning`` of the tiny model's width;
- VAE: a random Wan 2.1 VAE (the Qwen-Image VAE's architecture) with the smallest
  base width, built by ComfyUI's own ``WanVAE`` class so ``VAELoader`` detects it
  exactly as it detects ``qwen_image_vae.safetensors``;
- resolution: 64x64. Steps, CFG, sampler and every Cache-DiT setting stay as shipped.
"""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import pytest
from comfy_harness import PACK_DIR_NAME, comfyui_python, prompt_error
from editor_format import UI_ONLY_TYPES, has_control_widget, ordered_inputs

pytestmark = pytest.mark.comfyui

REPO_ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = sorted((REPO_ROOT / "example_workflows").glob("*.json"))


def nodes_of_type(path: Path, node_type: str) -> list[dict]:
    return [node for node in json.loads(path.read_text())["nodes"] if node["type"] == node_type]

CONTROL_VALUES = {"fixed", "increment", "decrement", "randomize"}

# Model-file widgets hold the Comfy-Org Krea-2 names (the server here has none of those files).
COMFY_ORG = "https://huggingface.co/Comfy-Org/Krea-2/resolve/main/"
MODEL_WIDGETS = {
    ("UNETLoader", "unet_name"): {"krea2_turbo_bf16.safetensors", "krea2_raw_bf16.safetensors"},
    ("Krea2DiffusersLoader", "model_name"): {"krea2_turbo_bf16.safetensors", "krea2_raw_bf16.safetensors"},
    ("CLIPLoader", "clip_name"): {"qwen3vl_4b_bf16.safetensors"},
    ("VAELoader", "vae_name"): {"qwen_image_vae.safetensors"},
}
# What each example is about: (steps, cfg, the preset "auto" must resolve to, model family in the stats).
EXPECTED = {
    "krea2_turbo_cachedit.json": (8, 1.0, "turbo", "Krea-2 (ComfyUI native)"),
    "krea2_raw_cachedit.json": (52, 3.5, "raw", "Krea-2 (ComfyUI native)"),
    "krea2_diffusers_cachedit.json": (8, 1.0, "turbo", "Krea-2 (diffusers)"),
    "krea2_turbo_compare.json": (8, 1.0, "turbo", "Krea-2 (ComfyUI native)"),
}
# Examples that sample with and without Cache-DiT and compare the two images.
COMPARE_EXAMPLES = [path for path in EXAMPLES if nodes_of_type(path, "Krea2CompareImages")]
TINY_UNET = "krea2_tiny.safetensors"  # written by conftest's comfy_server
TINY_VAE = "krea2_test_wan21_vae.safetensors"
TEST_SIZE = 64


# --- the editor's format -------------------------------------------------------------

def widget_values(node: dict, info: dict) -> dict[str, tuple]:
    """name -> (value, control value or None), read positionally from ``widgets_values``."""
    values = list(node.get("widgets_values", []))
    out = {}
    for name, kind, opts, is_widget in ordered_inputs(info):
        if not is_widget:
            continue
        assert values, f"node {node['id']} ({node['type']}): no widget value for '{name}'"
        value = values.pop(0)
        out[name] = (value, values.pop(0) if has_control_widget(name, kind, opts) else None)
    assert not values, f"node {node['id']} ({node['type']}): {len(values)} widget values left over: {values}"
    return out


def to_api_prompt(workflow: dict, object_info: dict) -> dict:
    """The API prompt the editor would queue for this workflow."""
    links = {link[0]: link for link in workflow["links"]}  # [id, src, src_slot, dst, dst_slot, type]
    prompt = {}
    for node in workflow["nodes"]:
        if node["type"] in UI_ONLY_TYPES:
            continue
        assert node.get("mode", 0) == 0, f"node {node['id']} is muted or bypassed"
        info = object_info[node["type"]]
        linked = {inp["name"]: links[inp["link"]] for inp in node.get("inputs", []) if inp.get("link") is not None}
        widgets = widget_values(node, info)
        inputs = {}
        for name, _, _, is_widget in ordered_inputs(info):
            if name in linked:  # a socket, or a widget converted to an input: the link wins
                inputs[name] = [str(linked[name][1]), linked[name][2]]
            elif is_widget:
                inputs[name] = widgets[name][0]
        prompt[str(node["id"])] = {"class_type": node["type"], "inputs": inputs}
    return prompt


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def nodes_of(workflow: dict, node_type: str) -> list[dict]:
    return [node for node in workflow["nodes"] if node["type"] == node_type]


# --- fixtures --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def object_info(comfy_server) -> dict:
    return comfy_server.get("/object_info")


# Run by ComfyUI's interpreter in a child process, so the test process stays free of
# ComfyUI's globals. ComfyUI's layers skip weight init (they hold whatever memory held),
# so every tensor is set here: unit norms, zero biases, fan-in scaled convolutions.
TINY_VAE_SCRIPT = """
import sys, torch
from comfy.cli_args import args
args.cpu = True
from comfy.ldm.wan.vae import WanVAE
from safetensors.torch import save_file

vae = WanVAE(dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
             temperal_downsample=[False, True, True])
generator = torch.Generator().manual_seed(0)

def init(name, tensor):
    if name.endswith("gamma"):
        return torch.ones_like(tensor)
    if name.endswith("bias"):
        return torch.zeros_like(tensor)
    return torch.randn(tensor.shape, generator=generator) / tensor[0].numel() ** 0.5

save_file({name: init(name, t).contiguous() for name, t in vae.state_dict().items()}, sys.argv[1])
"""


@pytest.fixture(scope="module")
def tiny_vae(comfy_server, comfy_root) -> str:
    """A random Wan 2.1 VAE (base width 8 instead of 96) in the server's models/vae."""
    target = comfy_server.base_dir / "models" / "vae" / TINY_VAE
    subprocess.run([comfyui_python(comfy_root), "-c", TINY_VAE_SCRIPT, str(target)], cwd=comfy_root,
                   check=True, capture_output=True, timeout=120)
    return TINY_VAE


# --- checks ----------------------------------------------------------------------------

def test_examples_are_shipped():
    assert {path.name for path in EXAMPLES} == set(EXPECTED)


def test_examples_are_offered_as_templates(comfy_server):
    """ComfyUI lists a pack's example_workflows/ in the editor's template browser and serves them."""
    listed = comfy_server.get("/workflow_templates")
    assert sorted(listed.get(PACK_DIR_NAME, [])) == sorted(path.stem for path in EXAMPLES), listed
    for path in EXAMPLES:
        assert comfy_server.get(f"/api/workflow_templates/{PACK_DIR_NAME}/{path.name}") == load(path)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_matches_object_info(path, object_info):
    workflow = load(path)
    assert workflow["version"] == 0.4
    by_id = {node["id"]: node for node in workflow["nodes"]}
    assert len(by_id) == len(workflow["nodes"]), "duplicate node ids"
    assert workflow["last_node_id"] >= max(by_id)
    assert workflow["last_link_id"] >= max(link[0] for link in workflow["links"])

    for node in workflow["nodes"]:
        if node["type"] in UI_ONLY_TYPES:
            continue
        assert node["type"] in object_info, f"unknown node type {node['type']}"
        info = object_info[node["type"]]
        specs = {name: (kind, opts) for name, kind, opts, _ in ordered_inputs(info)}
        for name, (value, control) in widget_values(node, info).items():
            where = f"{path.name} node {node['id']} ({node['type']}).{name} = {value!r}"
            kind, opts = specs[name]
            if (node["type"], name) in MODEL_WIDGETS:
                assert value in MODEL_WIDGETS[node["type"], name], where
                # The editor offers the download from properties.models when the file is missing.
                models = {m["name"]: m for m in node["properties"].get("models", [])}
                assert value in models, where
                assert models[value]["url"] == f"{COMFY_ORG}{models[value]['directory']}/{value}", where
            elif kind == "COMBO":
                assert value in opts["options"], f"{where} not in {opts['options']}"
            elif kind in ("INT", "FLOAT"):
                assert isinstance(value, (int, float)) and not isinstance(value, bool), where
                assert kind == "FLOAT" or isinstance(value, int), where
                assert opts.get("min", float("-inf")) <= value <= opts.get("max", float("inf")), where
            elif kind == "BOOLEAN":
                assert isinstance(value, bool), where
            else:
                assert isinstance(value, str), where
            assert control is None or control in CONTROL_VALUES, where

        linked = {inp["name"] for inp in node.get("inputs", []) if inp.get("link") is not None}
        for name, _, _, is_widget in ordered_inputs(info):
            required = name in info["input"].get("required", {})
            assert is_widget or not required or name in linked, f"{path.name} node {node['id']}: '{name}' unlinked"

    for link_id, src, src_slot, dst, dst_slot, kind in workflow["links"]:
        assert object_info[by_id[src]["type"]]["output"][src_slot] == kind, f"link {link_id}"
        target = by_id[dst]["inputs"][dst_slot]
        assert target["link"] == link_id and target["type"] in (kind, "*"), f"link {link_id}"
        assert link_id in by_id[src]["outputs"][src_slot]["links"], f"link {link_id}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_settings(path, object_info):
    """The Krea-2 sampling recipe of each example, and Cache-DiT left on "auto" with its defaults."""
    workflow = load(path)
    steps, cfg, _, _ = EXPECTED[path.name]
    samplers = nodes_of(workflow, "KSampler")
    assert samplers
    for sampler in samplers:
        values = {k: v[0] for k, v in widget_values(sampler, object_info["KSampler"]).items()}
        recipe = (values["steps"], values["cfg"], values["sampler_name"], values["scheduler"])
        assert recipe == (steps, cfg, "euler", "simple"), f"KSampler {sampler['id']}"
    for loader in nodes_of(workflow, "CLIPLoader"):
        assert widget_values(loader, object_info["CLIPLoader"])["type"][0] == "krea2"
    (cache,) = nodes_of(workflow, "Krea2CacheDiT")
    cache_info = object_info["Krea2CacheDiT"]
    values = {k: v[0] for k, v in widget_values(cache, cache_info).items()}
    # A preset only fills inputs left at their defaults, so an example must not change any.
    defaults = {name: opts["default"] for name, _, opts, is_widget in ordered_inputs(cache_info) if is_widget}
    assert values == defaults and values["preset"] == "auto"
    # The cache node sits between the model loader and one sampler.
    prompt = to_api_prompt(workflow, object_info)
    cached = [s for s in samplers if prompt[str(s["id"])]["inputs"]["model"][0] == str(cache["id"])]
    assert len(cached) == 1, "exactly one KSampler samples through the Krea2CacheDiT node"
    loader = prompt[prompt[str(cache["id"])]["inputs"]["model"][0]]["class_type"]
    assert loader == ("Krea2DiffusersLoader" if "diffusers" in path.name else "UNETLoader")


@pytest.mark.parametrize("path", COMPARE_EXAMPLES, ids=lambda p: p.stem)
def test_compare_example_differs_only_by_the_cache_node(path, object_info):
    """Two samplers, one through Cache-DiT: same model, conds, latent, seed and VAE, then compared."""
    prompt = to_api_prompt(load(path), object_info)
    samplers = {n: node["inputs"] for n, node in prompt.items() if node["class_type"] == "KSampler"}
    cache_id = next(n for n, node in prompt.items() if node["class_type"] == "Krea2CacheDiT")
    (cached,) = [n for n, inputs in samplers.items() if inputs["model"][0] == cache_id]
    (uncached,) = [n for n in samplers if n != cached]
    assert samplers[uncached]["model"] == prompt[cache_id]["inputs"]["model"], "the uncached sampler skips the node"
    assert {k: v for k, v in samplers[cached].items() if k != "model"} == \
        {k: v for k, v in samplers[uncached].items() if k != "model"}
    seed = samplers[cached]["seed"]
    assert isinstance(seed, list) and prompt[seed[0]]["class_type"] == "PrimitiveInt", "one seed node for both"

    decoders = {n: node["inputs"] for n, node in prompt.items() if node["class_type"] == "VAEDecode"}
    assert sorted(d["samples"][0] for d in decoders.values()) == sorted([cached, uncached])
    assert len({str(d["vae"]) for d in decoders.values()}) == 1, "one VAE decodes both"
    (compare,) = [node["inputs"] for node in prompt.values() if node["class_type"] == "Krea2CompareImages"]
    sampled_by = {name: decoders[compare[name][0]]["samples"][0] for name in ("reference", "candidate")}
    assert sampled_by == {"reference": uncached, "candidate": cached}


def saved_rgb(server, image: dict):
    from PIL import Image

    with Image.open(server.base_dir / image["type"] / image["subfolder"] / image["filename"]) as png:
        return png.convert("RGB")


def check_compare_outputs(server, prompt: dict, entry: dict, compare_id: str, saved: dict) -> dict:
    """The compare node's numbers and heatmap agree with the two decoded images it was given."""
    import numpy as np

    (metrics,) = entry["outputs"][compare_id]["metrics"]
    assert len(metrics["pairs"]) == 1
    mae, psnr = metrics["mae_255"], metrics["psnr_db"]
    assert math.isfinite(mae) and math.isfinite(psnr) and mae >= 0 and psnr > 0, metrics
    (preview,) = entry["outputs"][compare_id]["images"]
    assert saved_rgb(server, preview).size == (TEST_SIZE, TEST_SIZE)
    heatmap_saves = [n for n in saved if prompt[n]["inputs"]["images"][0] == compare_id]
    assert heatmap_saves, "the heatmap is saved"
    # The same MAE from the saved 8-bit PNGs: SaveImage truncates each value, so they differ by under 1.
    saved_from = {prompt[n]["inputs"]["images"][0]: png for n, png in saved.items()}
    inputs = prompt[compare_id]["inputs"]
    assert {inputs["reference"][0], inputs["candidate"][0]} <= set(saved_from), "both compared images are saved"
    reference, candidate = (np.asarray(saved_from[inputs[k][0]], dtype=np.float64) for k in ("reference", "candidate"))
    assert abs(np.abs(reference - candidate).mean() - mae) < 1.0, (np.abs(reference - candidate).mean(), mae)
    return metrics


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_cpu(path, comfy_server, object_info, tiny_vae, tiny_shape):
    steps, cfg, preset, family = EXPECTED[path.name]
    prompt = to_api_prompt(load(path), object_info)
    encoders = [node_id for node_id, node in prompt.items() if node["class_type"] == "CLIPLoader"]
    for node_id, node in prompt.items():
        kind, inputs = node["class_type"], node["inputs"]
        if kind in ("UNETLoader", "Krea2DiffusersLoader"):
            inputs["unet_name" if kind == "UNETLoader" else "model_name"] = TINY_UNET
        elif kind == "VAELoader":
            inputs["vae_name"] = tiny_vae
        elif kind == "CLIPTextEncode":
            conditioning = {"seed": int(node_id), "tokens": 8, "features": tiny_shape.context_features}
            prompt[node_id] = {"class_type": "Krea2TestConditioning", "inputs": conditioning}
        elif kind == "EmptyLatentImage":
            inputs.update(width=TEST_SIZE, height=TEST_SIZE)
        elif kind == "SaveImage":
            inputs["filename_prefix"] = f"examples/{path.stem}_{node_id}"
    for node_id in encoders:
        del prompt[node_id]
    dangling = [(n, name) for n, node in prompt.items() for name, value in node["inputs"].items()
                if isinstance(value, list) and value[0] not in prompt]
    assert not dangling, f"inputs still wired to removed nodes: {dangling}"

    prompt_id = comfy_server.queue(prompt)
    entry = comfy_server.wait(prompt_id, timeout=300)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{comfy_server.log_tail()}"

    saved = {}
    for save_id in [n for n, node in prompt.items() if node["class_type"] == "SaveImage"]:
        (image,) = entry["outputs"][save_id]["images"]
        saved[save_id] = saved_rgb(comfy_server, image)
        assert saved[save_id].size == (TEST_SIZE, TEST_SIZE)
    decoded = {n for n, node in prompt.items() if node["class_type"] == "VAEDecode"}
    for save_id, png in saved.items():
        if prompt[save_id]["inputs"]["images"][0] in decoded:
            # NaN anywhere (sampler or VAE) saves as a flat black image.
            assert any(low != high for low, high in png.getextrema()), f"flat image from node {save_id}"
    compared = [check_compare_outputs(comfy_server, prompt, entry, compare_id, saved)
                for compare_id in [n for n, node in prompt.items() if node["class_type"] == "Krea2CompareImages"]]

    (cache_id,) = [n for n, node in prompt.items() if node["class_type"] == "Krea2CacheDiT"]
    runs = [run for run in comfy_server.get("/krea2_cachedit/stats")["runs"]
            if run["prompt_id"] == prompt_id and run["node_id"] == cache_id]
    assert len(runs) == 1, f"stats for node {cache_id} of prompt {prompt_id}: {runs}"
    run = runs[0]
    summary = (run["status"], run["steps"], run["cfg"], run["preset"], run["model"])
    assert summary == ("ok", steps, cfg, preset, family)
    if run["cached_steps"]:  # served from the cache: the cached image cannot equal the uncached one
        assert all(metrics["mae_255"] > 0 for metrics in compared), (run["cached_steps"], compared)
