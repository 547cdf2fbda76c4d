"""What the cache nodes' help pages say of each mask against fewer steps (adapters/dbcache/mask_standing.py) is
the committed peer table (benchmarks/results/peers.json): every mask at both step counts, its calls as
cache-dit's mask computes them, its best calibrator and image, and plain euler at as many steps. The figures
live in the pages' evidence sections; the step-mask tooltip says what the mask names mean and quotes none."""

from __future__ import annotations

import json

from cache_dit import steps_mask
from devkit.comfy_harness import REPO_ROOT
from node_schemas import pack_node_infos, translatable_inputs

from krea2_cachedit.adapters.dbcache.mask_standing import (MASK_STANDINGS, MaskStanding, mask_standing_text,
                                                         mask_standing_zh_text)
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


CACHE_NODES = ("Krea2CacheDiT", "CacheDiTDBCache")
DOCS = REPO_ROOT / "web" / "docs"


def flat(text: str) -> str:
    return " ".join(text.split())


def evidence(page: str, heading: str) -> str:
    """The page's evidence section, up to the next heading of its level."""
    text = page.split(f"\n{heading}\n", 1)[1]
    return text.split("\n## ", 1)[0]


def test_both_cache_nodes_pages_show_it_in_their_evidence():
    text, zh = mask_standing_text(), mask_standing_zh_text()
    assert all(s.text() in text for s in MASK_STANDINGS) and all(s.zh_text() in zh for s in MASK_STANDINGS)
    for node in CACHE_NODES:
        assert flat(text) in flat(evidence((DOCS / f"{node}.md").read_text(encoding="utf-8"), "## Evidence")), node
        assert flat(zh) in flat(evidence((DOCS / node / "zh.md").read_text(encoding="utf-8"), "## 依据")), node


def test_the_mask_tooltips_say_what_the_names_mean_without_figures(comfy_root):
    tooltips = {info["name"]: item.tooltip for info in pack_node_infos(comfy_root)
                for item in translatable_inputs(info) if item.key == "steps_mask"}
    assert set(tooltips) == set(CACHE_NODES)
    node_defs = json.loads((REPO_ROOT / "locales" / "zh" / "nodeDefs.json").read_text(encoding="utf-8"))
    for node, tooltip in tooltips.items():
        zh = node_defs[node]["inputs"]["steps_mask"]["tooltip"]
        assert "not sampler speed" in tooltip and "不是采样速度" in zh, node
        assert not [s for s in MASK_STANDINGS if f"{s.mae_255:.2f}" in tooltip + zh], (node, tooltip, zh)
