"""What the step-mask tooltip says of each mask against fewer steps (adapters/dbcache/mask_standing.py) is
the committed peer table (benchmarks/results/peers.json): every mask at both step counts, its calls as
cache-dit's mask computes them, its best calibrator and image, and plain euler at as many steps."""

from __future__ import annotations

import json

from cache_dit import steps_mask
from devkit.comfy_harness import REPO_ROOT
from node_schemas import pack_node_infos, translatable_inputs

from krea2_cachedit.adapters.dbcache.mask_standing import MASK_STANDINGS, MaskStanding, mask_standing_text
from krea2_cachedit.adapters.dbcache.settings import STEP_MASKS

PEERS = REPO_ROOT / "benchmarks" / "results" / "peers.json"
REGIME_STEPS = {"turbo": 8, "raw": 52}
MASKS = "Cache-DiT step masks"


def measured_standings() -> dict[tuple[str, int], MaskStanding]:
    rows = json.loads(PEERS.read_text())["rows"]
    euler = {(r["regime"], r["steps"]): r["mae_255"] for r in rows if r["method"] == "fewer steps, euler"}
    found: dict[tuple[str, int], MaskStanding] = {}
    for r in rows:
        if r["method"] != MASKS and not r["method"].startswith(MASKS + " + "):
            continue
        steps = REGIME_STEPS[r["regime"]]
        calls = sum(steps_mask(mask_policy=r["setting"], total_steps=steps))
        calibrator = r["method"].removeprefix(MASKS).removeprefix(" + ") or "none"
        standing = MaskStanding(r["setting"], steps, calls, calibrator, round(r["mae_255"], 2),
                                round(euler[(r["regime"], calls)], 2))
        best = found.get((standing.mask, steps))
        if best is None or standing.mae_255 < best.mae_255:
            found[(standing.mask, steps)] = standing
    return found


def test_every_mask_is_set_against_fewer_steps_at_both_step_counts():
    masks = {(s.mask, s.steps) for s in MASK_STANDINGS}
    assert masks == {(m, n) for m in STEP_MASKS if m != "none" for n in REGIME_STEPS.values()}
    assert len(masks) == len(MASK_STANDINGS)


def test_the_figures_are_the_peer_tables():
    measured = measured_standings()
    assert {(s.mask, s.steps): s for s in MASK_STANDINGS} == measured


def test_both_cache_nodes_show_it_under_the_mask_choice(comfy_root):
    text = mask_standing_text()
    assert all(s.text() in text for s in MASK_STANDINGS)
    tooltips = {info["name"]: item.tooltip for info in pack_node_infos(comfy_root)
                for item in translatable_inputs(info) if item.key == "steps_mask"}
    assert set(tooltips) == {"Krea2CacheDiT", "CacheDiTDBCache"}
    for node, tooltip in tooltips.items():
        first, *standing = tooltip.splitlines()
        assert "slow < medium < fast < ultra" in first and "\n".join(standing) == text, node


def test_the_zh_tooltip_carries_the_same_figures():
    node_defs = json.loads((REPO_ROOT / "locales" / "zh" / "nodeDefs.json").read_text(encoding="utf-8"))
    for node in ("Krea2CacheDiT", "CacheDiTDBCache"):
        tooltip = node_defs[node]["inputs"]["steps_mask"]["tooltip"]
        missing = [s.zh_text() for s in MASK_STANDINGS if s.zh_text() not in tooltip]
        assert not missing, (node, missing)
