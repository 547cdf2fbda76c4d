"""The shipped example workflows: valid against the real server's /object_info, and runnable.

Each example is converted to an API prompt and run on the CPU with the small stand-ins of
tests/support/example_stand_ins.py (tiny Krea-2, or the family's test checkpoint for another family's example; test
conditioning instead of the text encoders, a tiny VAE of the example's kind, 64x64); CFG, sampler and every
Cache-DiT setting stay as shipped, and so do the steps but for a family whose calls are slow even when tiny
(``stand_in_steps``). The other families' compare templates are one entry each in devkit/example_templates.py;
Wan 2.2 A14B's samples two experts in turn (KSamplerAdvanced), each through its own cache node; LTX-Video's loads
a checkpoint (CheckpointLoaderSimple, its VAE decoding), here one of the tiny LTXV and its tiny VAE; MiniMax H3's
audio-video latent has 5 frames at least, of which the first is saved and compared. LTX-2's checkpoint holds its audio
VAE too, which sizes the audio latent joined with the video one (LTXVConcatAVLatent); each sampled latent is split
(LTXVSeparateAVLatent) and its video decoded: here the tiny LTX-2 with a tiny VAE and a narrow audio VAE.

Every compare template has a third branch, the same graph without the cache at the steps that cost as much as the
cached run (``example_templates.fewer_steps``: the pack's own plan for the cache settings and the real model's block
lists), compared with the uncached image by a second compare node. Here its steps are checked against the cache
settings, and on the stand-in the plan against the record of the cached run: equal where the settings fix the steps
cached, a bound the run cannot beat where the threshold decides.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from devkit.comfy_harness import PACK_DIR_NAME
from devkit.editor_format import UI_ONLY_TYPES, ordered_inputs, to_api_prompt, widget_values
from devkit.comfy_models import FAMILY_MODELS
from example_stand_ins import (CACHE_NODES, SAMPLERS, TEST_SIZE, compare_branches, decoded_by, example_prompt,
                               run_example_nodes, sampled_by, saved_images, saved_rgb, write_stand_in_checkpoint,
                               write_tiny_vae)
from devkit.example_templates import FAMILY_TEMPLATES, KREA2_BLOCKS, TEXT_ENCODER_LOADERS, FamilyTemplate, fewer_steps
from devkit.family_prompts import FAMILIES
from devkit.krea2_prompts import TINY_MODEL

from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run

pytestmark = pytest.mark.comfyui

REPO_ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO_ROOT / "example_workflows").glob("*.json"))


def nodes_of_type(path: Path, node_type: str) -> list[dict]:
    return [node for node in json.loads(path.read_text())["nodes"] if node["type"] == node_type]


CONTROL_VALUES = {"fixed", "increment", "decrement", "randomize"}

# Model-file widgets hold Comfy-Org's file names (the server here has none of those files), each with the URL
# it downloads from (the editor offers the download from the node's properties.models).
KREA2_ORG = "https://huggingface.co/Comfy-Org/Krea-2/resolve/main/"
KREA2_TEXT_AND_VAE = {name: f"{KREA2_ORG}{directory}/{name}" for name, directory in (
    ("qwen3vl_4b_bf16.safetensors", "text_encoders"), ("qwen_image_vae.safetensors", "vae"))}
TURBO_FILES = {"krea2_turbo_fp8_scaled.safetensors": f"{KREA2_ORG}diffusion_models/krea2_turbo_fp8_scaled.safetensors",
               **KREA2_TEXT_AND_VAE}
RAW_FILES = {"krea2_raw_bf16.safetensors": f"{KREA2_ORG}diffusion_models/krea2_raw_bf16.safetensors",
             **KREA2_TEXT_AND_VAE}
MODEL_WIDGETS = {("UNETLoader", "unet_name"), ("Krea2DiffusersLoader", "model_name"),
                 ("CheckpointLoaderSimple", "ckpt_name"), ("CLIPLoader", "clip_name"),
                 ("DualCLIPLoader", "clip_name1"), ("DualCLIPLoader", "clip_name2"), ("VAELoader", "vae_name"),
                 ("LTXAVTextEncoderLoader", "text_encoder"), ("LTXAVTextEncoderLoader", "ckpt_name"),
                 ("LTXVAudioVAELoader", "ckpt_name")}
CLIP_LOADERS = ("CLIPLoader", "DualCLIPLoader", *TEXT_ENCODER_LOADERS)
# What may sit between the model loader and the cache node: the family's sampling shift.
MODEL_PATCHES = {"ModelSamplingAuraFlow", "ModelSamplingSD3", "ModelSamplingFlux"}


@dataclasses.dataclass(frozen=True)
class Example:
    """What an example is about: its sampling recipe, the family its stats name, how it is built."""

    steps: int
    cfg: float
    family: str                      # the model family in the stats
    files: dict                      # file name -> the URL it downloads from, for every model file it loads
    sampler: str = "euler"
    scheduler: str = "simple"
    clip_type: str = "krea2"
    cache_node: str = "CacheDiTDBCache"   # every template's DBCache node (Krea2CacheDiT is deprecated)
    loader: str = "UNETLoader"
    stand_in: str = "krea2"          # the tiny model it runs on here: "krea2" or a family of family_prompts
    vae: str = "wan21"               # the kind of tiny VAE that stands in for its VAE (example_stand_ins)
    cache: dict = dataclasses.field(default_factory=dict)   # cache settings that differ from the defaults
    stand_in_steps: int | None = None   # the steps its stand-in samples, when not the example's own
    # Two experts in turn (Wan 2.2 A14B): (high-noise file, low-noise file), the step the second takes over
    # at, and file -> the checkpoint standing in for it.
    experts: tuple[str, ...] = ()
    split_step: int | None = None
    stand_ins: dict = dataclasses.field(default_factory=dict)
    conditioning: dict | None = None   # the node between the prompts and the samplers: {class_type, inputs}
    audio_latent: dict | None = None   # LTX-2's audio latent node, joined with the video latent: {class_type, inputs}
    blocks: tuple[int, ...] = ()       # a compare template's real model: its blocks per block list
    forecast: str | None = None        # the Forecast node's preset (cache_node CacheDiTSpectrum)

    @classmethod
    def of(cls, t: FamilyTemplate) -> Example:
        """A family's compare template (devkit/example_templates.py), as this test expects it."""
        low = (t.low_noise,) if t.low_noise else ()
        files = {f.name: f.url for f in t.files}
        experts = tuple(f.name for f in (t.model, *low)) if low else ()
        stand_ins = ({t.model.name: FAMILIES[t.stand_in].model, t.low_noise.name: FAMILY_MODELS[t.low_noise_stand_in]}
                     if low else {})
        return cls(t.steps, t.cfg, t.family, files, sampler=t.sampler, scheduler=t.scheduler, clip_type=t.clip_type,
                   cache_node="CacheDiTDBCache", loader=t.loader, stand_in=t.stand_in, vae=t.vae, cache=dict(t.cache),
                   stand_in_steps=t.stand_in_steps, experts=experts, split_step=t.split_step, stand_ins=stand_ins,
                   conditioning=t.conditioning and {"class_type": t.conditioning[0], "inputs": t.conditioning[1]},
                   audio_latent=t.audio_latent and {"class_type": t.audio_latent[0], "inputs": t.audio_latent[1]},
                   blocks=t.blocks)

    def stage_steps(self, shipped: bool = False) -> list[tuple[int, int]]:
        """(start, end) of the steps each expert samples, in turn; one model: all of them (``shipped``: as the
        template has them, else as its stand-in samples them)."""
        if not self.experts:
            return [(0, self.steps if shipped else self.stand_in_steps or self.steps)]
        return [(0, self.split_step), (self.split_step, self.steps)]

    def fewer_steps(self, cache_widgets: dict, shipped: bool = True) -> list[tuple[int, bool]]:
        """Each expert's steps in the fewer-steps branch, and whether exact (``example_templates.fewer_steps``); the
        Forecast node's: the steps its preset's plan computes, exact."""
        if self.forecast:
            return [forecast_computed(self.forecast, end - start) for start, end in self.stage_steps(shipped)]
        return [fewer_steps(cache_widgets, end - start, self.blocks) for start, end in self.stage_steps(shipped)]


def forecast_computed(preset: str, steps: int) -> tuple[int, bool]:
    """The steps the Forecast node's plan computes for ``preset`` at ``steps`` (a forecast step runs no block, so
    as many plain steps cost as much), exact: the schedule is fixed before the run."""
    return sum(plan_forecast_run(ForecastSettings.from_preset(preset), steps).mask), True


def forecast_settings(preset: str) -> dict:
    """The record's ``settings`` of a Forecast run with ``preset``, as JSON gives them back."""
    return json.loads(json.dumps(dataclasses.asdict(ForecastSettings.from_preset(preset))))


KREA2 = "Krea-2 (ComfyUI native)"
EXPECTED = {
    "krea2_turbo_cachedit.json": Example(8, 1.0, KREA2, TURBO_FILES),
    "krea2_raw_cachedit.json": Example(52, 3.5, KREA2, RAW_FILES),
    "krea2_diffusers_cachedit.json": Example(8, 1.0, "Krea-2 (diffusers)", TURBO_FILES,
                                             loader="Krea2DiffusersLoader"),
    "krea2_turbo_compare.json": Example(8, 1.0, KREA2, TURBO_FILES, blocks=KREA2_BLOCKS),
    # The Forecast node at the README's faster Krea-2 settings: Turbo 5 of 8 steps computed, Raw 13 of 52.
    "krea2_turbo_forecast_compare.json": Example(8, 1.0, KREA2, TURBO_FILES, blocks=KREA2_BLOCKS,
                                                 cache_node="CacheDiTSpectrum", forecast="turbo_5_of_8"),
    "krea2_raw_forecast_compare.json": Example(52, 3.5, KREA2, RAW_FILES, blocks=KREA2_BLOCKS,
                                               cache_node="CacheDiTSpectrum", forecast="raw_1_in_4"),
    # Every other family's compare template: one entry each in devkit/example_templates.py.
    **{name: Example.of(template) for name, template in FAMILY_TEMPLATES.items()},
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


# --- checks ----------------------------------------------------------------------------

def test_examples_are_shipped():
    assert {path.name for path in EXAMPLES} == set(EXPECTED)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_no_template_holds_a_deprecated_node(path, object_info):
    """The editor's node search hides a deprecated node (Krea2CacheDiT): a template uses what a user can add."""
    deprecated = sorted({node["type"] for node in load(path)["nodes"]
                         if node["type"] not in UI_ONLY_TYPES and object_info[node["type"]].get("deprecated")})
    assert not deprecated, f"{path.name} holds deprecated nodes {deprecated}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.name)
def test_every_note_speaks_chinese_too(path):
    """The editor shows a template's note as it is: each carries a Chinese section after the English, with a
    family template's recipe and the evidence behind its settings in Chinese (every model link stays above)."""
    notes = [node["widgets_values"][0] for node in nodes_of_type(path, "MarkdownNote")]
    assert notes and all("\n### 中文说明\n" in note for note in notes), notes
    chinese = "".join(note.split("### 中文说明", 1)[1] for note in notes)
    assert sum("\u4e00" <= char <= "\u9fff" for char in chinese) >= 60, chinese
    template = FAMILY_TEMPLATES.get(path.name)
    if template is not None:
        assert template.recipe_zh and template.evidence_zh, path.name
        assert template.recipe_zh in chinese and template.evidence_zh in chinese, chinese


def test_the_cache_nodes_are_siblings_in_a_category_every_family_finds(object_info):
    """Saved workflows hold widget values by position: both cache nodes take the same settings in the same order."""
    krea2, general = object_info["Krea2CacheDiT"], object_info["CacheDiTDBCache"]
    assert krea2["category"] == general["category"] == "model/patch/Cache-DiT"
    assert krea2["input_order"] == general["input_order"]
    strip = lambda inputs: {name: spec for name, spec in inputs.items() if name != "model"}  # noqa: E731
    assert strip(krea2["input"]["required"]) == strip(general["input"]["required"])
    assert krea2["input_order"]["required"] == [
        "model", "steps_mask", "Fn_compute_blocks", "Bn_compute_blocks", "residual_diff_threshold", "max_warmup_steps",
        "warmup_interval", "max_cached_steps", "max_continuous_cached_steps", "calibrator", "taylorseer_order",
        "dmd_history"]


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
                files = EXPECTED[path.name].files
                assert value in files, where
                # The editor offers the download from properties.models when the file is missing.
                models = {m["name"]: m for m in node["properties"].get("models", [])}
                assert value in models, where
                assert models[value]["url"] == files[value], where
                assert models[value]["url"].endswith(f"/{value}"), where
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
    """The sampling recipe of each example, and Cache-DiT with its defaults (the reference settings)."""
    workflow = load(path)
    example = EXPECTED[path.name]
    samplers = [sampler for kind in SAMPLERS for sampler in nodes_of(workflow, kind)]
    assert samplers
    prompt = to_api_prompt(workflow, object_info)
    # The fewer-steps branch of a compare template samples the same recipe at other steps (checked below).
    fewer = compare_branches(prompt)["fewer"] if path in COMPARE_EXAMPLES else []
    # One model: KSampler; two experts in turn: KSamplerAdvanced with their start and end steps.
    assert {sampler["type"] for sampler in samplers} == {"KSamplerAdvanced" if example.experts else "KSampler"}
    for sampler in samplers:
        values = {k: v[0] for k, v in widget_values(sampler, object_info[sampler["type"]]).items()}
        recipe = (values["cfg"], values["sampler_name"], values["scheduler"])
        assert recipe == (example.cfg, example.sampler, example.scheduler), f"KSampler {sampler['id']}"
        assert str(sampler["id"]) in fewer or values["steps"] == example.steps, f"KSampler {sampler['id']}"
    loaders = [loader for kind in CLIP_LOADERS for loader in nodes_of(workflow, kind)]
    assert loaders
    for loader in loaders:  # its type widget, or the type a loader without one loads (LTX-2's)
        values = widget_values(loader, object_info[loader["type"]])
        assert (values["type"][0] if "type" in values else TEXT_ENCODER_LOADERS[loader["type"]][2]) == example.clip_type
    # Every model file it loads is one of its files, and its note links each of them.
    loaded = {value for node in workflow["nodes"] if node["type"] not in UI_ONLY_TYPES
              for name, (value, _) in widget_values(node, object_info[node["type"]]).items()
              if (node["type"], name) in MODEL_WIDGETS}
    assert loaded == set(example.files), (loaded, example.files)
    notes = " ".join(node["widgets_values"][0] for node in nodes_of(workflow, "MarkdownNote"))
    assert all(f"[{name}]({url})" in notes for name, url in example.files.items()), notes
    # A cache node per model: each expert's run is its own.
    caches = nodes_of(workflow, example.cache_node)
    assert [n["type"] for n in workflow["nodes"] if n["type"] in CACHE_NODES] == \
        [example.cache_node] * len(example.stage_steps())
    cache_info = object_info[example.cache_node]
    defaults = ({"preset": example.forecast} if example.forecast else   # the Forecast node: its preset, no default
                {name: opts["default"] for name, _, opts, is_widget in ordered_inputs(cache_info) if is_widget})
    stages = []
    for cache in caches:
        values = {k: v[0] for k, v in widget_values(cache, cache_info).items()}
        assert values == defaults | example.cache
        # The cache node sits between the model loader and one sampler.
        cached = [s for s in samplers if prompt[str(s["id"])]["inputs"]["model"][0] == str(cache["id"])]
        assert len(cached) == 1, "exactly one sampler samples through each Cache-DiT node"
        upstream = prompt[str(cache["id"])]["inputs"]["model"][0]
        while prompt[upstream]["class_type"] in MODEL_PATCHES:  # a family's shift sits before the cache
            upstream = prompt[upstream]["inputs"]["model"][0]
        assert prompt[upstream]["class_type"] == example.loader
        sampled = prompt[str(cached[0]["id"])]["inputs"]
        steps = (sampled.get("start_at_step", 0), min(sampled.get("end_at_step", example.steps), example.steps))
        stages.append((prompt[upstream]["inputs"].get("unet_name"), steps))
    if example.experts:  # the high-noise expert first, then the low-noise one, each its own steps
        assert sorted(stages, key=lambda stage: stage[1]) == list(zip(example.experts, example.stage_steps()))
    if fewer:
        check_fewer_steps([prompt[n]["inputs"] for n in fewer], example.fewer_steps(defaults | example.cache))
    if example.conditioning:  # e.g. LTXVConditioning's frame rate: both prompts through it, into every sampler
        for sampler in samplers:
            inputs = prompt[str(sampler["id"])]["inputs"]
            node = prompt[inputs["positive"][0]]
            assert inputs["negative"][0] == inputs["positive"][0]
            assert node["class_type"] == example.conditioning["class_type"]
            widgets = {k: v for k, v in node["inputs"].items() if not isinstance(v, list)}
            assert widgets == example.conditioning["inputs"]
            assert {prompt[node["inputs"][k][0]]["class_type"] for k in ("positive", "negative")} == {"CLIPTextEncode"}
    if example.audio_latent:  # every sampler starts from the video latent joined with the audio latent
        check_audio_video_latent(prompt, samplers, example)


def check_fewer_steps(samplers: list[dict], planned: list[tuple[int, bool]]):
    """The fewer-steps branch samples what the pack's plan says costs as much as the cached run: one model, its
    steps; two experts in turn, their sum, the first expert's share first."""
    counts = [steps for steps, _ in planned]
    if len(samplers) == 1:
        assert samplers[0]["steps"] == counts[0], (samplers, planned)
        return
    high, low = samplers
    assert high["steps"] == low["steps"] == sum(counts), (samplers, planned)
    assert (high["start_at_step"], high["end_at_step"], low["start_at_step"]) == (0, counts[0], counts[0])
    assert low["end_at_step"] >= sum(counts)


def check_audio_video_latent(prompt: dict, samplers: list[dict], example: Example):
    """The samplers start from one LTXVConcatAVLatent of the empty video latent and the audio latent node, whose
    audio VAE is the model checkpoint's, as long as the video at the frame rate of the conditioning; each
    sampled latent is split by LTXVSeparateAVLatent, and its video (first output) decoded."""
    (joined,) = {prompt[str(s["id"])]["inputs"]["latent_image"][0] for s in samplers}
    assert prompt[joined]["class_type"] == "LTXVConcatAVLatent"
    video, audio = (prompt[prompt[joined]["inputs"][k][0]] for k in ("video_latent", "audio_latent"))
    assert audio["class_type"] == example.audio_latent["class_type"]
    assert {k: v for k, v in audio["inputs"].items() if not isinstance(v, list)} == example.audio_latent["inputs"]
    assert audio["inputs"]["frames_number"] == video["inputs"]["length"]
    if example.conditioning:
        assert audio["inputs"]["frame_rate"] == example.conditioning["inputs"]["frame_rate"]
    audio_vae = prompt[audio["inputs"]["audio_vae"][0]]
    assert audio_vae["class_type"] == "LTXVAudioVAELoader" and audio_vae["inputs"]["ckpt_name"] in example.files
    assert audio_vae["inputs"]["ckpt_name"] == next(
        node["inputs"]["ckpt_name"] for node in prompt.values() if node["class_type"] == example.loader)
    decoders = [node for node in prompt.values() if node["class_type"] == "VAEDecode"]
    assert decoders
    for decoder in decoders:
        split, slot = decoder["inputs"]["samples"]
        assert prompt[split]["class_type"] == "LTXVSeparateAVLatent" and slot == 0, "the video part is decoded"
        assert prompt[split]["inputs"]["av_latent"][0] in {str(s["id"]) for s in samplers}


@pytest.mark.parametrize("path", COMPARE_EXAMPLES, ids=lambda p: p.stem)
def test_compare_example_differs_only_by_the_cache_node(path, object_info):
    """Three branches, one through Cache-DiT and one at fewer steps: same model(s), conds, latent, seed and VAE, the
    cached and the fewer-steps image each compared with the uncached one. A branch is one sampler, or one per expert
    in turn (Wan 2.2 A14B), each of the cached one through its own node."""
    prompt = to_api_prompt(load(path), object_info)
    samplers = {n: node["inputs"] for n, node in prompt.items() if node["class_type"] in SAMPLERS}
    caches = {n: node["inputs"] for n, node in prompt.items() if node["class_type"] in CACHE_NODES}
    decoders = [n for n, node in prompt.items() if node["class_type"] == "VAEDecode"]
    branches = compare_branches(prompt)
    cached, uncached, fewer = branches["cached"], branches["uncached"], branches["fewer"]
    assert len(cached) == len(uncached) == len(fewer) == len(caches)
    assert sorted(cached + uncached + fewer) == sorted(samplers)
    assert len({str(samplers[chain[0]]["latent_image"]) for chain in branches.values()}) == 1, "one empty latent"
    for through, plain, short in zip(cached, uncached, fewer):
        cache_id = samplers[through]["model"][0]
        assert cache_id in caches, f"sampler {through} samples through a Cache-DiT node"
        assert samplers[plain]["model"] == samplers[short]["model"] == caches[cache_id]["model"], (
            "the uncached and fewer-steps samplers skip the node")
        same = lambda inputs: {k: v for k, v in inputs.items() if k not in ("model", "latent_image")}  # noqa: E731
        assert same(samplers[through]) == same(samplers[plain])
        steps = ("steps", "start_at_step", "end_at_step")   # the fewer-steps branch's own (test_example_settings)
        assert {k: v for k, v in same(samplers[short]).items() if k not in steps} == {
            k: v for k, v in same(samplers[plain]).items() if k not in steps}
        seed = samplers[through].get("seed", samplers[through].get("noise_seed"))
        assert isinstance(seed, list) and prompt[seed[0]]["class_type"] == "PrimitiveInt", "one seed node for all"
    assert len({samplers[n]["model"][0] for n in cached}) == len(caches), "a cache node per model"

    assert sorted(sampled_by(prompt, d) for d in decoders) == sorted(chain[-1] for chain in branches.values())
    assert len({str(prompt[d]["inputs"]["vae"]) for d in decoders}) == 1, "one VAE decodes all three"


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


def stand_in(example: Example, request) -> tuple:
    """(server, tiny model, conditioning width) that an example runs on here."""
    if example.stand_in == "krea2":
        return request.getfixturevalue("comfy_server"), TINY_MODEL, request.getfixturevalue("tiny_shape").context_features
    spec = FAMILIES[example.stand_in]
    # The fixture whose server holds the family's checkpoint (written when first asked for, where on demand).
    server = request.getfixturevalue(spec.server)
    return server, spec.model, spec.context_features


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_on_cpu(path, comfy_root, object_info, request):
    example = EXPECTED[path.name]
    server, model, context_features = stand_in(example, request)
    spec = FAMILIES[example.stand_in]
    vae_name = write_tiny_vae(comfy_root, server.base_dir, example.vae)
    if example.loader == "CheckpointLoaderSimple":  # the checkpoint holds the model and its VAE (and audio VAE)
        audio_vae = write_tiny_vae(comfy_root, server.base_dir, "ltx2_audio") if example.audio_latent else None
        model = write_stand_in_checkpoint(server.base_dir, model, vae_name, audio_vae)
    prompt = example_prompt(load(path), object_info, vae_name=vae_name,
                            model=model, context_features=context_features, pooled_features=spec.pooled_features,
                            attention_mask=spec.attention_mask,
                            prefix=f"examples/{path.stem}", steps=example.stand_in_steps, models=example.stand_ins,
                            loader=spec.loader)
    compare = path in COMPARE_EXAMPLES
    branches = compare_branches(to_api_prompt(load(path), object_info)) if compare else {}
    cache_widgets = CACHE_DEFAULTS | example.cache
    if compare and example.stand_in_steps:   # fewer steps than the stand-in's own, as the template has them
        ((steps, _),) = example.fewer_steps(cache_widgets, shipped=False)
        (fewer_id,) = branches["fewer"]
        prompt[fewer_id]["inputs"]["steps"] = steps
    _, entry, runs = run_example_nodes(server, prompt)
    # Each cache node's record is its own run: its model's steps (an expert's share of them), in turn.
    runs = sorted(runs.values(), key=lambda run: run["sigmas"][0], reverse=True)
    summaries = [(run["status"], run["steps"], run["cfg"], run["settings"], run["model"]) for run in runs]
    settings = forecast_settings(example.forecast) if example.forecast else CACHE_DEFAULTS | example.cache
    assert summaries == [("ok", end - start, example.cfg, settings, example.family)
                         for start, end in example.stage_steps()]
    for earlier, later in zip(runs, runs[1:]):  # the low-noise run starts where the high-noise one stopped
        assert earlier["sigmas"][-1] == pytest.approx(later["sigmas"][0])
    saved = saved_images(server, prompt, entry)
    compared = {prompt[n]["inputs"]["candidate"][0]: check_compare_outputs(server, prompt, entry, n, saved)
                for n, node in prompt.items() if node["class_type"] == "Krea2CompareImages"}
    cached_steps = [run["skipped_steps"] for run in runs]   # cached, or forecast (the Forecast node)
    if not compare:
        return
    by_branch = {name: compared[decoder] for decoder in compared for name, chain in branches.items()
                 if chain[-1] == sampled_by(prompt, decoded_by(prompt, decoder))}
    assert set(by_branch) == {"cached", "fewer"}, by_branch
    if any(cached_steps):  # served from the cache: the cached image cannot equal the uncached one
        assert by_branch["cached"]["mae_255"] > 0, (cached_steps, by_branch)
    check_fewer_steps_run(runs, example, cache_widgets, [prompt[n]["inputs"] for n in branches["fewer"]],
                          by_branch["fewer"])


def check_fewer_steps_run(runs: list[dict], example: Example, cache_widgets: dict, samplers: list[dict],
                          metrics: dict):
    """The plan on the stand-in's own block lists against each cache node's record: the same step count where the
    settings fix the steps cached, one the run cannot beat where the threshold decides; the template's block lists
    are as many as the model's. The fewer-steps image is the uncached one exactly when it samples as many steps."""
    for run in runs:
        blocks = tuple(part["size"] for part in run["block_lists"]) or (run["block_evals_uncached"] // run["calls"],)
        assert len(blocks) == len(example.blocks), (run["model"], run["block_lists"], example.blocks)
        planned, exact = (forecast_computed(example.forecast, run["steps"]) if example.forecast
                          else fewer_steps(cache_widgets, run["steps"], blocks))
        assert run["full_calls"] <= run["calls"] and run["equal_cost_steps"] is not None, run
        if exact:
            assert run["equal_cost_steps"] == planned, (run["cached_steps"], run["equal_cost_steps"], planned)
        else:
            assert run["equal_cost_steps"] >= planned, (run["cached_steps"], run["equal_cost_steps"], planned)
    steps = samplers[0]["steps"]
    shipped = example.stand_in_steps or example.steps
    assert steps <= shipped
    assert (metrics["mae_255"] == 0) == (steps == shipped), (steps, shipped, metrics)
