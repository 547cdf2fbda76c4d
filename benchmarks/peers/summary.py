"""The docs' summary of a peer-benchmark run, printed as Markdown from its results (not retyped): per regime, plain
euler and the multistep samplers at each call count, then the settings a user picks (the DBCache defaults, each
step mask with its best calibrator, the Forecast presets, ``auto``, EasyCache and LazyCache at their best) beside
euler at as many model calls. MAE/255 against the uncached image at the full steps.

    python -m benchmarks.peers.summary                                       # the Flux run
    python -m benchmarks.peers.summary --results benchmarks/results/peers.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .cases import (CALIBRATORS, FEWER_STEPS, FORECAST_AUTO, FORECAST_PRESETS, MASK_POLICIES, MASKS, PEERS, REGIMES,
                    is_multistep, is_node_default)
from .checks import EQUAL_CALLS
from .compare import against_fewer_steps, euler_curve

RESULTS = Path(__file__).resolve().parents[1] / "results" / "peers_flux.json"


def fewer_steps_table(of_regime: list[dict]) -> list[str]:
    """Euler at each call count, slowest first, and each multistep sampler at the counts it ran."""
    counts = sorted({r["steps"] for r in of_regime if r["method"] == FEWER_STEPS}, reverse=True)
    methods = [FEWER_STEPS, *dict.fromkeys(r["method"] for r in of_regime if is_multistep(r))]
    mae = {(r["method"], r["steps"]): r["mae_255"] for r in of_regime}
    lines = ["| model calls | " + " | ".join(map(str, counts)) + " |", "|---|" + "---|" * len(counts)]
    for method in methods:
        cells = (f"{mae[method, n]:.2f}" if (method, n) in mae else "" for n in counts)
        lines.append(f"| {method.removeprefix('fewer steps, ')} | " + " | ".join(cells) + " |")
    return lines


def below_euler(row: dict, of_regime: list[dict]) -> float:
    """How far a row lands below euler at as many model calls (negative: above; beyond euler's fastest row: -inf)."""
    found = against_fewer_steps(row, euler_curve(of_regime, EQUAL_CALLS), of_regime, EQUAL_CALLS)
    return float("-inf") if found["euler_mae_255"] is None else found["euler_mae_255"] - row["mae_255"]


def picked(of_regime: list[dict]) -> list[tuple[str, dict]]:
    """(label, row): the defaults, each mask with its best calibrator (or none), the presets, auto, and each peer's
    setting that lands lowest against euler at as many calls."""
    rows = [("DBCache defaults (threshold 0.24)", next(r for r in of_regime if is_node_default(r)))]
    for mask in MASK_POLICIES:
        on_mask = [r for r in of_regime if r["method"].startswith(MASKS) and r["setting"] == mask]
        if on_mask:
            best = min(on_mask, key=lambda r: r["mae_255"])
            calibrator = next((c for c in CALIBRATORS if best["method"].endswith(c)), "no calibrator")
            rows.append((f"mask `{mask}` + {calibrator} (best of {len(on_mask)})", best))
    rows += [(f"`{r['setting']}`", r) for r in of_regime if r["method"] == FORECAST_PRESETS]
    rows += [(f"`auto` {r['setting']}x", r) for r in of_regime if r["method"] == FORECAST_AUTO]
    for peer in PEERS:
        skipping = [r for r in of_regime if r["method"] == peer and max(r["skipped"]) > 0]
        if skipping:
            best = max(skipping, key=lambda r: below_euler(r, of_regime))
            rows.append((f"{peer} {best['setting']} (its best of {len(skipping)} against euler)", best))
    return rows


def settings_table(of_regime: list[dict]) -> list[str]:
    lines = ["| setting | model calls | MAE/255 | euler at as many calls | best multistep at as many or fewer calls | "
             "wall on the proxy |", "|---|---|---|---|---|---|"]
    curve = euler_curve(of_regime, EQUAL_CALLS)
    for label, row in picked(of_regime):
        found = against_fewer_steps(row, curve, of_regime, EQUAL_CALLS)
        euler = found["euler_mae_255"]
        ours, theirs = f"{row['mae_255']:.2f}", "-" if euler is None else f"{euler:.2f}"
        if euler is not None:   # the lower of the two in bold
            ours, theirs = (f"**{ours}**", theirs) if row["mae_255"] < euler else (ours, f"**{theirs}**")
        multistep = ("-" if found["multistep"] is None else f"{found['multistep'].split(', ')[-1]}: "
                     f"{found['multistep_mae_255']:.2f}")
        lines.append(f"| {label} | {found['calls']:.3g} of {row['steps']} | {ours} | {theirs} | {multistep} | "
                     f"{row['wall']:.2f}x |")
    return lines


def summary(rows: list[dict]) -> list[str]:
    lines = []
    for name, regime in REGIMES.items():
        of_regime = [r for r in rows if r["regime"] == name]
        if of_regime:
            lines += [f"**{regime.steps} steps, CFG {regime.cfg:g}** (`{name}`): fewer steps, MAE/255", "",
                      *fewer_steps_table(of_regime), "", *settings_table(of_regime), ""]
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS))
    args = parser.parse_args(argv)
    print("\n".join(summary(json.loads(Path(args.results).read_text())["rows"])))


if __name__ == "__main__":
    main()
