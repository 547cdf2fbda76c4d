"""Write example_workflows/*.json: the graph editor's workflow format, built from one description.

Widget values are given by input *name* here and laid out in the order the live
server reports in ``/object_info`` (with the ``control_after_generate`` value
after a seed), so when a node's inputs change, rerunning this keeps the files
right:

    ~/comfy/ComfyUI/.venv/bin/python -m tools.make_example_workflows

It starts a CPU ComfyUI with this pack through ``devkit/comfy_harness.py``
(finding ComfyUI like the tests do) only to read ``/object_info``.
tests/editor/test_example_workflows.py checks the result against the server and runs it.
"""

from __future__ import annotations

import json
import sys
import tempfile
import uuid
from pathlib import Path

from devkit.comfy_harness import ComfyServer, find_comfyui
from devkit.editor_format import UI_ONLY_TYPES, has_control_widget, ordered_inputs
from devkit.example_templates import (FAMILY_TEMPLATES, KREA2_BLOCKS, LOADERS, FamilyTemplate, ModelFile,
                                      fewer_steps, forecast_fewer_steps)

from krea2_cachedit.adapters.figures import SGLANG_KREA2, standing  # noqa: E402  (the pack, loaded by example_templates)

REPO_ROOT = Path(__file__).resolve().parents[1]

OUT_DIR = REPO_ROOT / "example_workflows"
PACK_CNR_ID = "comfyui-krea2-cachedit"  # the registry id ([project].name), so the editor can offer the pack
HF = "https://huggingface.co/Comfy-Org/Krea-2/resolve/main"

# The Comfy-Org Krea-2 files (https://huggingface.co/Comfy-Org/Krea-2), by loader input.
MODEL_FILES = {
    "turbo": ("krea2_turbo_fp8_scaled.safetensors", "diffusion_models"),
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


# The Krea-2 templates' cache node (Krea2CacheDiT is deprecated: it takes the same inputs, and saved workflows keep
# loading it, but the editor's node search hides it).
CACHE_NODE = "CacheDiTDBCache"
ZH_NODE_DEFS = json.loads((REPO_ROOT / "locales" / "zh" / "nodeDefs.json").read_text(encoding="utf-8"))


def display_names(object_info: dict, node_type: str = CACHE_NODE) -> tuple[str, str]:
    """A node's name as the editor shows it: English (/object_info), Chinese (locales/zh; English where it has none)."""
    en = object_info[node_type]["display_name"]
    return en, ZH_NODE_DEFS.get(node_type, {}).get("display_name", en)


def input_labels(object_info: dict, node_type: str = CACHE_NODE) -> tuple[dict, dict]:
    """Each widget's label as the editor shows it, by input id: English (the schema's ``display_name`` in
    /object_info, else the id), Chinese (locales/zh ``inputs.<id>.name``, else the English label)."""
    en = {name: opts.get("display_name") or name
          for name, _, opts, is_widget in ordered_inputs(object_info[node_type]) if is_widget}
    zh_inputs = ZH_NODE_DEFS.get(node_type, {}).get("inputs", {})
    return en, {name: zh_inputs.get(name, {}).get("name") or label for name, label in en.items()}


def quoted(label: str, zh: bool = False) -> str:
    """An input's label in running text: "label" (English), “label” (Chinese)."""
    return f"“{label}”" if zh else f'"{label}"'


def note(variant: str, loader: str, object_info: dict) -> str:
    files = [MODEL_FILES[variant], MODEL_FILES["text_encoder"], MODEL_FILES["vae"]]
    links = "\n".join(f"- `{d}/`: [{n}]({HF}/{d}/{n})" for n, d in files)
    node, node_zh = display_names(object_info)
    return (
        f"## Krea-2 {variant.capitalize()} + Cache-DiT\n\n"
        f"**{node}** sits between the model loader ({loader}) and the KSampler. "
        "Its defaults are the reference settings measured on real Krea-2 weights (no step mask, no calibrator); "
        "the stats of each run are printed in the console and shown on the node.\n\n"
        f"### Models (put them in `ComfyUI/models/...`)\n\n{links}\n\n"
        f"{ZH_HEADING}\n\n"
        f"**{node_zh}** 位于模型加载器（{loader}）和 KSampler 之间。它的默认值是在真实 Krea-2 权重上测得的参考设置（无步骤掩码、无校准器）；"
        "每次运行的统计会打印在控制台并显示在节点上。模型文件见上面的链接（放到 `ComfyUI/models/...` 下对应的文件夹）。\n"
    )


def widget_names(info: dict) -> list[tuple[str, bool]]:
    """(input name, has a control_after_generate value) for each widget, in the editor's order."""
    return [(name, has_control_widget(name, kind, opts))
            for name, kind, opts, is_widget in ordered_inputs(info) if is_widget]


def socket_inputs(info: dict) -> list[tuple[str, str]]:
    return [(name, kind) for name, kind, _, is_widget in ordered_inputs(info) if not is_widget]


def input_slots(info: dict, linked: set[str]) -> list[tuple[str, str, bool]]:
    """(name, type, is a widget) for each input slot the editor shows: the sockets, then the
    widgets that a link feeds (e.g. one seed shared by two samplers)."""
    return ([(name, kind, False) for name, kind in socket_inputs(info)]
            + [(name, kind, True) for name, kind, _, is_widget in ordered_inputs(info)
               if is_widget and name in linked])


def build(name: str, nodes: list[dict], links: list[tuple], object_info: dict) -> dict:
    """nodes: {id, type, pos, size, widgets (by name), ...}; links: (src id, src slot, dst id, input name).

    A link into a widget's name feeds that widget (the editor's widget input); its value stays in
    ``widgets_values`` as the editor keeps it."""
    by_id = {n["id"]: n for n in nodes}
    linked_names = {}
    for _, _, dst, input_name in links:
        linked_names.setdefault(dst, set()).add(input_name)
    slots = {n["id"]: input_slots(object_info[n["type"]], linked_names.get(n["id"], set()))
             for n in nodes if n["type"] not in UI_ONLY_TYPES}
    ui_links, out_links, in_links = [], {}, {}
    for link_id, (src, slot, dst, input_name) in enumerate(links, start=1):
        kind = object_info[by_id[src]["type"]]["output"][slot]
        ui_links.append([link_id, src, slot, dst, [s for s, _, _ in slots[dst]].index(input_name), kind])
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
        ui["inputs"] = [{"localized_name": s, "name": s, "type": t, **({"widget": {"name": s}} if widget else {}),
                         "link": in_links.get((node["id"], s))}
                        for s, t, widget in slots[node["id"]]]
        ui["outputs"] = [{"localized_name": n, "name": n, "type": t, "slot_index": i,
                          "links": out_links.get((node["id"], i), [])}
                         for i, (n, t) in enumerate(zip(info["output_name"], info["output"]))]
        ours = node["type"].startswith("Krea2") or node["type"].startswith("CacheDiT")
        ui["properties"] = {"Node name for S&R": node["type"], "cnr_id": PACK_CNR_ID if ours else "comfy-core"}
        if "models" in node:
            ui["properties"]["models"] = node["models"]
        values = []
        for widget, control in widget_names(info):
            values.append(node["widgets"][widget])
            if control:
                values.append(node["widgets"].get("control_after_generate", "fixed"))
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


def cache_defaults(object_info: dict, node_type: str) -> dict:
    """A cache node's widgets at the defaults the node's schema (/object_info) gives."""
    return {name: opts["default"] for name, _, opts, is_widget in ordered_inputs(object_info[node_type]) if is_widget}


def cache_node(node_id: int, object_info: dict) -> dict:
    """The DBCache node with every widget at its default."""
    return {"id": node_id, "type": CACHE_NODE, "pos": [460, 40], "size": [340, 370],
            "widgets": cache_defaults(object_info, CACHE_NODE)}


def loaders_and_prompts(variant: str, cfg: float, object_info: dict,
                        diffusers: bool = False) -> tuple[list[dict], list[tuple]]:
    """Nodes 1-6: model, text encoder and VAE loaders, the DBCache node, positive and negative; their links."""
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
    return nodes, [(1, 0, 4, "model"), (2, 0, 5, "clip"), *negative_links]


def empty_latent(node_id: int, pos: list[int]) -> dict:
    return {"id": node_id, "type": "EmptyLatentImage", "pos": pos, "size": [300, 110],
            "widgets": {"width": 1024, "height": 1024, "batch_size": 1}}


def ksampler(node_id: int, pos: list[int], steps: int, cfg: float, title: str | None = None) -> dict:
    node = {"id": node_id, "type": "KSampler", "pos": pos, "size": [320, 270],
            "widgets": {"seed": 42, "control_after_generate": "fixed", "steps": steps, "cfg": cfg,
                        "sampler_name": "euler", "scheduler": "simple", "denoise": 1.0}}
    return node | ({"title": title} if title else {})


def text_to_image(name: str, variant: str, steps: int, cfg: float, object_info: dict,
                  diffusers: bool = False) -> dict:
    nodes, prompt_links = loaders_and_prompts(variant, cfg, object_info, diffusers)
    nodes += [
        empty_latent(7, [900, 520]),
        ksampler(8, [900, 40], steps, cfg),
        {"id": 9, "type": "VAEDecode", "pos": [1260, 40], "size": [210, 50], "widgets": {}},
        {"id": 10, "type": "SaveImage", "pos": [1260, 140], "size": [520, 560],
         "widgets": {"filename_prefix": f"Krea2_{variant}_cachedit"}},
        {"id": 11, "type": "MarkdownNote", "pos": [-420, 40], "size": [420, 420],
         "text": note(variant, "Load Krea-2 (diffusers)" if diffusers else "Load Diffusion Model", object_info)},
    ]
    links = [
        *prompt_links,
        (4, 0, 8, "model"), (5, 0, 8, "positive"), (6, 0, 8, "negative"), (7, 0, 8, "latent_image"),
        (8, 0, 9, "samples"), (3, 0, 9, "vae"), (9, 0, 10, "images"),
    ]
    return build(name, nodes, links, object_info)


def compare_note(variant: str, steps: int, cfg: float, fewer: tuple[int, bool], cache_widgets: dict,
                 object_info: dict, forecast: str | None = None) -> str:
    """A Krea-2 compare template's note: through the DBCache node (its widgets ``cache_widgets``), or the Forecast
    node with the preset ``forecast``."""
    files = [MODEL_FILES[variant], MODEL_FILES["text_encoder"], MODEL_FILES["vae"]]
    links = "\n".join(f"- `{d}/`: [{n}]({HF}/{d}/{n})" for n, d in files)
    names = (FORECAST_TITLE, FORECAST_TITLE) if forecast else display_names(object_info)
    node, node_zh = (f"**{name}**" for name in names)
    labels, labels_zh = input_labels(object_info)
    steps_text, steps_zh = f"{steps} steps", f"{steps} 步"
    if forecast:
        cache_text, cache_zh = f"preset `{forecast}`", f"预设 `{forecast}`"
        fewer_text, fewer_zh = (fewer_steps_note(steps, *fewer, labels, fixed_by=FORECAST_FIXES),
                                fewer_steps_note_zh(steps, *fewer, labels_zh, fixed_by=FORECAST_FIXES_ZH))
        how, how_zh = (f" On the steps its preset forecasts, {node} runs none of the model's blocks: it forecasts the "
                       "model's result from the steps it computed.", f"在预设要预测的步上，{node_zh} 不运行模型的任何块，而是根据已计算的步预测模型的结果。")
        why, why_zh = forecast_evidence(variant, steps, forecast)
        why, why_zh = f"{why}\n\n{other_step_counts(steps)}", f"{why_zh}\n\n{other_step_counts_zh(steps)}"
    else:
        cache_text, cache_zh = dbcache_settings(cache_widgets, labels), dbcache_settings(cache_widgets, labels_zh, zh=True)
        fewer_text, fewer_zh = fewer_steps_note(steps, *fewer, labels), fewer_steps_note_zh(steps, *fewer, labels_zh)
        how = how_zh = ""
        why, why_zh = sglang_evidence(variant)
    title = f"Krea-2 {variant.capitalize()}: " + (
        f"the Forecast node (`{forecast}`) with and without it, and fewer steps" if forecast
        else "with and without Cache-DiT, and fewer steps")
    return (
        f"## {title}\n\n"
        f"{settings_line(steps_text, cfg, 'euler', 'simple', cache_text, fewer_sampler(fewer[0]))}\n\n"
        f"The three KSamplers share the model, the prompts, the empty latent and the **Seed** node; the top one "
        f"samples through {node}, the middle one without it.{how} **Compare Images (Cache-DiT)** shows on "
        "the node how far the cached image is from the uncached one: MAE (0-255), PSNR (dB; identical images "
        "give 100 dB) and a heatmap of where they differ (black = identical, white = the largest difference). "
        "Change the Cache-DiT settings and run again: only the cached branch samples again.\n\n"
        f"{fewer_text}\n\n{why}\n\n"
        f"### Models (put them in `ComfyUI/models/...`)\n\n{links}\n\n"
        f"{ZH_HEADING}\n\n"
        f"{settings_line_zh(steps_zh, cfg, 'euler', 'simple', cache_zh, fewer_sampler_zh(fewer[0]))}\n\n"
        f"三个 KSampler 共用模型、提示词、空潜空间和 **Seed** 节点；上面的经过 {node_zh} 采样，中间的不经过。{how_zh}"
        f"{ZH_COMPARE}\n\n{fewer_zh}\n\n{why_zh}\n\n模型文件见上面的链接（放到 `ComfyUI/models/...` 下对应的文件夹）。\n"
    )


# The Forecast node's title in the Krea-2 Forecast compare templates (the notes name it so).
FORECAST_TITLE = "Cache-DiT Forecast"
FORECAST_FIXES = "The preset fixes in advance which steps are computed"
FORECAST_FIXES_ZH = "预设事先固定了哪些步要计算"
# The small model the pack measures its presets on, in a user's words, by the steps it samples.
TEST_MODEL = {8: ("a small test model trained on drawn shapes and distilled to 8 steps at CFG 1, not Krea-2",
                  "一个用绘制的图形训练、蒸馏为 8 步（CFG 1）的小型测试模型"),
              52: ("a small test model trained on drawn shapes, sampled at 52 steps and CFG 3.5, not Krea-2",
                   "一个用绘制的图形训练、以 52 步和 CFG 3.5 采样的小型测试模型")}


def other_step_counts(steps: int) -> str:
    """Where a Forecast compare template's preset stops holding: the note's pointer to ``auto``."""
    return (f"**Another step count?** The preset is laid out for {steps} steps: at other counts it computes other "
            "steps and can land farther than fewer steps. There, choose the preset `auto` and set \"speedup\" "
            "(model calls = steps / speedup): it plans which steps to compute from the run's own noise levels, and the "
            "node shows its plan and the \"as many as N steps\" to set the fewer-steps sampler to.")


def other_step_counts_zh(steps: int) -> str:
    return (f"**换一个步数？** 该预设是为 {steps} 步安排的：换成别的步数时，它计算的是别的步，可能比更少的步数离得更远。"
            "这时请选择预设 `auto` 并设置“加速倍数”（模型调用次数 = 步数 / 加速倍数）：它根据本次运行自己的噪声水平规划要计算的步，"
            "节点会显示它的计划，以及更少步数采样器应设的“相当于 N 步”。")


def forecast_evidence(variant: str, steps: int, preset: str) -> tuple[str, str]:
    """Why the preset, and whose figures those are (``adapters/figures.py``), in English and Chinese."""
    computed, _ = forecast_fewer_steps(preset, steps)
    figures = standing(preset, steps)
    model, model_zh = TEST_MODEL[steps]
    return (f"**Why this preset**: `{preset}` computes {computed} of the {steps} steps and forecasts the other "
            f"{steps - computed}. Measured by this pack on {model}: {figures.phrase('en')}, each MAE against the "
            f"image without the cache (euler: plain sampling at that many steps). Nobody has measured it on real "
            f"Krea-2 weights: judge it here, on your own prompts. The DBCache node's defaults, sglang's settings for "
            f"Krea-2, are in the Krea-2 {variant.capitalize()} "
            f"{'compare ' if variant == 'turbo' else ''}template.",
            f"**为什么用这个预设**：`{preset}` 在 {steps} 步中计算 {computed} 步，其余 {steps - computed} 步由预测得到。"
            f"由本扩展在{model_zh}上测得（不是 Krea-2）：{figures.phrase('zh')}，MAE 均相对于不缓存的图像（euler：以同样步数普通采样）。"
            "还没有人在真实 Krea-2 权重上测过它：请在这里用你自己的提示词判断。DBCache 节点的默认值（sglang 为 Krea-2 "
            f"给出的设置）见 Krea-2 {variant.capitalize()} {'compare ' if variant == 'turbo' else ''}模板。")


# Where sglang publishes its Krea-2 measurement (the README links it too).
SGLANG_SOURCE = "https://github.com/sgl-project/sglang/pull/29688"


def sglang_evidence(variant: str) -> tuple[str, str]:
    """The DBCache defaults' figures: sglang's, on real Krea-2 weights."""
    (row,) = [r for r in SGLANG_KREA2 if r.model.lower() == variant]
    return (f"**Cache settings**: the node's defaults, sglang's settings for Krea-2. Measured by sglang on real "
            f"Krea-2 {row.model} weights ({row.steps} steps, CFG {row.cfg:g}): {row.phrase('en')} "
            f"([source]({SGLANG_SOURCE})). For a faster "
            f"setting, open the Krea-2 {variant.capitalize()} Forecast compare template.",
            f"**缓存设置**：节点默认值，即 sglang 为 Krea-2 给出的设置。由 sglang 在真实 Krea-2 {row.model} 权重上测得"
            f"（{row.steps} 步，CFG {row.cfg:g}）：{row.phrase('zh')}（[来源]({SGLANG_SOURCE})）。更快的设置见 Krea-2 {variant.capitalize()} Forecast "
            "compare 模板。")


# The DBCache widgets a note states (the calibrator's own two only with a calibrator).
CALIBRATOR_WIDGETS = ("taylorseer_order", "dmd_history")


def dbcache_settings(widgets: dict, labels: dict, zh: bool = False) -> str:
    """A DBCache node's widgets as a note states them, by the labels the editor shows (``input_labels``):
    '"label" value, ...' (Chinese: '“label” value，...')."""
    shown = {k: v for k, v in widgets.items() if widgets.get("calibrator") != "none" or k not in CALIBRATOR_WIDGETS}
    return ("，" if zh else ", ").join(f"{quoted(labels[k], zh)} {v:g}" if isinstance(v, float)
                                      else f"{quoted(labels[k], zh)} {v}" for k, v in shown.items())


def settings_line(steps: str, cfg: float, sampler: str, scheduler: str, cache: str, fewer: str,
                  each: bool = False) -> str:
    """The note's first line: what the graph runs, stated plainly (tests/editor/test_template_notes.py reads it)."""
    return (f"**In this graph**: {steps}, CFG {cfg:g}, {sampler}, {scheduler}; one **Seed**, 42, fixed (a new run "
            f"samples only what you changed). {'Each cache node' if each else 'The cache node'}: {cache}. "
            f"Fewer steps: {fewer}.")


def settings_line_zh(steps: str, cfg: float, sampler: str, scheduler: str, cache: str, fewer: str,
                     each: bool = False) -> str:
    return (f"**本工作流**：{steps}，CFG {cfg:g}，{sampler}，{scheduler}；一个 **Seed**，42，固定（再次运行只重新采样你改动的部分）。"
            f"{'每个缓存节点' if each else '缓存节点'}：{cache}。更少步数：{fewer}。")


def fewer_sampler(steps: int) -> str:
    return f"**KSampler (fewer steps)** at {steps} steps"


def fewer_sampler_zh(steps: int) -> str:
    return f"**KSampler (fewer steps)** {steps} 步"


def fewer_steps_note(steps: int, fewer: int, exact: bool, labels: dict, fixed_by: str = "") -> str:
    """The note's paragraph on the fewer-steps branch of a one-model template."""
    return (f"**Fewer steps or the cache?** The bottom one, **KSampler (fewer steps)**, samples the same graph "
            f"without the cache at {fewer} steps{instead_of(steps, fewer)}: the step count whose uncached run costs as "
            "many block evaluations as the cached run. The second compare node, **Compare Images (fewer steps)**, sets "
            "it against the same uncached image: the cache earns its place where its MAE is the lower of the two. "
            f"{fewer_steps_how(exact, labels, fixed_by=fixed_by)}{same_steps_note(steps, fewer, labels)}")


def instead_of(steps: int, fewer: int) -> str:
    return f" instead of {steps}" if fewer < steps else ""


ONE_MODEL_AFTER_A_RUN = ("after a run, set **KSampler (fewer steps)** to the \"as many as N steps\" the cache node shows, "
                         "and run again.")
EXPERTS_AFTER_A_RUN = ("after a run, set both fewer-steps samplers' `steps` to the sum of the two cache nodes' \"as many "
                       "as N steps\", and the high-noise one's `end_at_step` and the low-noise one's `start_at_step` to "
                       "the high-noise node's N; run again.")


def fewer_steps_how(exact: bool, labels: dict, after_a_run: str = ONE_MODEL_AFTER_A_RUN, fixed_by: str = "") -> str:
    """Where the step count comes from: exact, or the fewest the settings allow; and which number to type after a
    run (exact: when the steps change)."""
    if exact:
        return (f"{fixed_by or 'These cache settings fix the steps cached in advance (a step mask)'}, so the step "
                f"count is exact. When you change the steps, {after_a_run}")
    return ("The threshold decides at run time which steps are cached, so this is the fewest steps these settings "
            f"allow (every step the warmup and {quoted(labels['max_continuous_cached_steps'])} leave it, cached): "
            f"{after_a_run}")


def same_steps_note(steps: int, fewer: int, labels: dict) -> str:
    if fewer < steps:
        return ""
    return (" Here caching saves less than one whole step (a cached step still computes the "
            f"{quoted(labels['Fn_compute_blocks'])}), so the fewer-steps image is the uncached one.")


def fewer_steps_note_zh(steps: int, fewer: int, exact: bool, labels: dict, fixed_by: str = "") -> str:
    return (f"**更少的步数还是缓存？** 最下面的 **KSampler (fewer steps)** 不经过缓存、以 {fewer} 步{instead_of_zh(steps, fewer)}采样同一个"
            "工作流：不缓存时以这个步数采样，块计算次数与缓存运行相同。第二个比较节点 **Compare Images (fewer steps)** 把它与同一张未缓存图像"
            f"比较：缓存的 MAE 更低时，缓存才值得。{fewer_steps_how_zh(exact, labels, fixed_by=fixed_by)}"
            f"{same_steps_note_zh(steps, fewer, labels)}")


def instead_of_zh(steps: int, fewer: int) -> str:
    return f"（而非 {steps} 步）" if fewer < steps else ""


ONE_MODEL_AFTER_A_RUN_ZH = "运行后，把 **KSampler (fewer steps)** 的步数设为缓存节点显示的“相当于 N 步”，再运行一次。"
EXPERTS_AFTER_A_RUN_ZH = ("运行后，把两个更少步数采样器的 `steps` 设为两个缓存节点报告的“相当于 N 步”之和，并把高噪声采样器的 `end_at_step` "
                          "和低噪声采样器的 `start_at_step` 设为高噪声节点的 N，再运行一次。")


def fewer_steps_how_zh(exact: bool, labels: dict, after_a_run: str = ONE_MODEL_AFTER_A_RUN_ZH,
                       fixed_by: str = "") -> str:
    if exact:
        return f"{fixed_by or '这些缓存设置事先固定了要缓存的步（步骤掩码）'}，所以这个步数是准确的。改了步数时，{after_a_run}"
    return (f"缓存哪些步由阈值在运行时决定，所以这是这些设置允许的最少步数（预热和{quoted(labels['max_continuous_cached_steps'], True)}"
            f"留下的每一步都被缓存）：{after_a_run}")


def same_steps_note_zh(steps: int, fewer: int, labels: dict) -> str:
    if fewer < steps:
        return ""
    return (f"这里缓存省下的不到一整步（缓存的步仍要运行开头的块，即{quoted(labels['Fn_compute_blocks'], True)}），"
            "所以更少步数的图像就是未缓存的图像。")


def cached_vs_uncached(name: str, variant: str, steps: int, cfg: float, object_info: dict,
                       forecast: str | None = None) -> dict:
    """One seed, one set of prompts and latent, sampled with and without Cache-DiT and without it at the steps that
    cost as much as the cached run; both others compared with the uncached image. ``forecast``: the cached branch
    through the Forecast node (CacheDiTSpectrum) with this preset, instead of the DBCache node at its defaults."""
    widgets = cache_defaults(object_info, CACHE_NODE)
    fewer = forecast_fewer_steps(forecast, steps) if forecast else fewer_steps(widgets, steps, KREA2_BLOCKS)
    nodes, prompt_links = loaders_and_prompts(variant, cfg, object_info)
    if forecast:
        (cache,) = [node for node in nodes if node["id"] == 4]
        cache.update(type="CacheDiTSpectrum", title=FORECAST_TITLE, size=[340, 120], widgets={"preset": forecast})
    prefix = f"Krea2_{variant}" + ("_forecast" if forecast else "")
    nodes += [
        empty_latent(7, [460, 780]),
        {"id": 17, "type": "PrimitiveInt", "title": "Seed", "pos": [900, 680], "size": [320, 82],
         "widgets": {"value": 42, "control_after_generate": "fixed"}},
        ksampler(8, [900, 40], steps, cfg, title="KSampler (Cache-DiT)"),
        {"id": 9, "type": "VAEDecode", "pos": [1260, 40], "size": [210, 50], "widgets": {}},
        {"id": 10, "type": "SaveImage", "title": "Cache-DiT", "pos": [1980, 40], "size": [400, 440],
         "widgets": {"filename_prefix": f"{prefix}_cachedit"}},
        {"id": 11, "type": "MarkdownNote", "pos": [-420, 40], "size": [420, 760],
         "text": compare_note(variant, steps, cfg, fewer, widgets, object_info, forecast)},
        ksampler(12, [900, 360], steps, cfg, title="KSampler (uncached)"),
        {"id": 13, "type": "VAEDecode", "pos": [1260, 360], "size": [210, 50], "widgets": {}},
        {"id": 14, "type": "SaveImage", "title": "Uncached", "pos": [1980, 520], "size": [400, 440],
         "widgets": {"filename_prefix": f"{prefix}_uncached"}},
        {"id": 15, "type": "Krea2CompareImages", "pos": [1520, 40], "size": [420, 560], "widgets": {}},
        {"id": 16, "type": "SaveImage", "title": "Difference", "pos": [1520, 640], "size": [420, 440],
         "widgets": {"filename_prefix": f"{prefix}_difference"}},
        ksampler(30, [900, 1100], fewer[0], cfg, title="KSampler (fewer steps)"),
        *fewer_steps_outputs(prefix),
    ]
    links = [
        *prompt_links,
        (4, 0, 8, "model"), (5, 0, 8, "positive"), (6, 0, 8, "negative"), (7, 0, 8, "latent_image"),
        (17, 0, 8, "seed"), (8, 0, 9, "samples"), (3, 0, 9, "vae"), (9, 0, 10, "images"),
        (1, 0, 12, "model"), (5, 0, 12, "positive"), (6, 0, 12, "negative"), (7, 0, 12, "latent_image"),
        (17, 0, 12, "seed"), (12, 0, 13, "samples"), (3, 0, 13, "vae"), (13, 0, 14, "images"),
        (13, 0, 15, "reference"), (9, 0, 15, "candidate"), (15, 0, 16, "images"),
        (1, 0, 30, "model"), (5, 0, 30, "positive"), (6, 0, 30, "negative"), (7, 0, 30, "latent_image"),
        (17, 0, 30, "seed"), (30, 0, 34, "samples"), (3, 0, 34, "vae"), (34, 0, 35, "images"),
        *fewer_steps_compare_links(),
    ]
    return build(name, nodes, links, object_info)


# The fewer-steps branch's nodes: its decode (34), its save, its compare against the uncached decode (13), the
# compare's heatmap save.
FEWER_DECODE, FEWER_SAVE, FEWER_COMPARE, FEWER_DIFFERENCE = 34, 35, 36, 37


def fewer_steps_outputs(prefix: str) -> list[dict]:
    """The fewer-steps branch after its sampler(s): decode, save, and a second compare node with its heatmap."""
    return [
        {"id": FEWER_DECODE, "type": "VAEDecode", "pos": [1260, 1100], "size": [210, 50], "widgets": {}},
        {"id": FEWER_SAVE, "type": "SaveImage", "title": "Fewer steps", "pos": [1980, 1000], "size": [400, 440],
         "widgets": {"filename_prefix": f"{prefix}_fewer_steps"}},
        {"id": FEWER_COMPARE, "type": "Krea2CompareImages", "title": "Compare Images (fewer steps)",
         "pos": [1520, 1120], "size": [420, 560], "widgets": {}},
        {"id": FEWER_DIFFERENCE, "type": "SaveImage", "title": "Difference (fewer steps)", "pos": [1520, 1720],
         "size": [420, 440], "widgets": {"filename_prefix": f"{prefix}_difference_fewer_steps"}},
    ]


def fewer_steps_compare_links() -> list[tuple]:
    """The fewer-steps image against the uncached one (decode 13), and the heatmap saved."""
    return [(13, 0, FEWER_COMPARE, "reference"), (FEWER_DECODE, 0, FEWER_COMPARE, "candidate"),
            (FEWER_COMPARE, 0, FEWER_DIFFERENCE, "images")]


def file_ref(file: ModelFile) -> dict:
    return {"name": file.name, "url": file.url, "directory": file.directory}


def family_note(t: FamilyTemplate, fewer: list[tuple[int, bool]], widgets: dict, object_info: dict) -> str:
    """``fewer``: each expert's fewer-steps count and whether it is exact (``family_fewer_steps``); ``widgets``:
    each cache node's."""
    links = "\n".join(f"- `{f.directory}/`: [{f.name}]({f.url})" for f in t.files)
    node = display_names(object_info)[0]
    labels, labels_zh = input_labels(object_info)
    changed = ", ".join(f"{quoted(labels[k])} {v}" for k, v in t.cache.items())
    settings = f"the node's defaults except {changed}" if changed else "the node's defaults"
    if t.low_noise:
        graph = ("The three branches share the two models, the prompts, the empty latent and the **Seed** node; each "
                 "samples the high-noise model, then the low-noise one (two KSamplerAdvanced). The top branch samples "
                 "each model through its own Cache-DiT DBCache node (**Cache-DiT (high noise)**, **Cache-DiT (low "
                 "noise)**), the middle one without them. ")
        fewer_text, fewer_zh = experts_fewer_steps_note(t, fewer, labels), experts_fewer_steps_note_zh(t, fewer, labels_zh)
    else:
        graph = ("The three KSamplers share the model, the prompts, the empty latent and the **Seed** node; the top "
                 f"one samples through **{node}**, the middle one without it. ")
        ((steps, exact),) = fewer
        fewer_text, fewer_zh = (fewer_steps_note(t.steps, steps, exact, labels),
                                fewer_steps_note_zh(t.steps, steps, exact, labels_zh))
    cache, cache_zh = dbcache_settings(widgets, labels), dbcache_settings(widgets, labels_zh, zh=True)
    counts = [steps for steps, _ in fewer]
    if t.low_noise:
        steps_text = (f"{t.steps} steps (the high-noise model for steps 0-{t.split_step}, the low-noise one for "
                      f"{t.split_step}-{t.steps})")
        steps_zh = f"{t.steps} 步（高噪声模型负责第 0-{t.split_step} 步，低噪声模型负责第 {t.split_step}-{t.steps} 步）"
        fewer_line = (f"**High noise (fewer steps)** and **Low noise (fewer steps)** at {sum(counts)} steps, the "
                      f"high-noise model for steps 0-{counts[0]}")
        fewer_line_zh = (f"**High noise (fewer steps)** 和 **Low noise (fewer steps)** {sum(counts)} 步，高噪声模型负责第 "
                         f"0-{counts[0]} 步")
    else:
        steps_text, steps_zh = f"{t.steps} steps", f"{t.steps} 步"
        fewer_line, fewer_line_zh = fewer_sampler(counts[0]), fewer_sampler_zh(counts[0])
    each = bool(t.low_noise)
    return (
        f"## {t.title}: with and without Cache-DiT, and fewer steps\n\n"
        f"{settings_line(steps_text, t.cfg, t.sampler, t.scheduler, cache, fewer_line, each)}\n\n"
        f"{graph}**Compare Images (Cache-DiT)** "
        "(it compares any two images) shows on the node how far the cached image is from the uncached one: MAE "
        "(0-255), PSNR (dB; identical images give 100 dB) and a heatmap of where they differ (black = identical). "
        "Change the Cache-DiT settings and run again: only the cached branch samples again.\n\n"
        f"{fewer_text}\n\n"
        f"**Recipe**: {t.recipe}\n\n**Cache settings**: {settings}. {t.evidence}\n\n"
        f"### Models (put them in `ComfyUI/models/...`)\n\n{links}\n\n"
        f"{ZH_HEADING}\n\n{settings_line_zh(steps_zh, t.cfg, t.sampler, t.scheduler, cache_zh, fewer_line_zh, each)}\n\n"
        f"{family_graph_zh(t, display_names(object_info)[1])}{ZH_COMPARE}\n\n{fewer_zh}\n\n**采样配方**：{t.recipe_zh}\n\n"
        f"**缓存设置**：{settings_zh(t, labels_zh)}。{t.evidence_zh}\n\n模型文件见上面的链接（放到 `ComfyUI/models/...` 下对应的文件夹）。\n"
    )


def family_fewer_steps(t: FamilyTemplate, object_info: dict) -> list[tuple[int, bool]]:
    """Each expert's fewer-steps count (its cached run's own steps, cost as the pack's plan states it) and whether it
    is exact; one model: one."""
    widgets = cache_defaults(object_info, CACHE_NODE) | t.cache
    return [fewer_steps(widgets, end - start, t.blocks) for start, end in t.stages()]


def experts_fewer_steps_note(t: FamilyTemplate, fewer: list[tuple[int, bool]], labels: dict) -> str:
    """The note's paragraph on the fewer-steps branch of a template of two experts in turn."""
    (high, exact), (low, _) = fewer
    return (f"**Fewer steps or the cache?** The bottom branch (**High noise (fewer steps)**, **Low noise (fewer "
            f"steps)**) samples the same two experts without the cache at {high + low} steps"
            f"{instead_of(t.steps, high + low)}, the high-noise model for steps 0-{high} and the low-noise one from "
            f"{high} on: each expert at the step "
            "count whose uncached run costs as many block evaluations as its cached run. The second compare node, "
            "**Compare Images (fewer steps)**, sets it against the same uncached image: the cache earns its place "
            "where its MAE is the lower of the two. "
            + fewer_steps_how(exact, labels, EXPERTS_AFTER_A_RUN)
            + same_steps_note(t.steps, high + low, labels))


def experts_fewer_steps_note_zh(t: FamilyTemplate, fewer: list[tuple[int, bool]], labels: dict) -> str:
    (high, exact), (low, _) = fewer
    return (f"**更少的步数还是缓存？** 最下面的分支（**High noise (fewer steps)**、**Low noise (fewer steps)**）不经过缓存、以 "
            f"{high + low} 步{instead_of_zh(t.steps, high + low)}采样同样的两个专家模型，高噪声模型负责第 0-{high} 步，低噪声模型从第 {high} "
            "步起：每个专家模型的步数都使其不缓存时的块计算次数与其缓存运行相同。第二个比较节点 **Compare Images (fewer steps)** 把它与同一张"
            "未缓存图像比较：缓存的 MAE 更低时，缓存才值得。"
            + fewer_steps_how_zh(exact, labels, EXPERTS_AFTER_A_RUN_ZH)
            + same_steps_note_zh(t.steps, high + low, labels))


# The notes' Chinese section: the editor shows a note as it is, in one language, so each note carries both.
ZH_HEADING = "### 中文说明"
ZH_COMPARE = ("**Compare Images (Cache-DiT)**（可比较任意两张图片）在节点上显示缓存图像与未缓存图像的差距：MAE（0-255）、PSNR（dB；"
              "相同图像为 100 dB）以及差异热图（黑色 = 相同）。修改 Cache-DiT 设置后再次运行：只有缓存分支会重新采样。")


def family_graph_zh(t: FamilyTemplate, node: str) -> str:
    if t.low_noise:
        return ("三个分支共用两个模型、提示词、空潜空间和 **Seed** 节点；每个分支先采样高噪声模型，再采样低噪声模型（两个 KSamplerAdvanced）。"
                "上面的分支让每个模型经过各自的 Cache-DiT DBCache 节点（**Cache-DiT (high noise)**、**Cache-DiT (low noise)**），中间的分支不经过。")
    return f"三个 KSampler 共用模型、提示词、空潜空间和 **Seed** 节点；上面的经过 **{node}** 采样，中间的不经过。"


def settings_zh(t: FamilyTemplate, labels: dict) -> str:
    changed = "，".join(f"{quoted(labels[k], True)} {v}" for k, v in t.cache.items())
    return f"节点默认值，但{changed}" if changed else "节点默认值"


def audio_video_latent(nodes: list[dict], links: list[tuple], t: FamilyTemplate) -> int:
    """The checkpoint's audio VAE (26), the audio latent it sizes (27) and LTXVConcatAVLatent (28) joining the
    empty video latent (7) with it; returns the joined latent the samplers start from."""
    audio_type, widgets = t.audio_latent
    nodes += [
        {"id": 26, "type": "LTXVAudioVAELoader", "pos": [40, 560], "size": [380, 60],
         "widgets": {"ckpt_name": t.model.name}, "models": [file_ref(t.model)]},
        {"id": 27, "type": audio_type, "pos": [460, 1040], "size": [300, 110], "widgets": widgets},
        {"id": 28, "type": "LTXVConcatAVLatent", "pos": [800, 960], "size": [240, 50], "widgets": {}},
    ]
    links += [(26, 0, 27, "audio_vae"), (7, 0, 28, "video_latent"), (27, 0, 28, "audio_latent")]
    return 28


def family_compare(name: str, template: FamilyTemplate, object_info: dict) -> dict:
    """A family's compare template (devkit/example_templates.py): one seed sampled with and without
    CacheDiTDBCache, then compared; the cache node has the schema's defaults but ``template.cache``.

    With ``template.low_noise`` (Wan 2.2 A14B) each branch samples two experts in turn with KSamplerAdvanced,
    and the cached branch has a cache node per expert."""
    t = template
    defaults = cache_defaults(object_info, CACHE_NODE)
    unknown = sorted(set(t.cache) - set(defaults))
    assert not unknown, f"{name}: the cache node has no input {unknown}"
    clip_type, clip_widgets = t.text_encoder_node()
    # A loader that reads the checkpoint too (LTX-2's) offers both downloads.
    clip_files = (*t.text_encoders, *([t.model] if t.text_encoder_loader else []))
    clip = {"type": clip_type, "widgets": clip_widgets}
    prefix = name.removesuffix("_compare.json")
    latent_inputs = object_info[t.latent]["input"]["required"]
    fewer = family_fewer_steps(t, object_info)
    nodes = [
        {"id": 2, "pos": [40, 200], "size": [380, 130], "models": [file_ref(f) for f in clip_files], **clip},
        {"id": 5, "type": "CLIPTextEncode", "title": "Positive Prompt", "pos": [460, 460], "size": [400, 180],
         "widgets": {"text": t.prompt or PROMPT}},
        {"id": 7, "type": t.latent, "pos": [460, 900], "size": [300, 110],
         "widgets": {**t.latent_size, **({"batch_size": 1} if "batch_size" in latent_inputs else {})}},
        {"id": 17, "type": "PrimitiveInt", "title": "Seed", "pos": [900, 680], "size": [320, 82],
         "widgets": {"value": 42, "control_after_generate": "fixed"}},
        {"id": 11, "type": "MarkdownNote", "pos": [-460, 40], "size": [460, 760], "text": family_note(t, fewer, {**defaults, **t.cache}, object_info)},
    ]
    links = [(2, 0, 5, "clip")]
    latent = 7   # what the samplers start from: the empty latent, or the audio-video latent it is joined into
    if t.audio_latent is not None:
        latent = audio_video_latent(nodes, links, t)
    if t.vae_file is None:  # the checkpoint's VAE (its loader's third output)
        assert t.loader == "CheckpointLoaderSimple", f"{name}: no VAE file, and {t.loader} loads no VAE"
        vae = (1, 2)
    else:
        nodes.append({"id": 3, "type": "VAELoader", "pos": [40, 380], "size": [380, 60],
                      "widgets": {"vae_name": t.vae_file.name}, "models": [file_ref(t.vae_file)]})
        vae = (3, 0)
    if t.negative is None:
        nodes.append({"id": 6, "type": "ConditioningZeroOut", "pos": [460, 690], "size": [240, 30], "widgets": {}})
        links.append((5, 0, 6, "conditioning"))
    else:
        nodes.append({"id": 6, "type": "CLIPTextEncode", "title": "Negative Prompt", "pos": [460, 690],
                      "size": [400, 120], "widgets": {"text": t.negative}})
        links.append((2, 0, 6, "clip"))

    def expert(loader: int, shift_id: int, cache: int, file: ModelFile, y: int, title: str | None) -> int:
        """Its loader, its shift (linked here) and its cache node; returns the node the model comes from (the
        loader, or the shift after it), which feeds the cache node and the uncached sampler."""
        loader_type, file_input, widgets = LOADERS[file.directory]
        nodes.append({"id": loader, "type": loader_type, "pos": [40, y], "size": [380, 110],
                      "widgets": {file_input: file.name, **widgets}, "models": [file_ref(file)],
                      **({"title": f"Load {title}"} if title else {})})
        nodes.append({"id": cache, "type": "CacheDiTDBCache", "pos": [460, y], "size": [340, 370],
                      "widgets": {**defaults, **t.cache}, **({"title": f"Cache-DiT ({title})"} if title else {})})
        if t.shift is None:
            return loader
        shift_type, shift = t.shift
        nodes.append({"id": shift_id, "type": shift_type, "pos": [460, y - 120], "size": [300, 60],
                      "widgets": {"shift": shift}})
        links.append((loader, 0, shift_id, "model"))
        return shift_id

    if t.low_noise is None:
        models = [(expert(1, 18, 4, t.model, 40, None), 4)]
    else:
        models = [(expert(1, 18, 4, t.model, 40, "high noise"), 4),
                  (expert(20, 21, 22, t.low_noise, 480, "low noise"), 22)]
    positive = 5
    if t.guidance is not None:
        nodes.append({"id": 19, "type": "FluxGuidance", "pos": [460, 660], "size": [300, 60],
                      "widgets": {"guidance": t.guidance}})
        links.append((5, 0, 19, "conditioning"))
        positive = 19
    conds = [(positive, 0), (6, 0)]   # what the samplers take as positive and negative
    if t.conditioning is not None:
        cond_type, widgets = t.conditioning
        nodes.append({"id": 25, "type": cond_type, "pos": [460, 820], "size": [300, 80], "widgets": widgets})
        links += [(positive, 0, 25, "positive"), (6, 0, 25, "negative")]
        conds = [(25, 0), (25, 1)]

    def sampler(node_id: int, pos: list[int], title: str, stage: str | None = None, steps: int = t.steps,
                split_step: int | None = t.split_step) -> dict:
        if stage is None:
            return {"id": node_id, "type": "KSampler", "title": title, "pos": pos, "size": [320, 270],
                    "widgets": {"seed": 42, "control_after_generate": "fixed", "steps": steps, "cfg": t.cfg,
                                "sampler_name": t.sampler, "scheduler": t.scheduler, "denoise": 1.0}}
        high = stage == "high"
        return {"id": node_id, "type": "KSamplerAdvanced", "title": title, "pos": pos, "size": [320, 340],
                "widgets": {"add_noise": "enable" if high else "disable", "noise_seed": 42,
                            "control_after_generate": "fixed", "steps": steps, "cfg": t.cfg,
                            "sampler_name": t.sampler, "scheduler": t.scheduler,
                            "start_at_step": 0 if high else split_step,
                            "end_at_step": split_step if high else 10000,
                            "return_with_leftover_noise": "enable" if high else "disable"}}

    def sampled(node: int, model: int, latent: int, seed: str) -> list[tuple]:
        (pos, pos_slot), (neg, neg_slot) = conds
        return [(model, 0, node, "model"), (pos, pos_slot, node, "positive"), (neg, neg_slot, node, "negative"),
                (latent, 0, node, "latent_image"), (17, 0, node, seed)]

    def branch(decode: int, save: int, samplers: list[int], through_cache: bool) -> list[tuple]:
        """The links of one branch: its samplers in turn (each expert's), then (an audio-video latent split, its
        video) its decode and save."""
        seed = "seed" if t.low_noise is None else "noise_seed"
        out, sampled_latent = [], latent
        for node, (model, cache) in zip(samplers, models):
            out += sampled(node, cache if through_cache else model, sampled_latent, seed)
            sampled_latent = node
        if t.audio_latent is not None:   # the video part of the sampled latent (the split's first output)
            split = decode + 20
            x, y = next(node["pos"] for node in nodes if node["id"] == decode)
            nodes.append({"id": split, "type": "LTXVSeparateAVLatent", "pos": [x, y - 100], "size": [240, 50],
                          "widgets": {}})
            out.append((sampled_latent, 0, split, "av_latent"))
            sampled_latent = split
        return [*out, (sampled_latent, 0, decode, "samples"), (*vae, decode, "vae"), (decode, 0, save, "images")]

    # The fewer-steps branch: each expert at the steps that cost as much as its cached run, in turn.
    fewer_counts = [steps for steps, _ in fewer]
    if t.low_noise is None:
        cached, uncached, fewer_samplers = [8], [12], [30]
        nodes += [sampler(8, [900, 40], "KSampler (Cache-DiT)"), sampler(12, [900, 360], "KSampler (uncached)"),
                  sampler(30, [900, 1100], "KSampler (fewer steps)", steps=fewer_counts[0])]
    else:
        cached, uncached, fewer_samplers = [8, 23], [12, 24], [30, 31]
        total, split = sum(fewer_counts), fewer_counts[0]
        nodes += [sampler(8, [900, 40], "High noise (Cache-DiT)", "high"),
                  sampler(23, [1240, 40], "Low noise (Cache-DiT)", "low"),
                  sampler(12, [900, 420], "High noise (uncached)", "high"),
                  sampler(24, [1240, 420], "Low noise (uncached)", "low"),
                  sampler(30, [900, 1100], "High noise (fewer steps)", "high", steps=total, split_step=split),
                  sampler(31, [1240, 1100], "Low noise (fewer steps)", "low", steps=total, split_step=split)]
    nodes += [
        {"id": 9, "type": "VAEDecode", "pos": [1260, 40], "size": [210, 50], "widgets": {}},
        {"id": 10, "type": "SaveImage", "title": "Cache-DiT", "pos": [1980, 40], "size": [400, 440],
         "widgets": {"filename_prefix": f"{prefix}_cachedit"}},
        {"id": 13, "type": "VAEDecode", "pos": [1260, 360], "size": [210, 50], "widgets": {}},
        {"id": 14, "type": "SaveImage", "title": "Uncached", "pos": [1980, 520], "size": [400, 440],
         "widgets": {"filename_prefix": f"{prefix}_uncached"}},
        {"id": 15, "type": "Krea2CompareImages", "pos": [1520, 40], "size": [420, 560], "widgets": {}},
        {"id": 16, "type": "SaveImage", "title": "Difference", "pos": [1520, 640], "size": [420, 440],
         "widgets": {"filename_prefix": f"{prefix}_difference"}},
        *fewer_steps_outputs(prefix),
    ]
    links += [
        *[(model, 0, cache, "model") for model, cache in models],
        *branch(9, 10, cached, True), *branch(13, 14, uncached, False),
        (13, 0, 15, "reference"), (9, 0, 15, "candidate"), (15, 0, 16, "images"),
        *branch(FEWER_DECODE, FEWER_SAVE, fewer_samplers, False), *fewer_steps_compare_links(),
    ]
    order = [1, 20, 2, 3, 26, 4, 22, 5, 7, 27, 28, 17, 11, 6, 18, 21, 19, 25, 8, 23, 29, 9, 10, 12, 24, 33, 13, 14,
             30, 31, 54, 34, 35, 15, 16, 36, 37]
    nodes.sort(key=lambda node: order.index(node["id"]))  # the order the editor runs and lists them in
    return build(name, nodes, links, object_info)


EXAMPLES = {
    # Krea-2 Turbo: 8 steps, CFG 1, euler/simple, 1024x1024 (Comfy-Org's Turbo template settings).
    "krea2_turbo_cachedit.json": (text_to_image, dict(variant="turbo", steps=8, cfg=1.0)),
    # Krea-2 Raw: the reference 52 steps at CFG 3.5.
    "krea2_raw_cachedit.json": (text_to_image, dict(variant="raw", steps=52, cfg=3.5)),
    # The same Turbo graph through the pack's diffusers loader.
    "krea2_diffusers_cachedit.json": (text_to_image, dict(variant="turbo", steps=8, cfg=1.0, diffusers=True)),
    # Turbo with and without Cache-DiT from one seed, and how far apart the two images are.
    "krea2_turbo_compare.json": (cached_vs_uncached, dict(variant="turbo", steps=8, cfg=1.0)),
    # The same through the Forecast node at the README's faster settings: Turbo 5 of 8 steps computed, Raw 13 of 52.
    "krea2_turbo_forecast_compare.json": (cached_vs_uncached, dict(variant="turbo", steps=8, cfg=1.0,
                                                                   forecast="turbo_5_of_8")),
    "krea2_raw_forecast_compare.json": (cached_vs_uncached, dict(variant="raw", steps=52, cfg=3.5,
                                                                 forecast="raw_1_in_4")),
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
    workflows = {name: make(name, object_info=object_info, **spec) for name, (make, spec) in EXAMPLES.items()}
    workflows |= {name: family_compare(name, template, object_info) for name, template in FAMILY_TEMPLATES.items()}
    for name, workflow in workflows.items():
        (OUT_DIR / name).write_text(json.dumps(workflow, indent=2) + "\n")
        print(f"wrote {OUT_DIR / name}")


if __name__ == "__main__":
    main()
