"""The README's first screen ("Which node, what setting, what to expect") and the templates that run it.

Each row names a node (bold), a setting (a preset, "its defaults", or a DBCache step mask and calibrator:
"mask `X` + calibrator `Y`", the rest at the defaults) and the templates that run it: every template named exists,
holds that node and runs that setting, at the step count the row states; a row's "N of S" is what the preset or
the mask computes at S steps, and "as many as M plain steps" is the pack's own plan for it (a preset: M = N; a
mask: the equal-cost steps the template's fewer-steps branch runs). A row that points at "each model's
`*_compare` template" holds every compare template with that node to the setting.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from node_schemas import pack_node_infos
from devkit.example_templates import FAMILY_TEMPLATES, fewer_steps
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = REPO / "example_workflows"
SECTION = "## Which node, what setting, what to expect"
NODE_IDS = {"Cache-DiT Forecast": "CacheDiTSpectrum", "Cache-DiT DBCache": "CacheDiTDBCache"}
# What a template may deliberately set otherwise than the row, and why the README says so in the row.
DEVIATIONS = {"flux2_klein_compare": "steps_mask"}   # 4 steps end before the 4 warmup steps: mask `slow`


def first_screen_rows() -> list[list[str]]:
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    section = text[text.index(SECTION):].split("\n## ", 1)[0]
    rows = [[cell.strip() for cell in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("|")]
    assert rows[0][:2] == ["model", "node and setting"], rows[0]
    return rows[2:]


def cache_nodes(template: str, node_id: str) -> list[dict]:
    workflow = json.loads((TEMPLATES / f"{template}.json").read_text())
    return [node for node in workflow["nodes"] if node["type"] == node_id]


def fewer_sampler_steps(template: str) -> set[int]:
    """The step counts of the template's fewer-steps branch (its KSampler titled "... (fewer steps)")."""
    workflow = json.loads((TEMPLATES / f"{template}.json").read_text())
    return {node["widgets_values"][2] for node in workflow["nodes"]
            if node["type"] == "KSampler" and "(fewer steps)" in node.get("title", "")}


def cached_sampler_steps(template: str) -> set[int]:
    """The step counts of the samplers the cache node's MODEL reaches (the template's cached branch)."""
    workflow = json.loads((TEMPLATES / f"{template}.json").read_text())
    by_id = {node["id"]: node for node in workflow["nodes"]}
    todo = [n["id"] for n in workflow["nodes"] if n["type"] in NODE_IDS.values()]
    reached: set[int] = set()
    while todo:   # through whatever sits between the cache node and its sampler (a ModelSampling node)
        source = todo.pop()
        for link in workflow["links"]:
            if link[1] == source and link[3] not in reached:
                reached.add(link[3])
                if by_id[link[3]]["type"] != "KSampler":
                    todo.append(link[3])
    return {by_id[i]["widgets_values"][2] for i in reached if by_id[i]["type"] == "KSampler"}


@pytest.fixture(scope="module")
def dbcache_defaults(comfy_root) -> dict[str, object]:
    """The DBCache node's widgets in their saved order, with the defaults the real schema gives them."""
    (info,) = [i for i in pack_node_infos(comfy_root) if i["name"] == "CacheDiTDBCache"]
    return {name: options.get("default") for name, (kind, options, *_) in info["input"]["required"].items()
            if name != "model"}


def test_the_first_screen_names_a_node_a_setting_and_a_template_per_row():
    for model, setting, calls, evidence in first_screen_rows():
        assert re.search(r"\*\*(Cache-DiT Forecast|Cache-DiT DBCache)\*\*", setting), (model, setting)
        assert "template" in setting, f"{model}: no template runs {setting!r}"
        assert evidence, f"{model}: whose evidence?"


@pytest.mark.parametrize("row", first_screen_rows(), ids=lambda row: row[0])
def test_each_recommended_setting_runs_in_its_template(row, dbcache_defaults):
    model, setting, calls, _ = row
    node_name = re.search(r"\*\*(Cache-DiT Forecast|Cache-DiT DBCache)\*\*", setting).group(1)
    node_id = NODE_IDS[node_name]
    templates = re.findall(r"template `(\w+)`", setting)
    if "each model's `*_compare` template" in setting:
        named = {t for other in first_screen_rows() for t in re.findall(r"template `(\w+)`", other[1])}
        templates = [p.stem for p in sorted(TEMPLATES.glob("*_compare.json"))
                     if p.stem not in named and cache_nodes(p.stem, node_id)]
    assert templates, f"{model}: no template named"
    preset = re.search(r"preset `(\w+)`", setting)
    masked = re.search(r"mask `(\w+)` \+ calibrator `(\w+)`", setting)
    named = {"steps_mask": masked.group(1), "calibrator": masked.group(2)} if masked else {}
    for template in templates:
        assert (TEMPLATES / f"{template}.json").is_file(), f"{model}: no template {template}"
        nodes = cache_nodes(template, node_id)
        assert nodes, f"{template} has no {node_name} node"
        for node in nodes:
            values = node["widgets_values"]
            if preset:
                assert values[0] == preset.group(1), f"{template}: preset {values[0]!r}, the README says {preset.group(1)}"
            else:
                assert masked or "its defaults" in setting, f"{model}: no preset, mask or defaults: {setting!r}"
                expected = dbcache_defaults | named
                differ = [name for name, value in zip(expected, values)
                          if value != expected[name] and DEVIATIONS.get(template) != name]
                assert not differ, f"{template}: {differ} are not the row's setting (the rest: the node's defaults)"
    counted = re.fullmatch(r"(\d+) of (\d+): as many as (\d+) plain steps", calls)
    if preset:
        assert counted, f"{model}: a preset computes a known number of calls; the row says {calls!r}"
        computed, steps, as_many = map(int, counted.groups())
        plan = plan_forecast_run(ForecastSettings.from_preset(preset.group(1)), steps)
        assert computed == as_many == sum(plan.mask), f"{model}: {preset.group(1)} computes {sum(plan.mask)} of {steps}"
        for template in templates:
            assert cached_sampler_steps(template) == {steps}, f"{template}: the cached branch runs other step counts"
    elif masked:
        assert counted, f"{model}: a step mask computes a known number of calls; the row says {calls!r}"
        computed, steps, as_many = map(int, counted.groups())
        for template in templates:
            widgets = dict(zip(dbcache_defaults, cache_nodes(template, node_id)[0]["widgets_values"]))
            plan = plan_run(DBCacheSettings(**widgets), steps, sum(FAMILY_TEMPLATES[f"{template}.json"].blocks), "x")
            equal_cost, exact = fewer_steps(widgets, steps, FAMILY_TEMPLATES[f"{template}.json"].blocks)
            assert exact and computed == sum(plan.mask), f"{model}: {named} computes {sum(plan.mask)} of {steps}"
            assert as_many == equal_cost, f"{model}: {named} at {steps} steps costs as much as {equal_cost} steps"
            assert cached_sampler_steps(template) == {steps}, f"{template}: the cached branch runs other step counts"
            assert fewer_sampler_steps(template) == {as_many}, f"{template}: its fewer-steps branch runs other steps"
    else:
        assert "decided per run" in calls, f"{model}: a threshold decides per run, not {calls!r}"
