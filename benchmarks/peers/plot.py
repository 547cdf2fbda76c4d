"""The peer benchmark's plot: MAE against speedup, one curve per method, one column per regime."""

from __future__ import annotations

from pathlib import Path

from .cases import (EASYCACHE, EASYCACHE_IN_PLACE, FEWER_STEPS, FORECAST_AUTO, LAZYCACHE, MULTISTEP_SAMPLERS, PEERS,
                    REGIMES, UNCACHED, is_node_default, multistep_method)
from benchmarks.projection import GPU_CALL_S

PEER_STYLE = {EASYCACHE: dict(color="black", linestyle="--"), LAZYCACHE: dict(color="darkgoldenrod", linestyle="--")}
# Fewer steps: euler a bold dotted line from the uncached point, the multistep samplers open markers.
FEWER_STEPS_COLOR = "crimson"
MULTISTEP_MARKERS = dict(zip((multistep_method(s) for s in MULTISTEP_SAMPLERS), "^v<>P"))
# The panels, top to bottom: the wall-clock speedup (what a user gets here), the speedup projected on
# Krea-2 (when its component costs are measured), and model calls without / with (what each method
# saves in steps, whatever a cached step still costs).
AXES = (("wall", "wall-clock speedup (x, median of alternating repeats)"),
        ("projected", f"PROJECTED speedup on Krea-2 (x; component costs, a call at {GPU_CALL_S * 1000:g} ms)"),
        ("step_ideal", "model calls without / with (x; a node's cached step still runs its Fn block)"))


def plot(rows: list[dict], path: Path, title: str) -> dict[str, list[str]]:
    """MAE/255 against each speedup of ``AXES`` the rows have, one row of panels per speedup, one column
    per regime, one curve per method; returns the curves drawn per regime."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = [r for r in REGIMES if any(row["regime"] == r for row in rows)]
    panels = [(key, label) for key, label in AXES if all(key in row for row in rows)]
    figure, axes = plt.subplots(len(panels), len(regimes), figsize=(7 * len(regimes), 5 * len(panels) + 1.5),
                                squeeze=False)
    drawn = {}
    for column, regime in enumerate(regimes):
        of_regime = [r for r in rows if r["regime"] == regime]
        drawn[regime] = list(dict.fromkeys(r["method"] for r in of_regime))
        for line, (key, label) in enumerate(panels):
            draw_panel(axes[line][column], of_regime, drawn[regime], key, label)
        axes[-1][column].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return drawn


def draw_panel(axis, of_regime: list[dict], methods: list[str], key: str, label: str):
    """One regime's curves against one speedup (``key``), the node's defaults starred."""
    import matplotlib.ticker

    for method in methods:
        points = [r for r in of_regime if r["method"] == method]  # in the order of its sweep
        if method == FEWER_STEPS:  # euler at the full steps is the uncached run: the line starts there
            points = sorted(points + [r for r in of_regime if r["method"] == UNCACHED], key=lambda r: r[key])
        axis.plot([r[key] for r in points], [r["mae_255"] for r in points], label=method, **method_style(method))
    for row in of_regime:
        if is_node_default(row):
            axis.plot(row[key], row["mae_255"], marker="*", markersize=15, color="gold",
                      markeredgecolor="black", linestyle="none", label="node defaults")
    regime = REGIMES[of_regime[0]["regime"]]
    axis.set_title(f"{regime.steps} steps, CFG {regime.cfg:g}" + (" (batched)" if regime.cfg > 1 else ""))
    axis.set_xlabel(label)
    axis.set_ylabel("MAE/255 of the decoded image vs uncached")
    axis.set_yscale("symlog", linthresh=1.0)  # linear below 1, logarithmic above
    if key == "step_ideal":  # up to 13x at 52 steps: a log scale keeps the low end readable
        axis.set_xscale("log", base=2)
        axis.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
    axis.grid(True, alpha=0.3)


def method_style(method: str) -> dict:
    """Uncached a dot, the peers bold dashed lines, EasyCache in place a cross, fewer steps a bold dotted line
    (euler) and open markers (the multistep samplers), the Forecast node's ``auto`` a bold line, the node's
    other methods thin lines."""
    if method == UNCACHED:
        return dict(color="black", marker="o", linestyle="none")
    if method == FEWER_STEPS:
        return dict(color=FEWER_STEPS_COLOR, marker="D", linestyle=":", linewidth=2.4, markersize=5)
    if method in MULTISTEP_MARKERS:
        return dict(color=FEWER_STEPS_COLOR, marker=MULTISTEP_MARKERS[method], linestyle="none", markersize=8,
                    fillstyle="none")
    if method in PEERS:
        return dict(marker="s", linewidth=2.4, markersize=6, **PEER_STYLE[method])
    if method == EASYCACHE_IN_PLACE:
        return dict(marker="x", color="grey", linestyle="none", markersize=8)
    if method == FORECAST_AUTO:   # the setting a user picks by speed: bold, out of the thin lines' colour cycle
        return dict(color="teal", marker="o", linewidth=2.4, markersize=6)
    return dict(marker="o", linewidth=1.2, markersize=4)
