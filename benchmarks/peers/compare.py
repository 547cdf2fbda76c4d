"""Quality at equal speed: at each setting of one method, the best of another at least as fast.

Per regime, each peer setting that skips steps is met by the node setting with the lowest MAE among
those at least as fast (within 5%), and each node method by the defaults' own curve; speed is the
measured wall clock, or the projected speedup on Krea-2. Beside it, what one more cached or skipped
step saves, fitted over each method's settings.
"""

from __future__ import annotations

import statistics

from .cases import CACHING_OFF, FREE_THRESHOLD, MASKS, PEERS, THRESHOLD, UNCACHED, is_node

EQUAL_SPEED = 0.05  # wall-clock speedups within 5% count as equal


def best_at_least_as_fast(rows: list[dict], wall: float, key: str = "wall") -> dict | None:
    """The row with the lowest MAE among those whose speedup (``key``: measured ``wall`` or ``projected``)
    is at least ``wall`` (within ``EQUAL_SPEED``)."""
    rivals = [r for r in rows if r[key] >= wall * (1 - EQUAL_SPEED)]
    return min(rivals, key=lambda r: r["mae_255"]) if rivals else None


def compare(challengers: list[dict], field: list[dict], key: str = "wall") -> list[dict]:
    """At each challenger setting, the best of ``field`` at least as fast: who has the lower MAE."""
    verdicts = []
    for challenger in challengers:
        best = best_at_least_as_fast(field, challenger[key], key)
        verdicts.append({
            "regime": challenger["regime"], "challenger": challenger["case"], "challenger_wall": challenger[key],
            "challenger_mae_255": challenger["mae_255"], "best": best and best["case"],
            "best_wall": best and best[key], "best_mae_255": best and best["mae_255"],
            "winner": ("unmatched" if best is None else "challenger" if challenger["mae_255"] < best["mae_255"] else
                       "tie" if challenger["mae_255"] == best["mae_255"] else "best")})
    return verdicts


def head_to_head(rows: list[dict], key: str = "wall") -> dict:
    """Per regime: each peer setting that skips something against the node's best at least as fast, and
    each node method other than the defaults' own curve against that curve; speed is ``key``."""
    result = {"basis": key, "peers_vs_node": [], "node_methods_vs_defaults": []}
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        node = [r for r in of_regime if is_node(r)]
        peers = [r for r in of_regime if r["method"] in PEERS and max(r["skipped"]) > 0]
        result["peers_vs_node"] += compare(peers, node, key)
        defaults_curve = [r for r in node if r["method"] == THRESHOLD]
        others = [r for r in node if r["method"] != THRESHOLD and r["ideal"] > 1.0]
        result["node_methods_vs_defaults"] += compare(others, defaults_curve, key)
    result["step_costs"] = step_costs(rows)
    return result


# The node's settings without a calibrator: their seconds against their cached steps are one line.
PLAIN_NODE = (CACHING_OFF, THRESHOLD, FREE_THRESHOLD, MASKS)


def step_costs(rows: list[dict]) -> list[dict]:
    """Per regime, for the node's plain settings and for each peer: a least-squares line through the
    (cached or skipped steps, seconds) of its rows. Its slope is what one more cached step saves; set
    against an uncached step's share of the uncached run, it says what a cached step still costs."""
    costs = []
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        (uncached,) = [r for r in of_regime if r["method"] == UNCACHED]
        for who, methods in (("Cache-DiT", PLAIN_NODE), *((peer, (peer,)) for peer in PEERS)):
            points = [(statistics.mean(r["skipped"]), r["seconds"]) for r in of_regime if r["method"] in methods]
            if len({x for x, _ in points}) < 2:
                continue
            slope, intercept = statistics.linear_regression(*zip(*points))
            costs.append({"regime": regime, "method": who, "settings": len(points), "seconds_at_none": intercept,
                          "saved_per_step_s": -slope, "uncached_per_step_s": uncached["seconds"] / uncached["steps"]})
    return costs


def tally(verdicts: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Verdicts grouped by regime and the challenger's method (its case name without regime and setting)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for v in verdicts:
        method = v["challenger"].removeprefix(f"{v['regime']} ").rsplit(" ", 1)[0]
        groups.setdefault((v["regime"], method), []).append(v)
    return groups


def verdict_lines(comparisons: dict) -> list[str]:
    """What ``head_to_head`` found, one line per peer setting, then a tally per regime and method."""
    lines = []
    for v in comparisons["peers_vs_node"]:
        if v["best"] is None:
            lines.append(f"{v['challenger']}: {v['challenger_wall']:.2f}x, MAE {v['challenger_mae_255']:.2f}; no node "
                         f"setting is as fast")
            continue
        who = {"best": "node wins", "challenger": "peer wins", "tie": "tie"}[v["winner"]]
        lines.append(f"{v['challenger']}: {v['challenger_wall']:.2f}x, MAE {v['challenger_mae_255']:.2f} | best node "
                     f"at least as fast: {v['best']} {v['best_wall']:.2f}x, MAE {v['best_mae_255']:.2f} -> {who}")
    lines.append("")
    for key, challenger_side, field_side in (("peers_vs_node", "the peer", "the node"),
                                             ("node_methods_vs_defaults", "the method", "the defaults' curve")):
        for (regime, method), verdicts in tally(comparisons[key]).items():
            counts = {w: sum(v["winner"] == w for v in verdicts) for w in ("challenger", "best", "tie", "unmatched")}
            lines.append(f"{regime} {method}: {field_side} lower at {counts['best']}, {challenger_side} lower at "
                         f"{counts['challenger']}, tie {counts['tie']}, nothing as fast at {counts['unmatched']} "
                         f"of {len(verdicts)} settings")
    lines.append("")
    # Step costs fit measured seconds whatever the basis: printed once, with the measured comparison.
    if comparisons["basis"] != "wall":
        return lines
    for c in comparisons["step_costs"]:
        lines.append(f"{c['regime']} {c['method']}: one more cached step saves {c['saved_per_step_s'] * 1000:.1f} ms "
                     f"(an uncached run takes {c['uncached_per_step_s'] * 1000:.1f} ms per step; fit over "
                     f"{c['settings']} settings, {c['seconds_at_none']:.3f} s at none cached)")
    return lines
