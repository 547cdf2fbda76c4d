"""The Forecast node's ``auto`` plan against fewer steps, on a grid of step counts and speedups.

In one process, ComfyUI's own sampler (``comfy.sample``, euler/simple, the peer benchmark's graph: class
conditioning, zeroed negative, 128x128) samples each image uncached at the run's steps, plainly at as many steps
as ``auto`` makes model calls, through the node with ``auto`` at the speedup, and through each fixed preset that
makes the same calls. MAE/255 of the decoded image against the uncached one, mean over the images.

- the trained Krea-2 test model, CFG 3.5 (cond and uncond batched): 20, 28, 40 and 52 steps at speedups 2, 3,
  4 and 6;
- the distilled Turbo test model, CFG 1: 8 steps at 4, 5 and 6 calls (speedups 2, 1.6 and 1.33).

The images are none of those the share rule (``adapters/forecast/auto_schedule.py``) was chosen on, nor the peer
benchmark's. Figures of dynamics on small test models trained on drawn shapes, not Krea-2 quality.

    python -m benchmarks.forecast_auto            # writes results/forecast_auto.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
from pathlib import Path

import torch

from benchmarks.forecast_error import PACK, ProxySampler, regime_build, rounded
from devkit.comfy_harness import find_comfyui, use_comfyui_in_process
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

RESULTS = Path(__file__).resolve().parent / "results" / "forecast_auto.json"
# The share rule was chosen on (label, seed) (1, 11) and (3, 12); the peer benchmark samples (0, 0), (5, 1),
# (2, 2). These are neither.
IMAGES = ((4, 13), (6, 14), (0, 21), (2, 22))
# name: (model, CFG, {steps: speedups}, the fixed presets laid out for it)
REGIMES = {
    "raw": (PROXY_MODEL, 3.5, {20: (2, 3, 4, 6), 28: (2, 3, 4, 6), 40: (2, 3, 4, 6), 52: (2, 3, 4, 6)},
            ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52")),
    "turbo": (TURBO_PROXY_MODEL, 1.0, {8: (2, 1.6, 8 / 6)}, ("turbo_5_of_8", "turbo_4_of_8")),
}

settings_module = importlib.import_module(f"{PACK}.adapters.forecast.forecast_settings")
auto_module = importlib.import_module(f"{PACK}.adapters.forecast.auto_schedule")
mae_255 = lambda a, b: importlib.import_module(f"{PACK}.adapters.image_compare").mae_255_and_mse(a, b)[0]  # noqa: E731


def preset_calls(name: str, steps: int) -> int:
    settings = settings_module.ForecastSettings.from_preset(name)
    return sum(settings_module.plan_forecast_run(settings, steps).mask)


def mean_mae(sampler: ProxySampler, decode, references, steps: int, cfg: float, settings) -> float:
    return statistics.mean(mae_255(decode(sampler.sample(image, steps, cfg, settings).latent), reference)
                           for image, reference in zip(IMAGES, references))


def run_regime(sampler: ProxySampler, decode, cfg: float, grid: dict, presets: tuple[str, ...], progress) -> list:
    rows = []
    for steps, speedups in grid.items():
        references = [decode(sampler.sample(image, steps, cfg, None).latent) for image in IMAGES]
        for speedup in speedups:
            calls = auto_module.auto_calls(steps, speedup)
            auto = settings_module.ForecastSettings.auto(speedup)
            row = {"steps": steps, "speedup": round(speedup, 3), "calls": calls,
                   "euler": mean_mae(sampler, decode, references, calls, cfg, None),
                   "auto": mean_mae(sampler, decode, references, steps, cfg, auto),
                   "gap_shares": settings_module.plan_forecast_run(auto, steps, sampler.sigmas(steps))
                   .method_summary()["gap_shares"],
                   "presets": {name: mean_mae(sampler, decode, references, steps, cfg,
                                              settings_module.ForecastSettings.from_preset(name))
                               for name in presets if preset_calls(name, steps) == calls}}
            progress(f"{steps} steps, speedup {speedup:g} ({calls} calls): euler {row['euler']:.2f}, "
                     f"auto {row['auto']:.2f}" + "".join(f", {n} {v:.2f}" for n, v in row["presets"].items()))
            rows.append(row)
    return rows


def table(results: dict) -> list[str]:
    """The grid as docs/benchmarks.md shows it ("Forecast auto"): a row per step count and speedup, MAE/255 of
    euler at as many steps as ``auto`` makes calls, of ``auto``, and of each fixed preset with those calls."""
    lines = ["| test model, CFG | steps | speedup | calls | euler at as many steps | `auto` | `auto` / euler | "
             "fixed preset at the same calls |", "|---|---|---|---|---|---|---|---|"]
    for name, regime in results["regimes"].items():
        for row in regime["rows"]:
            presets = ", ".join(f"`{n}` {v:.2f}" for n, v in row["presets"].items()) or "-"
            lines.append(f"| {name}, CFG {regime['cfg']:g} | {row['steps']} | {row['speedup']:g} | {row['calls']} | "
                         f"{row['euler']:.2f} | {row['auto']:.2f} | {row['auto'] / row['euler']:.2f} | {presets} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regimes", default=",".join(REGIMES), help="raw, turbo or both (comma-separated)")
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    use_comfyui_in_process(comfy_root)
    torch.set_num_threads(1)
    builds, results = {}, {"images": [list(i) for i in IMAGES], "share_ramp": list(auto_module.SHARE_RAMP),
                           "note": "small Krea-2 test models trained on drawn shapes: dynamics, not Krea-2 quality",
                           "regimes": {}}
    with torch.inference_mode():
        for name in args.regimes.split(","):
            model, cfg, grid, presets = REGIMES[name]
            build = regime_build(model, comfy_root, builds)
            rows = run_regime(ProxySampler(build.checkpoint), build.decode, cfg, grid, presets,
                              progress=lambda text: print(text, flush=True))
            results["regimes"][name] = {"model": model, "proxy": build.checkpoint.parent.name, "cfg": cfg, "rows": rows}
    results["builds"] = {build.checkpoint.parent.name: {"weights_sha256": build.info["weights_sha256"]}
                         for build in builds.values()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rounded(results), indent=1, allow_nan=False) + "\n")
    print("\n".join(table(json.loads(Path(args.json).read_text()))))


if __name__ == "__main__":
    main()
