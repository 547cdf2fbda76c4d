"""Quality at equal speed: at each setting of one method, the best of another at least as fast.

Per regime, each peer setting that skips steps is met by the node setting with the lowest MAE among
those at least as fast (within 5%), and each node method by the defaults' own curve; speed is the
measured wall clock, or the projected speedup on Krea-2. Every node and peer setting that skips work
is also set against fewer steps at its speed: plain euler's curve between its step counts, and the
best multistep sampler at the nearest count as fast. Beside it, what one more cached or skipped step
saves, fitted over each method's settings.
"""

from __future__ import annotations

import statistics

from .cases import (CACHING_OFF, FEWER_STEPS, FREE_THRESHOLD, MASKS, PEERS, THRESHOLD, UNCACHED, is_multistep, is_node,
                    is_node_default)

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
    result["vs_fewer_steps"] = vs_fewer_steps(rows, key)
    result["step_costs"] = step_costs(rows)
    return result


def euler_curve(of_regime: list[dict], key: str) -> list[tuple[float, float, str]]:
    """Plain euler's (speedup, MAE/255, case), slowest first: the uncached run (euler at the regime's full
    steps, MAE 0) and the fewer-steps rows."""
    return sorted((r[key], r["mae_255"], r["case"]) for r in of_regime if r["method"] in (UNCACHED, FEWER_STEPS))


def along(curve: list[tuple[float, float, str]], speed: float) -> tuple[float | None, list[str]]:
    """The curve's MAE at ``speed``, linear in speedup between the two points around it (their cases
    beside); at or below its slowest point that point's (the full steps are as fast); None beyond its
    fastest (no fewer-steps row measured that fast)."""
    if speed <= curve[0][0]:
        return curve[0][1], [curve[0][2]]
    for (x0, y0, slower), (x1, y1, faster) in zip(curve, curve[1:]):
        if x0 <= speed <= x1:
            share = (speed - x0) / (x1 - x0) if x1 > x0 else 0.0
            return y0 + share * (y1 - y0), [slower, faster]
    return None, []


def nearest_multistep(of_regime: list[dict], speed: float, key: str) -> dict | None:
    """Among the multistep samplers' rows at least as fast as ``speed`` (within ``EQUAL_SPEED``), the one
    with the lowest MAE at the most steps: the nearest equal-or-faster call count."""
    fast = [r for r in of_regime if is_multistep(r) and r[key] >= speed * (1 - EQUAL_SPEED)]
    if not fast:
        return None
    most = max(r["steps"] for r in fast)
    return min((r for r in fast if r["steps"] == most), key=lambda r: r["mae_255"])


def computed_calls(row: dict) -> float:
    """Model calls that ran the whole model: the node's cached or forecast calls and a peer's skipped
    steps left out (mean over the images). A node's call counts as cached when every block list skipped
    it (its record's skipped steps): on Flux's two lists a call that one list skipped still ran the other's
    blocks, though ``cached_calls`` counts it; on one list the two counts are the same."""
    return row["calls"] - statistics.mean(row["skipped"])


def against_fewer_steps(row: dict, curve: list, of_regime: list[dict], key: str) -> dict:
    """One row against fewer steps at its speed (``key``): euler's MAE there, the nearest multistep sampler."""
    euler_mae, between = along(curve, row[key])
    multistep = nearest_multistep(of_regime, row[key], key)
    return {"regime": row["regime"], "case": row["case"], "side": "node" if is_node(row) else "peer",
            "defaults": is_node_default(row), "speed": row[key], "calls": computed_calls(row), "steps": row["steps"],
            "mae_255": row["mae_255"], "euler_mae_255": euler_mae, "euler_between": between,
            "beats_euler": None if euler_mae is None else row["mae_255"] < euler_mae,
            "multistep": multistep and multistep["case"], "multistep_steps": multistep and multistep["steps"],
            "multistep_speed": multistep and multistep[key], "multistep_mae_255": multistep and multistep["mae_255"],
            "beats_multistep": None if multistep is None else row["mae_255"] < multistep["mae_255"]}


def skips_work(row: dict) -> bool:
    """A node setting that caches or forecasts something, or a peer setting that skips a step."""
    return (is_node(row) and row["ideal"] > 1.0) or (row["method"] in PEERS and max(row["skipped"]) > 0)


def vs_fewer_steps(rows: list[dict], key: str = "wall") -> dict:
    """Per regime with fewer-steps rows: every node and peer setting that skips work against fewer steps at
    its speed (``key``), and how many of each side are closer to the uncached image than euler there."""
    entries, summary = [], {}
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        curve = euler_curve(of_regime, key)
        if len(curve) < 2:   # a table without fewer-steps rows: nothing to set against
            continue
        made = [against_fewer_steps(r, curve, of_regime, key) for r in of_regime if skips_work(r)]
        entries += made
        summary[regime] = {f"{side}_{what}": count for side in ("node", "peer")
                           for what, count in fewer_steps_counts([e for e in made if e["side"] == side]).items()}
    return {"rows": entries, "summary": summary}


def fewer_steps_counts(entries: list[dict]) -> dict[str, int]:
    return {"settings": len(entries), "beat_euler": sum(e["beats_euler"] is True for e in entries),
            "faster_than_euler": sum(e["beats_euler"] is None for e in entries),
            "beat_multistep": sum(e["beats_multistep"] is True for e in entries),
            "with_multistep": sum(e["beats_multistep"] is not None for e in entries)}


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


def _yes_no(beats: bool | None) -> str:
    return "-" if beats is None else "yes" if beats else "no"


def fewer_steps_lines(comparisons: dict) -> list[str]:
    """What ``vs_fewer_steps`` found: a Markdown table, one line per setting, then a count per regime."""
    found, basis = comparisons["vs_fewer_steps"], "measured" if comparisons["basis"] == "wall" else "projected"
    if not found["rows"]:
        return []
    lines = ["| setting | calls computed | speedup | MAE/255 | euler at that speedup (between) | lower than euler "
             "| best multistep as fast (nearest count) | its MAE/255 | lower than it |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in found["rows"]:
        strip = lambda case: case.removeprefix(f"{e['regime']} ").removeprefix("fewer steps, ")  # noqa: E731
        euler = ("faster than every fewer-steps row" if e["euler_mae_255"] is None else
                 f"{e['euler_mae_255']:.2f} ({' to '.join(strip(c) for c in e['euler_between'])})")
        multistep = ("none as fast" if e["multistep"] is None else
                     f"{strip(e['multistep'])} ({e['multistep_speed']:.2f}x) | {e['multistep_mae_255']:.2f}")
        lines.append(f"| {e['case']}{' (defaults)' if e['defaults'] else ''} | {e['calls']:.3g} of {e['steps']} | "
                     f"{e['speed']:.2f}x | {e['mae_255']:.2f} | {euler} | {_yes_no(e['beats_euler'])} | {multistep}"
                     f"{' | -' if e['multistep'] is None else ''} | {_yes_no(e['beats_multistep'])} |")
    lines.append("")
    for regime, s in found["summary"].items():
        for side, who in (("node", "node settings"), ("peer", "peer settings")):
            lines.append(f"{regime} ({basis}): {s[f'{side}_beat_euler']} of {s[f'{side}_settings']} {who} that skip "
                         f"work lower than euler at their speed ({s[f'{side}_faster_than_euler']} faster than every "
                         f"fewer-steps row), {s[f'{side}_beat_multistep']} of {s[f'{side}_with_multistep']} lower "
                         f"than the best multistep sampler as fast")
    return lines
