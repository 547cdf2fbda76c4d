"""The shipped example workflows: valid against the real server's /object_info, and runnable.

Each example is converted to an API prompt and run on the CPU with the small
stand-ins of tests/example_stand_ins.py (tiny Krea-2, test conditioning instead of
the 4B text encoder, a tiny Wan 2.1 VAE, 64x64); steps, CFG, sampler and every
Cache-DiT setting stay as shipped.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from comfy_harness import PACK_DIR_NAME
from editor_format import UI_ONLY_TYPES, ordered_inputs, to_api_prompt, widget_values
from example_stand_ins import TEST_SIZE, example_prompt, run_example, saved_images, saved_rgb, write_tiny_vae

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
# What each example is about: (steps, cfg, model family in the stats).
EXPECTED = {
    "krea2_turbo_cachedit.json": (8, 1.0, "Krea-2 (ComfyUI native)"),
    "krea2_raw_cachedit.json": (52, 3.5, "Krea-2 (ComfyUI native)"),
    "krea2_diffusers_cachedit.json": (8, 1.0, "Krea-2 (diffusers)"),
    "krea2_turbo_compare.json": (8, 1.0, "Krea-2 (ComfyUI native)"),
}
CACHE_DEFAULTS = {"Fn_compute_blocks": 1, "Bn_compute_blocks": 0, "residual_diff_threshold": 0.24,
                  "max_warmup_steps": 4, "warmup_interval": 1, "max_cached_steps": -1,
                  "max_continuous_cached_steps": 3, "calibrator": "none", "taylorseer_order": 1, "dmd_history": 6,
                  "steps_mask": "none"}
# Examples that sample with and without Cache-DiT and compare the two images.
COMPARE_EXAMPLES = [path for path in EXAMPLES if nodes_of_type(path, "Krea2CompareImages")]


def load(path: Path) -> dict:
    return json.loads(path.read_text())


def nodes_of(workflow: dict, node_type: str) -> list[dict]:
    return [node for node in workflow["nodes"] if node["type"] == node_type]


# --- fixtures --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def object_info(comfy_server) -> dict:
    return comfy_server.get("/object_info")


@pytest.fixture(scope="module")
def tiny_vae(comfy_server, comfy_root) -> str:
    return write_tiny_vae(comfy_root, comfy_server.base_dir)


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
    """The Krea-2 sampling recipe of each example, and Cache-DiT with its defaults (the reference settings)."""
    workflow = load(path)
    steps, cfg, _ = EXPECTED[path.name]
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
    defaults = {name: opts["default"] for name, _, opts, is_widget in ordered_inputs(cache_info) if is_widget}
    assert values == defaults
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
    steps, cfg, family = EXPECTED[path.name]
    prompt = example_prompt(load(path), object_info, vae_name=tiny_vae,
                            context_features=tiny_shape.context_features, prefix=f"examples/{path.stem}")
    _, entry, run = run_example(comfy_server, prompt)
    summary = (run["status"], run["steps"], run["cfg"], run["settings"], run["model"])
    assert summary == ("ok", steps, cfg, CACHE_DEFAULTS, family)
    saved = saved_images(comfy_server, prompt, entry)
    compared = [check_compare_outputs(comfy_server, prompt, entry, compare_id, saved)
                for compare_id in [n for n, node in prompt.items() if node["class_type"] == "Krea2CompareImages"]]
    if run["cached_steps"]:  # served from the cache: the cached image cannot equal the uncached one
        assert all(metrics["mae_255"] > 0 for metrics in compared), (run["cached_steps"], compared)
