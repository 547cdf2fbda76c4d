"""Write example_workflows/*.json: the graph editor's workflow format, built from one description.

Widget values are given by input *name* here and laid out in the order the live
server reports in ``/object_info`` (with the ``control_after_generate`` value
after a seed), so when a node's inputs change, rerunning this keeps the files
right:

    ~/comfy/ComfyUI/.venv/bin/python tools/make_example_workflows.py

It starts a CPU ComfyUI with this pack through ``tests/comfy_harness.py``
(finding ComfyUI like the tests do) only to read ``/object_info``.
tests/test_example_workflows.py checks the result against the server and runs it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "tests"))

from comfy_harness import ComfyServer, find_comfyui  # noqa: E402
from editor_format import UI_ONLY_TYPES, has_control_widget, ordered_inputs  # noqa: E402

OUT_DIR = REPO_ROOT / "example_workflows"
PACK_CNR_ID = "comfyui-krea2-cachedit"  # the registry id ([project].name), so the editor can offer the pack
HF = "https://huggingface.co/Comfy-Org/Krea-2/resolve/main"

# The Comfy-Org Krea-2 files (https://huggingface.co/Comfy-Org/Krea-2), by loader input.
MODEL_FILES = {
    "turbo": ("krea2_turbo_bf16.safetensors", "diffusion_models"),
    "raw": ("krea2_raw_bf16.safetensors", "diffusion_models"),
    "text_encoder": ("qwen3vl_4b_bf16.safetensors", "text_encoders"),
    "vae": ("qwen_image_vae.safetensors", "vae"),
}

PROMPT = ("A weathered lighthouse on a basalt cliff at dusk, warm light in the lantern room, "
          "waves breaking below, long exposure, soft mist, 35mm photograph")
NEGATIVE = "blurry, low quality, distorted, watermark, text"


def model_ref(key: str) -> dict:
    name, directory = MODEL_FILES[key]
    return {"name": name, "url": f"{HF}/{directory}/{name}", "directory": directory}


def note(variant: str, loader: str) -> str:
    files = [MODEL_FILES[variant], MODEL_FILES["text_encoder"], MODEL_FILES["vae"]]
    links = "\n".join(f"- `{d}/`: [{n}]({HF}/{d}/{n})" for n, d in files)
    return (
        f"## Krea-2 {variant.capitalize()} + Cache-DiT\n\n"
        f"**Krea-2 Cache-DiT** sits between the model loader ({loader}) and the KSampler. "
        "Preset `auto` picks the Turbo settings for runs of up to 16 steps and the Raw settings above; "
        "the stats of each run are printed in the console and shown on the node.\n\n"
        f"### Models (put them in `ComfyUI/models/...`)\n\n{links}\n"
    )


def widget_names(info: dict) -> list[tuple[str, bool]]:
    """(input name, has a control_after_generate value) for each widget, in the editor's order."""
    return [(name, has_control_widget(name, kind, opts))
            for name, kind, opts, is_widget in ordered_inputs(info) if is_widget]


def socket_inputs(info: dict) -> list[tuple[str, str]]:
    return [(name, kind) for name, kind, _, is_widget in ordered_inputs(info) if not is_widget]


def build(name: str, nodes: list[dict], links: list[tuple], object_info: dict) -> dict:
    """nodes: {id, type, pos, size, widgets (by name), ...}; links: (src id, src slot, dst id, input name)."""
    by_id = {n["id"]: n for n in nodes}
    ui_links, out_links, in_links = [], {}, {}
    for link_id, (src, slot, dst, input_name) in enumerate(links, start=1):
        kind = object_info[by_id[src]["type"]]["output"][slot]
        sockets = [s for s, _ in socket_inputs(object_info[by_id[dst]["type"]])]
        ui_links.append([link_id, src, slot, dst, sockets.index(input_name), kind])
        out_links.setdefault((src, slot), []).append(link_id)
        in_links[(dst, input_name)] = link_id

    ui_nodes = []
    for order, node in enumerate(nodes):
        ui = {"id": node["id"], "type": node["type"], "pos": node["pos"], "size": node["size"],
              "flags": {}, "order": order, "mode": 0}
        if node["type"] in UI_ONLY_TYPES:
            ui.update(inputs=[], outputs=[], properties={}, widgets_values=[node["text"]],
                      color="#432", bgcolor="#653")
            ui_nodes.append(ui)
            continue
        info = object_info[node["type"]]
        ui["inputs"] = [{"localized_name": s, "name": s, "type": t, "link": in_links.get((node["id"], s))}
                        for s, t in socket_inputs(info)]
        ui["outputs"] = [{"localized_name": n, "name": n, "type": t, "slot_index": i,
                          "links": out_links.get((node["id"], i), [])}
                         for i, (n, t) in enumerate(zip(info["output_name"], info["output"]))]
        ui["properties"] = {"Node name for S&R": node["type"],
                            "cnr_id": PACK_CNR_ID if node["type"].startswith("Krea2") else "comfy-core"}
        if "models" in node:
            ui["properties"]["models"] = node["models"]
        values = []
        for widget, control in widget_names(info):
            values.append(node["widgets"][widget])
            if control:
                values.append(node["widgets"].get("control_after_generate", "randomize"))
        ui["widgets_values"] = values
        if "title" in node:
            ui["title"] = node["title"]
        ui_nodes.append(ui)

    return {
        "id": str(uuid.uuid5(uuid.NAMESPACE_URL, f"krea2-cachedit/{name}")),  # stable across reruns
        "revision": 0, "last_node_id": max(by_id), "last_link_id": len(links),
        "nodes": ui_nodes, "links": ui_links, "groups": [], "config": {},
        "extra": {"ds": {"scale": 0.75, "offset": [80, 120]}}, "version": 0.4,
    }


def cache_node(node_id: int, object_info: dict) -> dict:
    """Krea2CacheDiT with every input at its default (the reference settings)."""
    inputs = object_info["Krea2CacheDiT"]["input"]["required"]
    defaults = {name: spec[1]["default"] for name, spec in inputs.items() if len(spec) > 1 and "default" in spec[1]}
    return {"id": node_id, "type": "Krea2CacheDiT", "pos": [460, 40], "size": [340, 370],
            "widgets": defaults}


def text_to_image(name: str, variant: str, steps: int, cfg: float, object_info: dict,
                  diffusers: bool = False) -> dict:
    unet_file = MODEL_FILES[variant][0]
    if diffusers:
        loader = {"id": 1, "type": "Krea2DiffusersLoader", "pos": [40, 40], "size": [380, 110],
                  "widgets": {"model_name": unet_file, "weight_dtype": "default"}, "models": [model_ref(variant)]}
    else:
        loader = {"id": 1, "type": "UNETLoader", "pos": [40, 40], "size": [380, 110],
                  "widgets": {"unet_name": unet_file, "weight_dtype": "default"}, "models": [model_ref(variant)]}
    nodes = [
        loader,
        {"id": 2, "type": "CLIPLoader", "pos": [40, 200], "size": [380, 130],
         "widgets": {"clip_name": MODEL_FILES["text_encoder"][0], "type": "krea2", "device": "default"},
         "models": [model_ref("text_encoder")]},
        {"id": 3, "type": "VAELoader", "pos": [40, 380], "size": [380, 60],
         "widgets": {"vae_name": MODEL_FILES["vae"][0]}, "models": [model_ref("vae")]},
        cache_node(4, object_info),
        {"id": 5, "type": "CLIPTextEncode", "title": "Positive Prompt", "pos": [460, 460], "size": [400, 180],
         "widgets": {"text": PROMPT}},
    ]
    if cfg == 1.0:
        # CFG 1 never evaluates the negative (as in Comfy-Org's Krea-2 Turbo template).
        nodes.append({"id": 6, "type": "ConditioningZeroOut", "pos": [460, 690], "size": [240, 30], "widgets": {}})
        negative_links = [(5, 0, 6, "conditioning")]
    else:
        nodes.append({"id": 6, "type": "CLIPTextEncode", "title": "Negative Prompt", "pos": [460, 690],
                      "size": [400, 120], "widgets": {"text": NEGATIVE}})
        negative_links = [(2, 0, 6, "clip")]
    nodes += [
        {"id": 7, "type": "EmptyLatentImage", "pos": [900, 520], "size": [300, 110],
         "widgets": {"width": 1024, "height": 1024, "batch_size": 1}},
        {"id": 8, "type": "KSampler", "pos": [900, 40], "size": [320, 270],
         "widgets": {"seed": 42, "control_after_generate": "randomize", "steps": steps, "cfg": cfg,
                     "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}},
        {"id": 9, "type": "VAEDecode", "pos": [1260, 40], "size": [210, 50], "widgets": {}},
        {"id": 10, "type": "SaveImage", "pos": [1260, 140], "size": [520, 560],
         "widgets": {"filename_prefix": f"Krea2_{variant}_cachedit"}},
        {"id": 11, "type": "MarkdownNote", "pos": [-420, 40], "size": [420, 420],
         "text": note(variant, "Load Krea-2 (diffusers)" if diffusers else "Load Diffusion Model")},
    ]
    links = [
        (1, 0, 4, "model"), (2, 0, 5, "clip"), *negative_links,
        (4, 0, 8, "model"), (5, 0, 8, "positive"), (6, 0, 8, "negative"), (7, 0, 8, "latent_image"),
        (8, 0, 9, "samples"), (3, 0, 9, "vae"), (9, 0, 10, "images"),
    ]
    return build(name, nodes, links, object_info)


EXAMPLES = {
    # Krea-2 Turbo: 8 steps, CFG 1, euler/simple, 1024x1024 (Comfy-Org's Turbo template settings).
    "krea2_turbo_cachedit.json": dict(variant="turbo", steps=8, cfg=1.0),
    # Krea-2 Raw: the reference 52 steps at CFG 3.5.
    "krea2_raw_cachedit.json": dict(variant="raw", steps=52, cfg=3.5),
    # The same Turbo graph through the pack's diffusers loader.
    "krea2_diffusers_cachedit.json": dict(variant="turbo", steps=8, cfg=1.0, diffusers=True),
}


def fetch_object_info() -> dict:
    root = find_comfyui()
    if root is None:
        sys.exit("no ComfyUI found (set COMFYUI_PATH)")
    with tempfile.TemporaryDirectory() as base:
        server = ComfyServer(root, ComfyServer.prepare_base_dir(Path(base))).start()
        try:
            return server.get("/object_info")
        finally:
            server.stop()


def main():
    object_info = fetch_object_info()
    OUT_DIR.mkdir(exist_ok=True)
    for name, spec in EXAMPLES.items():
        workflow = text_to_image(name, object_info=object_info, **spec)
        (OUT_DIR / name).write_text(json.dumps(workflow, indent=2) + "\n")
        print(f"wrote {OUT_DIR / name}")


if __name__ == "__main__":
    main()
