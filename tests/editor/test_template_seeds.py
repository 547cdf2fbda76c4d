"""Every template's seed stays fixed: the compare templates' notes tell the user to change the cache's
settings and run again, which re-samples only the cached branch when nothing else changed; a seed the
editor randomizes after each run would re-sample all three branches (and a single-graph template
would compare two settings on two seeds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEMPLATES = sorted((REPO / "example_workflows").glob("*.json"))
# The values of the editor's "control after generate" widget, stored after the seed's own value.
CONTROL_VALUES = {"fixed", "increment", "decrement", "randomize"}


def seed_controls(workflow: dict) -> dict[str, str]:
    """{node: its control-after-generate value} for every node that stores one."""
    return {f"{node['id']} {node.get('title') or node['type']}": value
            for node in workflow["nodes"] if isinstance(node.get("widgets_values"), list)
            for value in node["widgets_values"] if isinstance(value, str) and value in CONTROL_VALUES}


def notes(workflow: dict) -> str:
    return " ".join(node["widgets_values"][0] for node in workflow["nodes"] if node["type"] == "MarkdownNote")


@pytest.mark.parametrize("path", TEMPLATES, ids=lambda path: path.stem)
def test_every_seed_is_fixed(path):
    controls = seed_controls(json.loads(path.read_text()))
    assert controls, f"{path.name}: no seed control found (the template has a seed)"
    assert set(controls.values()) == {"fixed"}, f"{path.name}: {controls}"


@pytest.mark.parametrize("path", [p for p in TEMPLATES if p.stem.endswith("_compare")], ids=lambda path: path.stem)
def test_a_compare_notes_promise_of_one_resampled_branch_holds(path):
    workflow = json.loads(path.read_text())
    assert "only the cached branch samples again" in notes(workflow)
    seeds = [node for node in workflow["nodes"] if node.get("title") == "Seed"]
    assert len(seeds) == 1 and seeds[0]["widgets_values"][1] == "fixed", path.name
    seed_links = set(seeds[0]["outputs"][0]["links"])
    samplers = [node for node in workflow["nodes"] if node["type"].startswith("KSampler")]
    for sampler in samplers:   # every branch takes the one fixed seed (Wan 2.2's low-noise passes add none)
        seed_input = next((inp for inp in sampler["inputs"] if inp["name"] in ("seed", "noise_seed")), None)
        assert seed_input is None or seed_input.get("link") in seed_links, f"{path.name}: {sampler['title']}"
