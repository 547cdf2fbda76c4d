"""The Forecast node's ``auto`` plan against fewer steps, on a grid of step counts and speedups.

In one process, ComfyUI's own sampler (``comfy.sample``, euler/simple, the peer benchmark's graph: class
conditioning, zeroed negative, 128x128) samples each image uncached at the run's steps, plainly at as many steps
as ``auto`` makes model calls, through the node with ``auto`` at the speedup, and through each fixed preset that
makes the same calls. MAE/255 of the decoded image against the uncached one, mean over the images.

Beside them, per step count, plans chosen from calibration runs (``benchmarks/peers/dpcache.py``: uncached runs
of two other images, ``CALIBRATION_IMAGES``, record the model's output at every step):

- **DPCache-style**: the peer, the steps a DPCache-style dynamic program picks for holding the last computed
  output between them, run so (the node's forecast at share 0, which reuses that output);
- **``auto`` on its steps**: ``auto``'s forecast on those same steps, whether choosing the steps from a
  calibration run helps ``auto``;
- **``auto`` on steps planned for it**: the program priced with ``auto``'s own forecast instead of holding.

- the trained Krea-2 test model, CFG 3.5 (cond and uncond batched): 20, 28, 40 and 52 steps at speedups 2, 3,
  4 and 6;
- the distilled Turbo test model, CFG 1: 8 steps at 4, 5 and 6 calls (speedups 2, 1.6 and 1.33).

The images are none of those the share rule (``adapters/forecast/auto_schedule.py``) was chosen on, nor the peer
benchmark's, nor the calibration's. Figures of dynamics on small test models trained on drawn shapes, not Krea-2 quality.

    python -m benchmarks.forecast_auto            # writes results/forecast_auto.json and forecast_auto.png
    python -m benchmarks.forecast_auto --plot-only
"""

from __future__ import annotations

import argparse
import importlib
import json
import math
import statistics
import time
from pathlib import Path

import torch

from benchmarks.forecast_error import PACK, ProxySampler, comfyui_in_process, mae_255, regime_build, write_results
from benchmarks.peers import dpcache
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

RESULTS = Path(__file__).resolve().parent / "results" / "forecast_auto.json"
PICTURE = RESULTS.with_suffix(".png")
# (label, seed) of the images ``auto``'s rule (adapters/forecast/auto_schedule.py) was chosen on: its first share
# rule on the first two, its layout and ramp on the others. The measured ones are none of them, nor the peer
# benchmark's (0, 0), (5, 1), (2, 2), (7, 3).
TUNING_IMAGES = ((1, 11), (3, 12), (5, 51), (1, 52), (6, 54), (3, 55))
IMAGES = ((4, 13), (6, 14), (0, 21), (2, 22))
# The DPCache-style planner's calibration runs (benchmarks/peers/dpcache.py): none of the above, nor measured.
CALIBRATION_IMAGES = ((7, 41), (3, 42))
# name: (model, CFG, {steps: speedups}, the fixed presets laid out for it)
REGIMES = {
    "raw": (PROXY_MODEL, 3.5, {20: (2, 3, 4, 6), 28: (2, 3, 4, 6), 40: (2, 3, 4, 6), 52: (2, 3, 4, 6)},
            ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52")),
    "turbo": (TURBO_PROXY_MODEL, 1.0, {8: (2, 1.6, 8 / 6)}, ("turbo_5_of_8", "turbo_4_of_8")),
}

settings_module = importlib.import_module(f"{PACK}.adapters.forecast.forecast_settings")
feature_forecast = importlib.import_module(f"{PACK}.adapters.forecast.feature_forecast")
auto_module = importlib.import_module(f"{PACK}.adapters.forecast.auto_schedule")
# The DPCache-style peer's steps between computed ones: the last computed output, held.
HOLD_OUTPUT = feature_forecast.Forecaster("linear", extrapolation=0.0, target="output")


def preset_calls(name: str, steps: int) -> int:
    settings = settings_module.ForecastSettings.from_preset(name)
    return sum(settings_module.plan_forecast_run(settings, steps).mask)


class PlannedSampler(ProxySampler):
    """The proxy through the Forecast node, or, for a plan the node's inputs cannot name (computed steps chosen
    by the planner), through the same node's patch with those settings."""

    def patched(self, settings):
        if not isinstance(settings.schedule, dpcache.PlannedSchedule):
            return super().patched(settings)
        nodes = importlib.import_module(f"{PACK}.nodes.wrappers")
        registry = importlib.import_module(f"{PACK}.adapters.families.registry")
        methods = importlib.import_module(f"{PACK}.adapters.methods")
        return nodes.patched_model(self.model, registry.FORECAST_SCOPE, methods.FORECAST, settings, "forecast-auto")


def planned(chosen, steps: int, between: str):
    """Settings that run ``chosen`` steps: holding between them (the DPCache-style peer), or ``auto``'s forecast."""
    schedule = dpcache.planned_schedule(chosen, steps, between)
    if between == dpcache.HOLD:
        return settings_module.ForecastSettings("dpcache_style", HOLD_OUTPUT, schedule)
    return settings_module.ForecastSettings(auto_module.AUTO, settings_module.AUTO_FORECAST, schedule)


def mean_mae(sampler: ProxySampler, decode, references, steps: int, cfg: float, settings) -> float:
    return statistics.mean(mae_255(decode(sampler.sample(image, steps, cfg, settings).latent), reference)
                           for image, reference in zip(IMAGES, references))


def run_regime(sampler: ProxySampler, decode, cfg: float, grid: dict, presets: tuple[str, ...], progress) -> list:
    rows = []
    for steps, speedups in grid.items():
        references = [decode(sampler.sample(image, steps, cfg, None).latent) for image in IMAGES]
        sigmas = sampler.sigmas(steps)
        started = time.perf_counter()
        outputs = [sampler.sample(image, steps, cfg, None).outputs for image in CALIBRATION_IMAGES]
        calibrated = time.perf_counter()
        hold_costs, auto_costs = dpcache.hold_costs(outputs), dpcache.auto_costs(outputs, sigmas, guided=cfg != 1)
        progress(f"{steps} steps: calibrated on {len(CALIBRATION_IMAGES)} uncached runs in "
                 f"{calibrated - started:.0f} s, costs priced in {time.perf_counter() - calibrated:.0f} s")
        for speedup in speedups:
            calls = auto_module.auto_calls(steps, speedup)
            auto = settings_module.ForecastSettings.auto(speedup)
            auto_plan = settings_module.plan_forecast_run(auto, steps, sigmas, guided=cfg != 1)
            dp_steps, _ = dpcache.plan_hold(hold_costs, calls)
            auto_dp_steps, _ = dpcache.plan_auto(auto_costs, steps, calls)
            row = {"steps": steps, "speedup": round(speedup, 3), "calls": calls,
                   "euler": mean_mae(sampler, decode, references, calls, cfg, None),
                   "auto": mean_mae(sampler, decode, references, steps, cfg, auto),
                   "gap_shares": auto_plan.gap_shares(),
                   "presets": {name: mean_mae(sampler, decode, references, steps, cfg,
                                              settings_module.ForecastSettings.from_preset(name))
                               for name in presets if preset_calls(name, steps) == calls},
                   "dpcache_style": {"computed_steps": dp_steps, "mae": mean_mae(
                       sampler, decode, references, steps, cfg, planned(dp_steps, steps, dpcache.HOLD))},
                   "auto_on_dpcache_steps": mean_mae(sampler, decode, references, steps, cfg,
                                                     planned(dp_steps, steps, dpcache.AUTO)),
                   "auto_planned": {"computed_steps": auto_dp_steps, "mae": mean_mae(
                       sampler, decode, references, steps, cfg, planned(auto_dp_steps, steps, dpcache.AUTO))}}
            progress(f"{steps} steps, speedup {speedup:g} ({calls} calls): euler {row['euler']:.2f}, "
                     f"auto {row['auto']:.2f}" + "".join(f", {n} {v:.2f}" for n, v in row["presets"].items()) +
                     f", DPCache-style {row['dpcache_style']['mae']:.2f} {dp_steps}, auto on its steps "
                     f"{row['auto_on_dpcache_steps']:.2f}, auto on steps planned for it "
                     f"{row['auto_planned']['mae']:.2f} {auto_dp_steps}")
            rows.append(row)
    return rows


def table(results: dict) -> list[str]:
    """The grid as docs/benchmarks.md shows it ("Forecast auto"): a row per step count and speedup, MAE/255 of
    euler at as many steps as ``auto`` makes calls, of ``auto``, of each fixed preset with those calls, of the
    DPCache-style plan (its steps, holding between), of ``auto`` on those steps and on steps planned for it."""
    lines = ["| test model, CFG | steps | speedup | calls | euler at as many steps | `auto` | `auto` / euler | "
             "fixed preset at the same calls | DPCache-style | `auto` on its steps | `auto` on steps planned for it |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, regime in results["regimes"].items():
        for row in regime["rows"]:
            presets = ", ".join(f"`{n}` {v:.2f}" for n, v in row["presets"].items()) or "-"
            lines.append(f"| {name}, CFG {regime['cfg']:g} | {row['steps']} | {row['speedup']:g} | {row['calls']} | "
                         f"{row['euler']:.2f} | {row['auto']:.2f} | {row['auto'] / row['euler']:.2f} | {presets} | "
                         f"{row['dpcache_style']['mae']:.2f} | {row['auto_on_dpcache_steps']:.2f} | "
                         f"{row['auto_planned']['mae']:.2f} |")
    return lines


def findings(results: dict) -> list[str]:
    """What the grid says of the plans against each other, as docs/benchmarks.md's "Forecast auto" words it: in
    how many cells each lands closer than what it is compared with, and by how much (the geometric mean of the
    ratio of MAEs over the cells)."""
    rows = [(name, row) for name, regime in results["regimes"].items() for row in regime["rows"]]

    def against(value, base) -> tuple[int, float]:
        ratios = [value(row) / base(row) for _, row in rows]
        return sum(r < 1 for r in ratios), math.exp(statistics.mean(math.log(r) for r in ratios))

    def by_steps(value, base) -> str:
        counts = {}
        for name, row in rows:
            key = f"{row['steps']}" + (f" ({name})" if name != "raw" else "")
            closer, total = counts.get(key, (0, 0))
            counts[key] = (closer + (value(row) < base(row)), total + 1)
        return ", ".join(f"{closer} of {total} at {key}" for key, (closer, total) in counts.items())

    euler, auto = (lambda row: row["euler"]), (lambda row: row["auto"])
    dp, on_dp = (lambda row: row["dpcache_style"]["mae"]), (lambda row: row["auto_on_dpcache_steps"])
    planned = lambda row: row["auto_planned"]["mae"]  # noqa: E731
    n = len(rows)
    (a, ra), (d, rd), (x, rx), (y, ry) = (against(auto, euler), against(dp, euler), against(on_dp, auto),
                                          against(planned, auto))
    return [
        f"- Against fewer steps at as many model calls, `auto` is closer in {a} of {n} cells ({ra:.2f}x euler's "
        f"MAE, geometric mean), the DPCache-style plan in {d} of {n} ({rd:.2f}x): {by_steps(dp, euler)} steps.",
        f"- `auto` on the DPCache-style plan's steps against `auto` on its own: closer in {x} of {n} cells "
        f"({rx:.2f}x `auto`'s MAE): {by_steps(on_dp, auto)} steps.",
        f"- `auto` on steps planned for its own forecast against `auto`: closer in {y} of {n} cells ({ry:.2f}x): "
        f"{by_steps(planned, auto)} steps.",
    ]


def plot_points(results: dict) -> dict[str, dict[str, list[tuple[int, float]]]]:
    """Per step count, (model calls, MAE/255) per curve: euler down from the full-step run (MAE 0 at every
    step), ``auto``, the fixed presets, the DPCache-style plan and ``auto`` on its steps."""
    panels = {}
    for name, regime in results["regimes"].items():
        for steps in dict.fromkeys(row["steps"] for row in regime["rows"]):
            rows = [row for row in regime["rows"] if row["steps"] == steps]
            panels[f"{name}, {steps} steps, CFG {regime['cfg']:g}"] = {
                "plain euler, fewer steps": sorted([(row["calls"], row["euler"]) for row in rows] + [(steps, 0.0)]),
                "auto": sorted((row["calls"], row["auto"]) for row in rows),
                "fixed presets": sorted((row["calls"], mae) for row in rows for mae in row["presets"].values()),
                "DPCache-style (hold)": sorted((row["calls"], row["dpcache_style"]["mae"]) for row in rows),
                "auto on DPCache's steps": sorted((row["calls"], row["auto_on_dpcache_steps"]) for row in rows),
            }
    return panels


STYLE = {
    "plain euler, fewer steps": dict(color="crimson", marker="D", linestyle=":", linewidth=2.2, markersize=5),
    "auto": dict(color="tab:blue", marker="o", linestyle="-", linewidth=1.6, markersize=6),
    "fixed presets": dict(color="tab:green", marker="o", linestyle="none", markersize=9),
    "DPCache-style (hold)": dict(color="black", marker="s", linestyle="--", linewidth=1.2, markersize=4),
    "auto on DPCache's steps": dict(color="tab:purple", marker="^", linestyle="none", markersize=6),
}


def plot(results: dict, path: Path) -> None:
    """MAE against model calls, one panel per step count: a point below the euler line beats fewer steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = plot_points(results)
    columns = min(3, len(panels))
    rows = -(-len(panels) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.6 * columns, 3.8 * rows + 0.6), squeeze=False)
    for axis in axes.flat[len(panels):]:
        axis.set_visible(False)
    for axis, (title, curves) in zip(axes.flat, panels.items()):
        for label, points in curves.items():
            if points:
                axis.plot([p[0] for p in points], [p[1] for p in points], label=label, **STYLE[label])
        axis.set_title(title, fontsize=10)
        axis.set_xlabel("model calls")
        axis.set_ylim(bottom=0)
        axis.grid(True, alpha=0.3)
        axis.set_ylabel("MAE/255 against the full-step image", fontsize=8)
    axes[0][0].legend(fontsize=7, loc="upper right")
    figure.suptitle("Forecast auto against fewer steps at as many model calls (lower is closer), on four images none "
                    "of the choices used. Small test models\ntrained on drawn shapes, not Krea-2: how the plans "
                    "behave, not Krea-2's image quality.", fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=80)
    plt.close(figure)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regimes", default=",".join(REGIMES),
                        help="raw, turbo or both (comma-separated); the results file keeps the other's rows")
    parser.add_argument("--json", default=str(RESULTS))
    parser.add_argument("--steps", help="only these step counts (comma-separated): a shorter check, not the grid")
    parser.add_argument("--plot-only", action="store_true", help="redraw the picture from the results file")
    args = parser.parse_args(argv)
    if args.plot_only:
        plot(json.loads(Path(args.json).read_text()), PICTURE)
        return
    comfy_root = comfyui_in_process()
    builds, results = {}, {"images": [list(i) for i in IMAGES],
                           "calibration_images": [list(i) for i in CALIBRATION_IMAGES], "share_ramp": list(auto_module.SHARE_RAMP),
                           "unguided_share_ramp": list(auto_module.UNGUIDED_SHARE_RAMP),
                           "note": "small Krea-2 test models trained on drawn shapes: dynamics, not Krea-2 quality",
                           "regimes": {}, "builds": {}}
    if Path(args.json).is_file() and not args.steps:
        kept = json.loads(Path(args.json).read_text())
        results["regimes"], results["builds"] = kept["regimes"], kept["builds"]
    with torch.inference_mode():
        for name in args.regimes.split(","):
            model, cfg, grid, presets = REGIMES[name]
            if args.steps:
                grid = {steps: speedups for steps, speedups in grid.items() if str(steps) in args.steps.split(",")}
            build = regime_build(model, comfy_root, builds)
            rows = run_regime(PlannedSampler(build.checkpoint), build.decode, cfg, grid, presets,
                              progress=lambda text: print(text, flush=True))
            results["regimes"][name] = {"model": model, "proxy": build.checkpoint.parent.name, "cfg": cfg, "rows": rows}
            results["builds"][build.checkpoint.parent.name] = {"weights_sha256": build.info["weights_sha256"]}
    write_results(args.json, results)
    print("\n".join(table(json.loads(Path(args.json).read_text()))))
    if Path(args.json) == RESULTS:
        plot(json.loads(RESULTS.read_text()), PICTURE)


if __name__ == "__main__":
    main()
