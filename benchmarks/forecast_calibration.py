"""Calibrating ``auto``'s shares on the model: whether a plan fitted on a model's own runs beats the rule.

``auto`` (``adapters/forecast/auto_schedule.py``) forecasts each gap between computed steps a share of the way
the last two computed outputs' trend points, the share set by a rule from the sigma range the gap spans. The
rule was chosen on the Krea-2 test models. Here the computed steps stay ``auto``'s and each gap's share is
fitted instead on calibration images the measured ones are not:

- one uncached run per calibration image gives the latent entering every step;
- gap by gap, in the order the run meets them, each share of ``SHARES`` is run closed loop (the gaps before it
  at the shares already chosen) and the one whose latent entering the gap's end (the sampler's output after the
  last gap) is closest to the uncached run's, mean absolute difference over the calibration images, is kept.

A share is judged where the run comes back to the model, on the path the cached run really takes, so what it
fits is what the run meets (pricing the model's outputs open loop, as the DPCache-style planner in
``benchmarks/forecast_auto.py`` does, did not carry to the closed loop). A node doing this needs one uncached
run and one run at the plan's calls: a gap's trial shares cost no model call, only the sampler's steps across
the gap. This benchmark reruns the whole sampling per trial instead (ComfyUI's sampler, unchanged): the same
choices, at more cost; the cost it reports is the benchmark's.

Measured as ``benchmarks/forecast_auto.py`` measures (its images, graph and MAE/255 against the uncached run at
the same steps, mean of the four), on the trained Krea-2 test model (CFG 3.5: 20, 28, 40, 52 steps at speedups
2, 3, 4, 6), the Turbo test model (CFG 1, 8 steps at 4, 5, 6 calls) and the Flux test model, which the rule was
not tuned on (CFG 3.5: 20 and 28 steps at 2, 3, 4, 6). Figures of dynamics on small test models trained on
drawn shapes, not Krea-2's or Flux's quality.

    python -m benchmarks.forecast_calibration              # writes results/forecast_calibration.json
    python -m benchmarks.forecast_calibration --regimes turbo
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import time
from pathlib import Path

import torch

from benchmarks import forecast_auto
from benchmarks.forecast_error import comfyui_in_process, regime_record, write_results
from benchmarks.peers import dpcache
from devkit.krea2_prompts import FLUX_PROXY_MODEL

RESULTS = Path(__file__).resolve().parent / "results" / "forecast_calibration.json"
SHARES = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0)
IMAGES, CALIBRATION_IMAGES = forecast_auto.IMAGES, forecast_auto.CALIBRATION_IMAGES
# name: (model, CFG, {steps: speedups}); the Krea-2 ones are forecast_auto's grid.
REGIMES = {
    **{name: regime[:3] for name, regime in forecast_auto.REGIMES.items()},
    "flux": (FLUX_PROXY_MODEL, 3.5, {20: (2, 3, 4, 6), 28: (2, 3, 4, 6)}),
}
settings_module, auto_module = forecast_auto.settings_module, forecast_auto.auto_module


@dataclasses.dataclass(frozen=True)
class GapShares(dpcache.PlannedSchedule):
    """``auto``'s forecast on chosen steps with a share of its own per gap (the first gap's is never read: one
    computed step gives no trend, it holds)."""

    per_gap: tuple[float, ...] = ()

    def shares(self, steps: int, sigmas=None, guided: bool = True) -> list[float]:
        starts = [*self.chosen, steps]
        shares = [0.0] * steps
        for gap, (start, end) in enumerate(zip(starts, starts[1:])):
            shares[start + 1:end] = [self.per_gap[gap] if gap else 0.0] * (end - start - 1)
        return shares


def gap_settings(chosen, steps: int, per_gap) -> object:
    schedule = GapShares(speedup=steps / len(chosen), chosen=tuple(chosen), between=dpcache.AUTO,
                         per_gap=tuple(per_gap))
    return settings_module.ForecastSettings(auto_module.AUTO, settings_module.AUTO_FORECAST, schedule)


def rule_plan(steps: int, speedup: float, sigmas, guided: bool = True) -> tuple[list[int], list[float]]:
    """``auto``'s computed steps and its share per gap (a gap without a step between its ends: 0), as a run
    ``guided`` (CFG above 1) or not lays them out."""
    plan = settings_module.plan_forecast_run(settings_module.ForecastSettings.auto(speedup), steps, sigmas, guided)
    chosen = [step for step, on in enumerate(plan.mask) if on]
    ends = [*chosen[1:], steps]
    return chosen, [plan.shares[start + 1] if end > start + 1 else 0.0 for start, end in zip(chosen, ends)]


def latent_gap(run, reference, step: int, steps: int) -> float:
    """How far a run's latent entering ``step`` (its output, past the last step) is from the uncached run's."""
    ours, theirs = (run.latent, reference.latent) if step >= steps else (run.x[step], reference.x[step])
    return (ours.float() - theirs.float()).abs().mean().item()


def calibrate_shares(sampler, steps: int, cfg: float, chosen: list[int], start: list[float], references) -> list[float]:
    """Each gap's share, fitted in the run's order on ``CALIBRATION_IMAGES`` (``references``: their uncached runs)."""
    per_gap, ends = list(start), [*chosen[1:], steps]
    for gap in range(1, len(chosen)):
        if ends[gap] == chosen[gap] + 1:
            continue
        distance = {}
        for share in SHARES:
            trial = gap_settings(chosen, steps, per_gap[:gap] + [share] + per_gap[gap + 1:])
            distance[share] = statistics.mean(
                latent_gap(sampler.sample(image, steps, cfg, trial), reference, ends[gap], steps)
                for image, reference in zip(CALIBRATION_IMAGES, references))
        per_gap[gap] = min(distance, key=distance.get)
    return per_gap


class FluxSampler(forecast_auto.PlannedSampler):
    """The Flux test model in the same graph: its class's tokens and pooled vector as the positive, both zeroed
    as the negative."""

    def inputs(self, image: tuple[int, int]):
        import comfy.sample

        from devkit.flux_proxy import class_conditioning

        label, seed = image
        context, pooled = class_conditioning(label)
        positive = [[context, {"pooled_output": pooled}]]
        negative = [[torch.zeros_like(context), {"pooled_output": torch.zeros_like(pooled)}]]
        latent = comfy.sample.fix_empty_latent_channels(self.model, torch.zeros(1, 4, 16, 16))
        return positive, negative, latent, comfy.sample.prepare_noise(latent, seed)


def regime_sampler(model: str, comfy_root: Path, builds: dict):
    if model == FLUX_PROXY_MODEL:
        from devkit.flux_proxy import ensure_flux_proxy

        builds[model] = builds.get(model) or ensure_flux_proxy(comfy_root)
        return FluxSampler(builds[model].checkpoint), builds[model]
    build = forecast_auto.regime_build(model, comfy_root, builds)
    return forecast_auto.PlannedSampler(build.checkpoint), build


def run_regime(sampler, decode, cfg: float, grid: dict, progress) -> list[dict]:
    rows = []
    for steps, speedups in grid.items():
        measured = [decode(sampler.sample(image, steps, cfg, None).latent) for image in IMAGES]
        references = [sampler.sample(image, steps, cfg, None) for image in CALIBRATION_IMAGES]
        sigmas = sampler.sigmas(steps)
        for speedup in speedups:
            chosen, rule = rule_plan(steps, speedup, sigmas, guided=cfg != 1)
            started = time.perf_counter()
            fitted = calibrate_shares(sampler, steps, cfg, chosen, rule, references)
            seconds = time.perf_counter() - started

            def mae(settings):
                return forecast_auto.mean_mae(sampler, decode, measured, steps if settings else len(chosen), cfg,
                                              settings)

            row = {"steps": steps, "speedup": round(speedup, 3), "calls": len(chosen), "computed_steps": chosen,
                   "euler": mae(None), "auto": mae(settings_module.ForecastSettings.auto(speedup)),
                   "rule_shares": rule[1:], "calibrated_shares": fitted[1:],
                   "calibrated": mae(gap_settings(chosen, steps, fitted)), "calibration_seconds": seconds}
            progress(f"{steps} steps, speedup {speedup:g} ({len(chosen)} calls): euler {row['euler']:.2f}, auto "
                     f"{row['auto']:.2f}, calibrated {row['calibrated']:.2f} (shares {fitted[1:]}, {seconds:.0f} s)")
            rows.append(row)
    return rows


def table(results: dict) -> list[str]:
    """The rows as docs/benchmarks.md shows them ("Calibrating auto's shares")."""
    lines = ["| test model, CFG | steps | speedup | calls | euler at as many steps | `auto` (rule) | `auto` calibrated | "
             "calibrated / rule | rule's shares | calibrated shares |", "|---|---|---|---|---|---|---|---|---|---|"]
    for name, regime in results["regimes"].items():
        for row in regime["rows"]:
            shares = [" / ".join(f"{round(s, 2):g}" for s in row[key]) for key in ("rule_shares", "calibrated_shares")]
            lines.append(f"| {name}, CFG {regime['cfg']:g} | {row['steps']} | {row['speedup']:g} | {row['calls']} | "
                         f"{row['euler']:.2f} | {row['auto']:.2f} | {row['calibrated']:.2f} | "
                         f"{row['calibrated'] / row['auto']:.2f} | {shares[0]} | {shares[1]} |")
    return lines


def findings(results: dict) -> list[str]:
    """Per regime: in how many cells calibrated shares land closer than the rule, and the geometric mean of
    their MAE over the rule's; and how many cells each is below euler at as many calls."""
    lines = []
    for name, regime in results["regimes"].items():
        rows = regime["rows"]
        ratio = math.exp(statistics.mean(math.log(row["calibrated"] / row["auto"]) for row in rows))
        lines.append(f"- {name}: calibrated closer than the rule in {sum(r['calibrated'] < r['auto'] for r in rows)} "
                     f"of {len(rows)} cells ({ratio:.2f}x the rule's MAE, geometric mean); below euler at as many "
                     f"calls: calibrated {sum(r['calibrated'] < r['euler'] for r in rows)}, the rule "
                     f"{sum(r['auto'] < r['euler'] for r in rows)}.")
    return lines


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regimes", default=",".join(REGIMES),
                        help=f"comma-separated, of {', '.join(REGIMES)}; the results file keeps the others' rows")
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)
    comfy_root = comfyui_in_process()
    results = {"images": [list(i) for i in IMAGES], "calibration_images": [list(i) for i in CALIBRATION_IMAGES],
               "shares_tried": list(SHARES), "share_ramp": list(auto_module.SHARE_RAMP),
               "unguided_share_ramp": list(auto_module.UNGUIDED_SHARE_RAMP),
               "note": "small test models trained on drawn shapes: dynamics, not Krea-2's or Flux's quality",
               "regimes": {}}
    if Path(args.json).is_file():
        results["regimes"] = json.loads(Path(args.json).read_text())["regimes"]
    builds = {}
    with torch.inference_mode():
        for name in args.regimes.split(","):
            model, cfg, grid = REGIMES[name]
            sampler, build = regime_sampler(model, comfy_root, builds)
            rows = run_regime(sampler, build.decode, cfg, grid, progress=lambda text: print(f"{name}: {text}", flush=True))
            results["regimes"][name] = regime_record(model, build, cfg, rows=rows)
    write_results(args.json, results)
    print("\n".join(table(results) + [""] + findings(results)))


if __name__ == "__main__":
    main()
