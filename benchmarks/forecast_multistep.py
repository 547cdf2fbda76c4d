"""The Forecast node under ``res_multistep`` against fewer ``res_multistep`` steps, at as many model calls.

ComfyUI's own recipes for Z-Image Turbo (8 steps, CFG 1) and MiniMax H3 (20 steps) sample with ``res_multistep``, a
sampler that builds each step from the model's outputs of earlier steps. In one process, ComfyUI's own sampler
(``comfy.sample``, res_multistep/simple, the peer benchmark's graph: class conditioning, zeroed negative, 128x128)
samples each image uncached at the run's steps, through the node (a fixed preset, and ``auto`` at a speedup), and
plainly at as many steps as the node makes model calls (counted on the model's first block, not taken from the
plan). MAE/255 of the decoded image against the uncached one, mean over the images:

- the distilled Turbo test model, CFG 1, 8 steps: ``turbo_5_of_8`` and ``turbo_4_of_8``, ``auto`` at 1.6 and 2;
- the trained Krea-2 test model, CFG 3.5 (cond and uncond batched), 20 steps: ``raw_1_in_4`` and ``raw_1_in_5``
  (laid out for 52 steps), ``auto`` at 2 and 4.

Two images none of the presets, the ``auto`` rule, the peer benchmark or ``benchmarks/forecast_auto.py`` used.
Figures of dynamics on small test models trained on drawn shapes, not Krea-2 (or Z-Image) quality.

    python -m benchmarks.forecast_multistep       # writes results/forecast_multistep.json
"""

from __future__ import annotations

import argparse
import importlib
import json
import statistics
from pathlib import Path

import torch

from benchmarks.forecast_error import PACK, ProxySampler, comfyui_in_process, mae_255, regime_build, write_results
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

RESULTS = Path(__file__).resolve().parent / "results" / "forecast_multistep.json"
SAMPLER = "res_multistep"
# (label, seed): none of those ``auto``'s rule was chosen on (forecast_auto.TUNING_IMAGES), the peer benchmark's,
# benchmarks/forecast_auto.py's measured ones or its calibration's.
IMAGES = ((1, 51), (6, 52))
# name: (model, CFG, steps, the fixed presets, the auto speedups)
REGIMES = {
    "turbo": (TURBO_PROXY_MODEL, 1.0, 8, ("turbo_5_of_8", "turbo_4_of_8"), (1.6, 2.0)),
    "raw": (PROXY_MODEL, 3.5, 20, ("raw_1_in_4", "raw_1_in_5"), (2.0, 4.0)),
}

settings_module = importlib.import_module(f"{PACK}.adapters.forecast.forecast_settings")


class MultistepSampler(ProxySampler):
    """The proxy sampled with ``SAMPLER``, counting the model calls that ran its blocks (a forecast call runs none)."""

    def __init__(self, checkpoint: Path):
        super().__init__(checkpoint)
        registry = importlib.import_module(f"{PACK}.adapters.families.registry")
        target = registry.resolve(self.model.model.diffusion_model, registry.FORECAST_SCOPE)
        self.first_block = target.block_modules[0][0]

    def latent_and_calls(self, image, steps: int, cfg: float, settings) -> tuple[torch.Tensor, int]:
        import comfy.sample

        positive, negative, latent, noise = self.inputs(image)
        model = self.model if settings is None else self.patched(settings)
        calls = []
        hook = self.first_block.register_forward_hook(lambda module, args, out: calls.append(1))
        try:
            out = comfy.sample.sample(model, noise, steps, cfg, SAMPLER, "simple", positive, negative, latent,
                                      disable_pbar=True, seed=image[1])
        finally:
            hook.remove()
        return out, len(calls)


def run_regime(sampler: MultistepSampler, decode, cfg: float, steps: int, presets, speedups, progress) -> list:
    references = [decode(sampler.latent_and_calls(image, steps, cfg, None)[0]) for image in IMAGES]
    fewer: dict[int, float] = {}
    rows = []
    settings = [(name, settings_module.ForecastSettings.from_preset(name)) for name in presets]
    settings += [(f"auto {speedup:g}", settings_module.ForecastSettings.auto(speedup)) for speedup in speedups]
    for name, setting in settings:
        maes, counted = [], set()
        for image, reference in zip(IMAGES, references):
            latent, calls = sampler.latent_and_calls(image, steps, cfg, setting)
            maes.append(mae_255(decode(latent), reference))
            counted.add(calls)
        (calls,) = counted   # the same calls for every image: the plan is fixed before the run
        if calls not in fewer:
            fewer[calls] = statistics.mean(
                mae_255(decode(sampler.latent_and_calls(image, calls, cfg, None)[0]), reference)
                for image, reference in zip(IMAGES, references))
        row = {"setting": name, "calls": calls, "mae": statistics.mean(maes), "fewer_steps": fewer[calls]}
        progress(f"{steps} steps, {name}: {calls} calls, MAE {row['mae']:.2f} ({SAMPLER} at {calls} steps: "
                 f"{row['fewer_steps']:.2f})")
        rows.append(row)
    return rows


def table(results: dict) -> list[str]:
    """The rows as docs/benchmarks.md shows them ("Forecast under res_multistep")."""
    lines = [f"| test model, CFG | steps | setting | model calls | MAE/255 | {results['sampler']} at as many steps | "
             "closer than fewer steps |", "|---|---|---|---|---|---|---|"]
    for name, regime in results["regimes"].items():
        for row in regime["rows"]:
            closer = "yes" if row["mae"] < row["fewer_steps"] else "no"
            lines.append(f"| {name}, CFG {regime['cfg']:g} | {regime['steps']} | `{row['setting']}` | {row['calls']} | "
                         f"{row['mae']:.2f} | {row['fewer_steps']:.2f} | {closer} |")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regimes", default=",".join(REGIMES),
                        help="turbo, raw or both (comma-separated); the results file keeps the other's rows")
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)
    comfy_root = comfyui_in_process()
    builds, results = {}, {"sampler": SAMPLER, "images": [list(i) for i in IMAGES],
                           "note": "small Krea-2 test models trained on drawn shapes: dynamics, not Krea-2 quality",
                           "regimes": {}, "builds": {}}
    if Path(args.json).is_file():
        kept = json.loads(Path(args.json).read_text())
        results["regimes"], results["builds"] = kept["regimes"], kept["builds"]
    with torch.inference_mode():
        for name in args.regimes.split(","):
            model, cfg, steps, presets, speedups = REGIMES[name]
            build = regime_build(model, comfy_root, builds)
            rows = run_regime(MultistepSampler(build.checkpoint), build.decode, cfg, steps, presets, speedups,
                              progress=lambda text: print(text, flush=True))
            results["regimes"][name] = {"model": model, "proxy": build.checkpoint.parent.name, "cfg": cfg,
                                        "steps": steps, "rows": rows}
            results["builds"][build.checkpoint.parent.name] = {"weights_sha256": build.info["weights_sha256"]}
    write_results(args.json, results)
    print("\n".join(table(json.loads(Path(args.json).read_text()))))


if __name__ == "__main__":
    main()
