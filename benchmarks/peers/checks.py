"""The peer benchmark's targets, as ``check:`` lines: the node's own cost, what caching returns, the race;
and, report only, the node's defaults and forecast presets against fewer steps at as many model calls.

Each margin is judged by the median of per-repeat ratios and its 95% confidence interval
(``spread.median_interval``), since one repeat on a CPU varies by more than a 1% margin.
"""

from __future__ import annotations

from .cases import (CACHING_OFF, CACHING_OFF_FULL_TEXT, FORECAST_AUTO, FORECAST_PRESETS, PEERS, SPECTRUM_PUBLISHED,
                    UNCACHED, is_forecast, is_node, is_node_default)
from .compare import EQUAL_SPEED, against_fewer_steps, best_at_least_as_fast, euler_curve
from benchmarks.spread import (CONFIDENCE, Spread, at_least, caching_efficiency, interval_at_least, median_interval,
                               paired_ratios, show)

# Targets, checked on every full run: what the node's own machinery may cost and what a caching row
# must return of the blocks it skips.
NODE_COST_CEILING = 0.01        # caching off, text path on every call, against no node
CACHING_EFFICIENCY_FLOOR = 0.90  # a caching row's speedup over caching off, as a share of its ideal
# Whole-call forecasting's targets: per Turbo preset, the MAE/255 it must stay under and beat every DBCache
# and peer setting at least as fast with; on Raw, some forecast setting at this projected speedup and MAE.
# Krea-2's targets: checked only where the run has that regime (a Flux run is held to none of them).
FORECAST_TARGETS = {"turbo": (("turbo_5_of_8", 1.5), ("turbo_4_of_8", 3.0))}
RAW_FORECAST_TARGET = ("raw", 4.0, 1.5)


def target_checks(rows: list[dict], comparisons: list[dict], own_cost: dict | None = None) -> list[str]:
    """``check:`` lines: the node's own cost and each caching row's share of its ideal, per regime, then
    the race against the peers on each basis (measured wall clock, projected). The own cost comes from
    ``measure_own_cost``'s pairs where the run has them (``own_cost``), else from the rows' repeats."""
    lines = []
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        paired = (own_cost or {}).get(regime)
        if paired:
            lines += own_cost_check(regime, paired)
        else:  # a run without the interleaved repeats: the table's own repeats, by their spread
            lines += [table_own_cost_check(regime, r) for r in of_regime if r["method"] == CACHING_OFF_FULL_TEXT]
        off = next(r for r in of_regime if r["method"] == CACHING_OFF)
        for row in of_regime:
            if is_node(row) and row["ideal"] > 1.0:
                # Against caching off, repeat by repeat: the same node, text-path reuse and per-call
                # cost, so the share says what caching returns of the blocks it skips.
                lines.append(efficiency_check(row, off))
    for result in comparisons:
        lines += race_checks(rows, result)
    return lines + forecast_checks(rows) + fewer_steps_checks(rows)


# Equal model calls: the rows' model calls without / with (the uncached run's over a row's computed ones).
EQUAL_CALLS = "step_ideal"


def fewer_steps_checks(rows: list[dict]) -> list[str]:
    """Per regime with fewer-steps rows, report only (no target): the node's defaults, each forecast preset
    and ``auto`` against euler at as many computed model calls (its curve between its step counts), the best
    multistep sampler at the nearest count with as few calls beside."""
    lines = []
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        curve = euler_curve(of_regime, EQUAL_CALLS)
        if len(curve) < 2:
            continue
        lines += [fewer_steps_check(against_fewer_steps(r, curve, of_regime, EQUAL_CALLS)) for r in of_regime
                  if is_node_default(r) or r["method"] in (FORECAST_PRESETS, SPECTRUM_PUBLISHED, FORECAST_AUTO)]
    return lines


def fewer_steps_check(found: dict) -> str:
    name = found["case"].removeprefix(f"{found['regime']} ") + (" (defaults)" if found["defaults"] else "")
    if found["euler_mae_255"] is None:
        euler, verdict = "no euler row with as few calls", "undecided"
    else:
        euler = f"euler at as many calls {found['euler_mae_255']:.2f}/255"
        verdict = "the node lower" if found["beats_euler"] else "fewer steps as low or lower"
    multistep = ("" if found["multistep"] is None else
                 f"; best multistep at the nearest count with as few calls: "
                 f"{found['multistep'].removeprefix(found['regime'] + ' fewer steps, ')} at "
                 f"{found['multistep_mae_255']:.2f}/255")
    return (f"check: {found['regime']} (equal calls): {name}: {found['calls']:.3g} of {found['steps']} calls computed, "
            f"MAE {found['mae_255']:.2f}/255 against {euler}{multistep} (report only: {verdict})")


def forecast_checks(rows: list[dict]) -> list[str]:
    """The forecasting targets on each speed basis the rows have (projected on Krea-2, measured here)."""
    lines = []
    bases = [key for key in ("projected", "wall") if rows and all(key in r for r in rows)]
    for regime, targets in FORECAST_TARGETS.items():
        of_regime = [r for r in rows if r["regime"] == regime]
        rivals = [r for r in of_regime if ((is_node(r) and not is_forecast(r)) or r["method"] in PEERS)
                  and r["ideal"] > 1.0]
        for preset, ceiling in targets:
            row = next((r for r in of_regime if r["method"] == FORECAST_PRESETS and r["setting"] == preset), None)
            if row is None:
                continue
            for key in bases:
                best = best_at_least_as_fast(rivals, row[key], key)
                beaten = best is None or row["mae_255"] < best["mae_255"]
                rival = f"{best['case']} {best['mae_255']:.2f}" if best else "none as fast"
                ok = row["mae_255"] <= ceiling and beaten
                lines.append(f"check: {regime} ({_basis(key)}): {preset} MAE {row['mae_255']:.2f}/255 at {row[key]:.2f}x "
                             f"(at most {ceiling:g}, below every DBCache and peer setting at least as fast: "
                             f"{rival}) ({'ok' if ok else 'MISSED'})")
    regime, speedup, ceiling = RAW_FORECAST_TARGET
    if not any(r["regime"] == regime for r in rows):
        return lines
    forecasts = [r for r in rows if r["regime"] == regime and is_forecast(r)]
    for key in bases:
        fast = [r for r in forecasts if r[key] >= speedup]
        best = min(fast, key=lambda r: r["mae_255"]) if fast else None
        found = f"{best['case']} MAE {best['mae_255']:.2f}/255 at {best[key]:.2f}x" if best else "no forecast row"
        ok = best is not None and best["mae_255"] <= ceiling
        lines.append(f"check: {regime} ({_basis(key)}): a forecast setting at {speedup:g}x or more with MAE at most "
                     f"{ceiling:g}/255: {found} ({'ok' if ok else 'MISSED'})")
    return lines


def _basis(key: str) -> str:
    return "measured" if key == "wall" else "projected"


def own_cost_interval(times: dict, method: str) -> Spread:
    """Wall speedup of ``method`` over no node (below 1: it costs), median of the per-repeat ratios, with
    its confidence interval."""
    return median_interval(paired_ratios(times[UNCACHED], times[method]))


def own_cost_check(regime: str, measured: dict) -> list[str]:
    """The node's own cost from the interleaved pairs, with a confidence interval that decides the margin;
    the node caching nothing with its text-path reuse beside it (what a user pays with caching off)."""
    full, off = (own_cost_interval(measured["times"], m) for m in (CACHING_OFF_FULL_TEXT, CACHING_OFF))
    verdict = interval_at_least(full, 1 - NODE_COST_CEILING)
    if verdict == "BELOW":  # checked on the wall speedup (at least 0.99x): said of the cost, over 1%
        verdict = "OVER"
    return [f"check: {regime}: the node's own cost (caching off, text path every call) {_cost(full)} over no node "
            f"(at most {NODE_COST_CEILING:.0%}: {verdict}; {measured['pairs']} interleaved repeats)",
            f"{regime}: caching off with the text path reused, over no node: {_cost(off)}"]


def table_own_cost_check(regime: str, row: dict) -> str:
    wall = Spread(*row["wall_spread"])
    verdict = show(at_least(wall, 1 - NODE_COST_CEILING), wall)
    return (f"check: {regime}: the node's own cost (caching off, text path every call) "
            f"{1 / wall.median - 1:+.1%} over no node (at most {NODE_COST_CEILING:.0%}: {verdict})")


def _cost(interval: Spread) -> str:
    """A wall speedup below 1 as the extra time it means, with its confidence interval."""
    return (f"{1 / interval.median - 1:+.1%} ({CONFIDENCE:.0%} interval {1 / interval.high - 1:+.1%} "
            f"to {1 / interval.low - 1:+.1%})")


def efficiency_check(row: dict, off: dict) -> str:
    """A caching row's share of its ideal over caching off, judged by the median's confidence interval
    over the table's repeats (5 repeats of 3 images: 15 pairs)."""
    try:
        efficiency = caching_efficiency(row["times"], off["times"], row["ideal"], summary=median_interval)
    except ValueError:  # too few repeats to bound a median (a quick run)
        efficiency = caching_efficiency(row["times"], off["times"], row["ideal"])
        return (f"check: {row['case']}: {efficiency.median:.0%} of its ideal over caching off "
                f"(at least {CACHING_EFFICIENCY_FLOOR:.0%}: undecided ({len(row['times'])} repeats))")
    verdict = interval_at_least(efficiency, CACHING_EFFICIENCY_FLOOR)  # the interval is printed beside it
    return (f"check: {row['case']}: {efficiency.median:.0%} of its ideal over caching off ({CONFIDENCE:.0%} "
            f"interval {efficiency.low:.0%} to {efficiency.high:.0%}; at least {CACHING_EFFICIENCY_FLOOR:.0%}: "
            f"{verdict})")


def race_checks(rows: list[dict], result: dict) -> list[str]:
    """Per regime: every peer setting that skips met by a node setting at least as fast with a lower MAE,
    and a node setting at least as fast as each peer's fastest."""
    key, lines = result["basis"], []
    basis = "measured" if key == "wall" else "projected"
    for regime in sorted({r["regime"] for r in rows}):
        verdicts = [v for v in result["peers_vs_node"] if v["regime"] == regime]
        won = sum(v["winner"] == "best" for v in verdicts)
        lines.append(f"check: {regime} ({basis}): a faster node setting with a lower MAE at {won} of "
                     f"{len(verdicts)} peer settings ({'ok' if won == len(verdicts) else 'MISSED'})")
        node_fastest = max(r[key] for r in rows if r["regime"] == regime and is_node(r))
        for peer in PEERS:
            peer_rows = [r for r in rows if r["regime"] == regime and r["method"] == peer]
            if peer_rows:
                fastest = max(r[key] for r in peer_rows)
                ok = node_fastest >= fastest * (1 - EQUAL_SPEED)
                lines.append(f"check: {regime} ({basis}): the node's fastest {node_fastest:.2f}x against {peer}'s "
                             f"fastest {fastest:.2f}x ({'ok' if ok else 'MISSED'})")
    return lines
