"""What the editor shows on the pack's nodes besides their widgets: tooltips a user reads, labels, the
"advanced" toggle and the deprecated node.

Every tooltip of every node (each input, those the forecast node's ``custom`` preset shows included, and each
output) is one or two plain sentences of at most ``LIMIT`` characters, in English (the schema, read through
the real ComfyUI as ``/object_info`` serves it) and in Chinese (locales/zh/nodeDefs.json): the figures behind
a setting are on the node's help page (its evidence section), not in the tooltip.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node_schemas import outputs, pack_node_infos, translatable_inputs

REPO = Path(__file__).resolve().parents[2]
ZH_NODE_DEFS = REPO / "locales" / "zh" / "nodeDefs.json"
LIMIT = 250
# Rarely changed DBCache inputs, behind the editor's "advanced" toggle (a saved workflow keeps their values).
ADVANCED = {"Bn_compute_blocks", "warmup_interval", "max_cached_steps", "max_continuous_cached_steps",
            "taylorseer_order", "dmd_history"}


@pytest.fixture(scope="module")
def node_infos(comfy_root) -> list[dict]:
    return pack_node_infos(comfy_root)


def english_tooltips(infos: list[dict]) -> dict[str, str]:
    found = {}
    for info in infos:
        for item in translatable_inputs(info):
            found[f"{info['name']}.inputs.{item.key}"] = item.tooltip
        for index, (name, tooltip) in enumerate(outputs(info)):
            found[f"{info['name']}.outputs.{index} ({name})"] = tooltip
    return found


def zh_tooltips() -> dict[str, str]:
    node_defs = json.loads(ZH_NODE_DEFS.read_text(encoding="utf-8"))
    return {f"{node}.{part}.{key}": entry.get("tooltip")
            for node, defs in node_defs.items() for part in ("inputs", "outputs")
            for key, entry in defs.get(part, {}).items()}


def too_long(tooltips: dict[str, str | None]) -> dict[str, str]:
    return {where: f"{len(text)} characters: {text[:80]}..." for where, text in tooltips.items()
            if text and (len(text) > LIMIT or "\n" in text)}


def test_every_english_tooltip_is_short(node_infos):
    tooltips = english_tooltips(node_infos)
    assert len(tooltips) >= 40 and all(tooltips.values()), tooltips   # every input and output, custom ones too
    assert not too_long(tooltips), f"tooltips over {LIMIT} characters or over one line:\n" + "\n".join(
        f"{where}: {why}" for where, why in too_long(tooltips).items())


def test_every_zh_tooltip_is_short():
    tooltips = zh_tooltips()
    assert len(tooltips) >= 40, tooltips
    assert not too_long(tooltips), f"zh tooltips over {LIMIT} characters or over one line:\n" + "\n".join(
        f"{where}: {why}" for where, why in too_long(tooltips).items())


def test_the_rarely_changed_dbcache_inputs_are_advanced_and_labelled(node_infos):
    for info in node_infos:
        advanced = {item.name for item in translatable_inputs(info) if item.advanced}
        expected = ADVANCED if info["name"] in ("Krea2CacheDiT", "CacheDiTDBCache") else set()
        assert advanced == expected, info["name"]
    (dbcache,) = [info for info in node_infos if info["name"] == "CacheDiTDBCache"]
    labels = {item.name: item.label for item in translatable_inputs(dbcache)}
    assert labels["steps_mask"] == "step mask" and labels["Fn_compute_blocks"] == "first blocks always computed"


def test_krea2_cachedit_is_deprecated_for_the_dbcache_node_with_the_same_inputs(node_infos):
    by_name = {info["name"]: info for info in node_infos}
    old, new = by_name["Krea2CacheDiT"], by_name["CacheDiTDBCache"]
    assert [info["name"] for info in node_infos if info.get("deprecated")] == ["Krea2CacheDiT"]
    assert new["display_name"] in old["description"] and old["input_order"] == new["input_order"]
    zh = json.loads(ZH_NODE_DEFS.read_text(encoding="utf-8"))
    assert zh["CacheDiTDBCache"]["display_name"] in zh["Krea2CacheDiT"]["description"]


def test_the_preset_tooltip_says_where_the_fixed_presets_hold(node_infos):
    """The editor shows one tooltip for all presets: it names the step count each kind's figures hold at (their
    standings') and sends every other count to auto, in both languages."""
    from krea2_cachedit.adapters.figures import preset_measured_steps

    turbo, raw = preset_measured_steps("turbo_5_of_8"), preset_measured_steps("raw_1_in_4")
    english = english_tooltips(node_infos)["CacheDiTSpectrum.inputs.preset"]
    assert f"turbo_* are measured at {turbo} steps, raw_* at {raw}: at other counts use auto" in english, english
    zh = zh_tooltips()["CacheDiTSpectrum.inputs.preset"]
    assert f"turbo_* 在 {turbo} 步测量，raw_* 在 {raw} 步测量：其他步数请用 auto" in zh, zh
