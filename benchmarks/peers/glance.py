"""The README's picture: how far each setting lands from the full-step image against the model calls it
computes, beside plain euler at as many steps, from the peer benchmark's committed results.

One panel per regime (8 steps at CFG 1, 52 steps at CFG 3.5); the euler line, the Forecast presets, the
DBCache defaults and EasyCache's sweep. A point below the euler line at the same calls is worth its cache; a
point above it is beaten by simply running fewer steps. Written to ``benchmarks/results/glance.png``:

    python -m benchmarks.peers.glance
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .cases import EASYCACHE, FEWER_STEPS, FORECAST_AUTO, FORECAST_PRESETS, REGIMES, UNCACHED, is_node_default

RESULTS_DIR = Path(__file__).resolve().parents[1] / "results"
TITLE = ("Closer to the full-step image (lower) at as many model calls (left is faster). Measured by this pack "
         "on small test models\ntrained on drawn shapes, not on Krea-2: they show how the methods behave, "
         "not Krea-2's image quality.")


def calls(row: dict) -> float:
    """Model calls computed in full per image, out of the regime's steps (``step_ideal`` is the full-step run's
    calls over this row's): a cached step that still runs its first block counts as skipped, so DBCache sits a
    little left of what it costs (its wall-clock is in peers.png)."""
    return REGIMES[row["regime"]].steps / row["step_ideal"]


def glance_points(rows: list[dict], regime: str) -> dict[str, list[tuple[float, float, str]]]:
    """(calls, MAE/255, label) per curve of one regime: euler from the full-step run down, the Forecast node's
    ``auto`` at the speedups measured, the presets, the DBCache defaults and EasyCache's sweep."""
    of_regime = [r for r in rows if r["regime"] == regime]

    def points(keep) -> list[tuple[float, float, str]]:
        return sorted((calls(r), r["mae_255"], r["setting"]) for r in of_regime if keep(r))

    return {
        "plain euler, fewer steps": points(lambda r: r["method"] in (FEWER_STEPS, UNCACHED)),
        "Cache-DiT Forecast auto": points(lambda r: r["method"] == FORECAST_AUTO),
        "Cache-DiT Forecast presets": points(lambda r: r["method"] == FORECAST_PRESETS),
        "Cache-DiT DBCache defaults": points(is_node_default),
        "EasyCache (ComfyUI core)": points(lambda r: r["method"] == EASYCACHE),
    }


STYLE = {
    "plain euler, fewer steps": dict(color="crimson", marker="D", linestyle=":", linewidth=2.2, markersize=5),
    "Cache-DiT Forecast auto": dict(color="tab:blue", marker="o", linestyle="-", linewidth=2.2, markersize=5),
    "Cache-DiT Forecast presets": dict(color="tab:green", marker="o", linestyle="none", markersize=9),
    "Cache-DiT DBCache defaults": dict(color="gold", marker="*", linestyle="none", markersize=16,
                                       markeredgecolor="black"),
    "EasyCache (ComfyUI core)": dict(color="black", marker="s", linestyle="--", linewidth=1.2, markersize=4),
}


def plot(rows: list[dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    regimes = [name for name in REGIMES if any(r["regime"] == name for r in rows)]
    figure, axes = plt.subplots(1, len(regimes), figsize=(6.5 * len(regimes), 5), squeeze=False)
    for axis, name in zip(axes[0], regimes):
        for label, points in glance_points(rows, name).items():
            axis.plot([p[0] for p in points], [p[1] for p in points], label=label, **STYLE[label])
        for x, y, setting in glance_points(rows, name)["Cache-DiT Forecast presets"]:
            axis.annotate(setting, (x, y), textcoords="offset points", xytext=(7, -4), fontsize=8,
                          color="tab:green")
        regime = REGIMES[name]
        axis.set_title(f"{regime.steps} steps, CFG {regime.cfg:g}")
        axis.set_xlabel(f"model calls computed in full (of {regime.steps})")
        axis.set_ylabel("MAE/255 against the full-step image")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize=8, loc="upper right")
    figure.suptitle(TITLE, fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=90)
    plt.close(figure)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", default=str(RESULTS_DIR / "peers.json"))
    parser.add_argument("--out", default=str(RESULTS_DIR / "glance.png"))
    args = parser.parse_args(argv)
    plot(json.loads(Path(args.results).read_text())["rows"], Path(args.out))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
