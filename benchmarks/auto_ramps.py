"""Which share ramp ``auto`` follows, guided (CFG above 1) and not (CFG 1): the ramps side by side on the tuning images.

``auto`` (``adapters/forecast/auto_schedule.py``) sets each gap's share from the sigma range it spans: in full up
to the ramp's first value, holding from its second. This runs ``auto``'s computed steps with each ramp of
``RAMPS`` on the images its rule is chosen on (``forecast_auto.TUNING_IMAGES``' last four, never the measured
ones), beside euler at as many steps: the trained Krea-2 test model at CFG 3.5 (20 and 28 steps) and at CFG 1
(8 and 20 steps), the Turbo test model at CFG 1 (8 and 12 steps). MAE/255 against the uncached run at the same
steps, mean of the four. Figures of dynamics on small test models trained on drawn shapes, not Krea-2 quality.

    python -m benchmarks.auto_ramps        # writes results/auto_ramps.json
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import torch

from benchmarks import forecast_auto
from benchmarks.forecast_calibration import gap_settings, rule_plan
from benchmarks.forecast_error import comfyui_in_process, mae_255, regime_build, regime_record, write_results
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

RESULTS = Path(__file__).resolve().parent / "results" / "auto_ramps.json"
IMAGES = forecast_auto.TUNING_IMAGES[2:]
auto_module, settings_module = forecast_auto.auto_module, forecast_auto.settings_module
GUIDED = (True, False)   # the ramp of a guided run, then of one at CFG 1
RAMPS = tuple(auto_module.share_ramp(guided) for guided in GUIDED)
# name: (model, CFG, {steps: speedups})
REGIMES = {
    "raw, CFG 3.5": (PROXY_MODEL, 3.5, {20: (2, 3, 4, 6), 28: (2, 3, 4, 6)}),
    "raw, CFG 1": (PROXY_MODEL, 1.0, {8: (2, 1.6, 8 / 6), 20: (2, 3, 4, 6)}),
    "turbo, CFG 1": (TURBO_PROXY_MODEL, 1.0, {8: (2, 1.6, 8 / 6), 12: (2, 3, 4)}),
}


def run_regime(sampler, decode, cfg: float, grid: dict, progress) -> list[dict]:
    rows = []
    for steps, speedups in grid.items():
        references = [decode(sampler.sample(image, steps, cfg, None).latent) for image in IMAGES]
        sigmas = sampler.sigmas(steps)

        def mae(settings, run_steps=steps):
            return statistics.mean(mae_255(decode(sampler.sample(image, run_steps, cfg, settings).latent), reference)
                                   for image, reference in zip(IMAGES, references))

        for speedup in speedups:
            plans = [rule_plan(steps, speedup, sigmas, guided) for guided in GUIDED]   # the same steps, each ramp's shares
            chosen = plans[0][0]
            row = {"steps": steps, "speedup": round(speedup, 3), "calls": len(chosen), "euler": mae(None, len(chosen)),
                   "ramps": [mae(gap_settings(chosen, steps, shares)) for _, shares in plans]}
            progress(f"{steps} steps, speedup {speedup:g}: euler {row['euler']:.2f}, ramps " +
                     ", ".join(f"{ramp}: {value:.2f}" for ramp, value in zip(RAMPS, row["ramps"])))
            rows.append(row)
    return rows


def table(results: dict) -> list[str]:
    """The rows as docs/benchmarks.md shows them ("At CFG 1, the trend followed further")."""
    ramps = [tuple(ramp) for ramp in results["ramps"]]
    lines = ["| test model, CFG | steps | calls | euler at as many steps | " +
             " | ".join(f"ramp ({a:g}, {b:g})" for a, b in ramps) + " |", "|---" * (4 + len(ramps)) + "|"]
    for name, regime in results["regimes"].items():
        for row in regime["rows"]:
            best = min(row["ramps"])
            cells = [f"**{v:.2f}**" if v == best else f"{v:.2f}" for v in row["ramps"]]
            lines.append(f"| {name} | {row['steps']} | {row['calls']} | {row['euler']:.2f} | "
                         + " | ".join(cells) + " |")
    return lines


def findings(results: dict) -> list[str]:
    """Per CFG: in how many cells the unguided ramp lands closer than the guided one."""
    lines = []
    for label, unguided in (("CFG 1", True), ("CFG 3.5", False)):
        rows = [row for regime in results["regimes"].values() if (regime["cfg"] == 1) == unguided
                for row in regime["rows"]]
        closer = sum(row["ramps"][1] < row["ramps"][0] for row in rows)
        worst = max(row["ramps"][1] / row["ramps"][0] for row in rows)
        lines.append(f"- At {label} the ramp {tuple(results['ramps'][1])} lands closer than "
                     f"{tuple(results['ramps'][0])} in {closer} of {len(rows)} cells; at worst {worst:.2f}x its MAE.")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)
    comfy_root = comfyui_in_process()
    builds = {}
    results = {"images": [list(i) for i in IMAGES], "ramps": [list(r) for r in RAMPS],
               "note": "small Krea-2 test models trained on drawn shapes: dynamics, not Krea-2 quality", "regimes": {}}
    with torch.inference_mode():
        for name, (model, cfg, grid) in REGIMES.items():
            build = regime_build(model, comfy_root, builds)
            rows = run_regime(forecast_auto.PlannedSampler(build.checkpoint), build.decode, cfg, grid,
                              progress=lambda text: print(f"{name}: {text}", flush=True))
            results["regimes"][name] = regime_record(model, build, cfg, rows=rows)
    write_results(args.json, results)
    print("\n".join(table(results) + [""] + findings(results)))


if __name__ == "__main__":
    main()
