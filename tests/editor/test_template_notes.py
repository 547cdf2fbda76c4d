"""Each compare template's note is true to its graph: a test reads both.

The note's first line ("**In this graph**", and "**本工作流**" in its Chinese section) states plainly what the graph
runs: the steps (and, for two experts in turn, where the second takes over), CFG, sampler and scheduler, the one
Seed and its value, fixed; the cache node's preset or its DBCache settings (each by the label the editor shows it
under: the schema's ``display_name`` in English, locales/zh ``inputs.<id>.name`` in Chinese, never the input's id);
the fewer-steps sampler and its steps.
Each is held here to the graph as the editor queues it (``editor_format.to_api_prompt``), and the fewer-steps count
to the pack's own plan where the settings fix it (the Forecast node's preset: ``ForecastSettings``/``ForecastPlan``).
The note also says which number to type into the fewer-steps sampler after a run ("as many as N steps"), names only
nodes the graph holds (a bold name is a node's title, or the display name of an untitled node, in Chinese its
locales/zh one), speaks no
development words, and says whose every MAE figure is and what it rests on.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from devkit.editor_format import UI_ONLY_TYPES, to_api_prompt
from example_stand_ins import CACHE_NODES, compare_branches

from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run

pytestmark = pytest.mark.comfyui

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((REPO / "example_workflows").glob("*.json"))
COMPARE = [path for path in TEMPLATES if path.stem.endswith("_compare")]
ZH_HEADING = "### 中文说明"
ZH_NODE_DEFS = json.loads((REPO / "locales" / "zh" / "nodeDefs.json").read_text(encoding="utf-8"))
# Bold words of a note that are labels, not node names.
LABELS = {"In this graph", "Fewer steps or the cache?", "Recipe", "Cache settings", "Why this preset",
          "Another step count?", "本工作流", "更少的步数还是缓存？", "采样配方", "缓存设置", "为什么用这个预设", "换一个步数？"}
# A DBCache node's widgets a note leaves out while no calibrator runs (they are the calibrator's own).
CALIBRATOR_WIDGETS = {"taylorseer_order", "dmd_history"}
# Words for the pack's developers, not its users.
DEVELOPER_WORDS = re.compile(r"\b(prox(y|ies)|stand-ins?|tiers?|build ids?|devkit|kept as theirs)\b", re.IGNORECASE)

EN_LINE = re.compile(
    r"\*\*In this graph\*\*: (?P<steps>\d+) steps(?: \(the high-noise model for steps 0-(?P<split>\d+), the low-noise "
    r"one for (?P=split)-(?P=steps)\))?, CFG (?P<cfg>[\d.]+), (?P<sampler>\w+), (?P<scheduler>\w+); one \*\*Seed\*\*, "
    r"(?P<seed>\d+), (?P<control>fixed) \([^)]*\)\. (?:The|Each) cache node: (?P<cache>.+?)\. Fewer steps: "
    r"(?P<fewer_nodes>.+?) at (?P<fewer>\d+) steps(?:, the high-noise model for steps 0-(?P<fewer_split>\d+))?\.")
ZH_LINE = re.compile(
    r"\*\*本工作流\*\*：(?P<steps>\d+) 步(?:（高噪声模型负责第 0-(?P<split>\d+) 步，低噪声模型负责第 (?P=split)-(?P=steps) 步）)?，"
    r"CFG (?P<cfg>[\d.]+)，(?P<sampler>\w+)，(?P<scheduler>\w+)；一个 \*\*Seed\*\*，(?P<seed>\d+)，(?P<control>固定)（[^）]*）。"
    r"(?:每个)?缓存节点：(?P<cache>.+?)。更少步数：(?P<fewer_nodes>.+?) (?P<fewer>\d+) 步(?:，高噪声模型负责第 0-(?P<fewer_split>\d+) 步)?。")


def notes(workflow: dict) -> list[str]:
    return [node["widgets_values"][0] for node in workflow["nodes"] if node["type"] == "MarkdownNote"]


def split_note(note: str) -> tuple[str, str]:
    english, chinese = note.split(f"\n{ZH_HEADING}\n", 1)
    return english, chinese


def number(text: str) -> float:
    return float(text)


def input_labels(info: dict, zh: bool) -> dict[str, str]:
    """label -> input id for a node's widgets, as the editor shows them: the schema's ``display_name`` (English; the
    id where it has none), locales/zh ``inputs.<id>.name`` (Chinese; the English label where it has none)."""
    english = {name: (spec[1] if len(spec) > 1 else {}).get("display_name") or name
               for name, spec in info["input"].get("required", {}).items()}
    zh_inputs = ZH_NODE_DEFS.get(info["name"], {}).get("inputs", {})
    shown = {name: zh_inputs.get(name, {}).get("name") or label for name, label in english.items()} if zh else english
    labels = {label: name for name, label in shown.items()}
    assert len(labels) == len(shown), f"{info['name']}: two inputs share a label: {shown}"
    return labels


def stated_cache(text: str, labels: dict[str, str]) -> dict:
    """"preset `x`" / "预设 `x`", or '"label" value, ...' ('“label” value，...' in Chinese) as {input id: value text};
    ``labels``: label -> input id (``input_labels``)."""
    preset = re.fullmatch(r"(?:preset|预设) `(\w+)`", text)
    if preset:
        return {"preset": preset.group(1)}
    pairs = re.split(r", |，", text)
    stated = {}
    for pair in pairs:
        match = re.fullmatch(r'(?:"([^"]+)"|“([^”]+)”) (\S+)', pair)
        assert match, f"not '\"label\" value': {pair!r} in {text!r}"
        label = match.group(1) or match.group(2)
        assert label in labels, f"{label!r} is no label the editor shows: {sorted(labels)}"
        stated[labels[label]] = match.group(3)
    assert len(stated) == len(pairs), text
    return stated


def as_stated(value) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@pytest.fixture(scope="module")
def object_info(comfy_server) -> dict:
    return comfy_server.get("/object_info")


def graph_facts(workflow: dict, object_info: dict) -> dict:
    """What the graph runs, in the terms the note's first line states it."""
    prompt = to_api_prompt(workflow, object_info)
    branches = compare_branches(prompt)
    cached = [prompt[n]["inputs"] for n in branches["cached"]]
    fewer = [prompt[n]["inputs"] for n in branches["fewer"]]
    titles = {str(node["id"]): node.get("title") for node in workflow["nodes"]}
    seeds = [node for node in workflow["nodes"] if node["type"] == "PrimitiveInt" and node.get("title") == "Seed"]
    assert len(seeds) == 1, "one Seed node"
    (seed,) = seeds
    samplers = [node["inputs"] for node in prompt.values() if node["class_type"].startswith("KSampler")]
    seed_inputs = {str(inputs.get("seed", inputs.get("noise_seed"))) for inputs in samplers}
    assert seed_inputs == {str([str(seed["id"]), 0])}, f"every sampler takes the one Seed: {seed_inputs}"
    caches = [node["inputs"] for node in prompt.values() if node["class_type"] in CACHE_NODES]
    settings = [{k: v for k, v in cache.items() if k != "model"} for cache in caches]
    assert all(s == settings[0] for s in settings), settings
    first = cached[0]
    return {
        "steps": first["steps"], "split": first.get("end_at_step") if len(cached) > 1 else None,
        "cfg": first["cfg"], "sampler": first["sampler_name"], "scheduler": first["scheduler"],
        "seed": seed["widgets_values"][0], "control": seed["widgets_values"][1],
        "cache_types": {node["class_type"] for node in prompt.values() if node["class_type"] in CACHE_NODES},
        "cache_info": object_info[caches_type(prompt)],
        "cache": settings[0],
        "fewer": fewer[0]["steps"], "fewer_split": fewer[0].get("end_at_step") if len(fewer) > 1 else None,
        "fewer_titles": [titles[n] for n in branches["fewer"]],
    }


def caches_type(prompt: dict) -> str:
    (cache_type,) = {node["class_type"] for node in prompt.values() if node["class_type"] in CACHE_NODES}
    return cache_type


def check_line(match: re.Match | None, facts: dict, where: str, zh: bool = False):
    assert match, f"{where}: the note's first line states what the graph runs"
    stated = match.groupdict()
    assert int(stated["steps"]) == facts["steps"], (where, stated["steps"], facts["steps"])
    assert (stated["split"] and int(stated["split"])) == facts["split"], (where, stated["split"], facts["split"])
    assert number(stated["cfg"]) == facts["cfg"], (where, stated["cfg"], facts["cfg"])
    assert (stated["sampler"], stated["scheduler"]) == (facts["sampler"], facts["scheduler"]), where
    assert int(stated["seed"]) == facts["seed"] and facts["control"] == "fixed", (where, stated["seed"], facts)
    cache = stated_cache(stated["cache"], input_labels(facts["cache_info"], zh))
    if "preset" in cache:
        assert facts["cache_types"] == {"CacheDiTSpectrum"} and facts["cache"] == cache, (where, cache, facts)
    else:
        shown = {k: as_stated(v) for k, v in facts["cache"].items()
                 if facts["cache"].get("calibrator") != "none" or k not in CALIBRATOR_WIDGETS}
        assert cache == shown, (where, cache, shown)
    assert int(stated["fewer"]) == facts["fewer"], (where, stated["fewer"], facts["fewer"])
    assert (stated["fewer_split"] and int(stated["fewer_split"])) == facts["fewer_split"], where
    assert re.findall(r"\*\*(.+?)\*\*", stated["fewer_nodes"]) == facts["fewer_titles"], (where, stated["fewer_nodes"])


@pytest.mark.parametrize("path", COMPARE, ids=lambda path: path.stem)
def test_a_compare_note_states_what_its_graph_runs(path, object_info):
    workflow = json.loads(path.read_text())
    (note,) = notes(workflow)
    english, chinese = split_note(note)
    facts = graph_facts(workflow, object_info)
    check_line(EN_LINE.search(english), facts, f"{path.name} (English)")
    check_line(ZH_LINE.search(chinese), facts, f"{path.name} (Chinese)", zh=True)
    # The fewer-steps paragraph says the same count, "at N steps", in both languages.
    assert re.search(rf"\*\*Fewer steps or the cache\?\*\*[^\n]*? at {facts['fewer']} steps", english), path.name
    assert re.search(rf"更少的步数还是缓存？\*\*[^\n]*?以 {facts['fewer']} 步", chinese), path.name
    # Which number to type after a run: the cache node's "as many as N steps", into the fewer-steps sampler(s).
    typed = [s for s in re.split(r"(?<=[.;:]) ", english) if '"as many as N steps"' in s]
    assert typed and all("set" in s and ("fewer steps" in s or "fewer-steps" in s) for s in typed), (path.name, typed)
    assert "“相当于 N 步”" in chinese, path.name


@pytest.mark.parametrize("path", [p for p in COMPARE if "forecast" in p.stem], ids=lambda path: path.stem)
def test_a_forecast_templates_fewer_steps_are_what_its_preset_computes(path, object_info):
    """The Forecast node's preset fixes the steps it computes before the run: the fewer-steps sampler samples as
    many (the pack's plan), and the note says so, and how many it forecasts."""
    workflow = json.loads(path.read_text())
    facts = graph_facts(workflow, object_info)
    preset = facts["cache"]["preset"]
    computed = sum(plan_forecast_run(ForecastSettings.from_preset(preset), facts["steps"]).mask)
    assert facts["fewer"] == computed, (path.name, facts["fewer"], computed)
    (note,) = notes(workflow)
    english, chinese = split_note(note)
    assert f"`{preset}` computes {computed} of the {facts['steps']} steps and forecasts the other " \
           f"{facts['steps'] - computed}." in english
    assert f"`{preset}` 在 {facts['steps']} 步中计算 {computed} 步，其余 {facts['steps'] - computed} 步" in chinese
    assert "so the step count is exact" in english and "所以这个步数是准确的" in chinese
    # Where the preset stops holding, the note points to ``auto`` and its input, by the label the editor shows.
    speedup_en, speedup_zh = speedup_labels(object_info)
    assert re.search(rf"\*\*Another step count\?\*\* The preset is laid out for {facts['steps']} steps:[^\n]*"
                     rf"the preset `auto` and set \"{speedup_en}\"", english), path.name
    assert re.search(rf"\*\*换一个步数？\*\* 该预设是为 {facts['steps']} 步安排的：[^\n]*预设 `auto` 并设置“{speedup_zh}”",
                     chinese), path.name


def speedup_labels(object_info: dict) -> tuple[str, str]:
    """The ``auto`` preset's input as the editor labels it: its schema's display name (or id), locales/zh's name."""
    options = object_info["CacheDiTSpectrum"]["input"]["required"]["preset"][1]["options"]
    ((name, (_, opts)),) = [(name, spec) for option in options if option["key"] == "auto"
                            for name, spec in option["inputs"]["required"].items()]
    zh = ZH_NODE_DEFS["CacheDiTSpectrum"]["inputs"][f"preset_{name}"]["name"]
    return opts.get("display_name") or name, zh


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.stem)
def test_a_note_names_only_nodes_its_graph_holds(path, object_info):
    workflow = json.loads(path.read_text())
    names = {node["title"] for node in workflow["nodes"] if node.get("title")}
    untitled = [node["type"] for node in workflow["nodes"] if not node.get("title") and node["type"] not in UI_ONLY_TYPES]
    names |= {object_info[node_type]["display_name"] for node_type in untitled}
    names |= {ZH_NODE_DEFS[node_type]["display_name"] for node_type in untitled if node_type in ZH_NODE_DEFS}
    for note in notes(workflow):
        named = set(re.findall(r"\*\*(.+?)\*\*", note)) - LABELS
        assert named <= names, f"{path.name}: the note names {sorted(named - names)}, not in the graph {sorted(names)}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.stem)
def test_a_note_names_the_cache_inputs_by_their_labels(path, object_info):
    """The editor shows the DBCache node's inputs by their labels, so a note names them so, never by `id`."""
    ids = set(object_info["CacheDiTDBCache"]["input"]["required"]) - {"model"}
    for note in notes(json.loads(path.read_text())):
        named = sorted(name for name in re.findall(r"`(\w+)`", note) if name in ids)
        assert not named, f"{path.name}: the note names inputs by id, not by label: {named}"


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.stem)
def test_a_note_speaks_a_users_words_and_says_whose_figures(path):
    """No development words; every MAE figure says whose measurement it is and what it rests on."""
    for note in notes(json.loads(path.read_text())):
        assert not DEVELOPER_WORDS.search(note), (path.name, DEVELOPER_WORDS.findall(note))
        for paragraph in note.split("\n\n"):
            if re.search(r"\d/255", paragraph):
                # "not" the model the template is for: Krea-2, or Chroma (whose settings rest on the small Flux).
                assert re.search(r"Measured by (this pack on a small test model trained on drawn shapes[^:]*?not "
                                 r"(Krea-2|Chroma)|sglang on real Krea-2)|由本扩展在一个用绘制的图形训练|由 sglang 在真实 Krea-2",
                                 paragraph), (path.name, paragraph)
