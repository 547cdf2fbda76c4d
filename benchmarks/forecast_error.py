"""Where a whole-call forecast goes wrong: its error per step against the uncached features, open and closed loop.

The peer benchmark says how far a forecasting preset's image lands from the uncached one; this
script says at which steps that error is made. In one process, ComfyUI's own sampler
(``comfy.sample``) samples the peer benchmark's images in its two regimes, each on its model: 8 steps
CFG 1 on the Turbo proxy (distilled for them), 52 steps CFG 3.5 (cond and uncond batched in one call)
on the trained proxy; both decode with the trained proxy's codec, and the results name the build each
regime sampled (``regimes.<name>.proxy``):

- **uncached**, keeping at every step what the forecasting node forecasts: the input of the model's
  final layer (the registry's ``final_layer`` seam; ``target`` ``feature``) and its output
  (``output``), one per call: one stream at CFG 1, one for the batch at CFG 3.5, as the node keeps
  its histories;
- **open loop**, per setting: the computed steps' true features (or outputs, as its target says) are fed to the node's own fit
  (``adapters/feature_forecast.FeatureHistory``) in the node's order, and each forecast step's
  forecast is compared with the true feature there: ``||forecast - true|| / ||true||``, over the
  whole feature and over its image tokens (the ones the final layer's output keeps). Beside it,
  the relative change between consecutive true features (how far the step moves it);
- **closed loop**, per setting: the node itself (``CacheDiTSpectrum``) samples the same image, and
  the latent entering each step and the model's denoised prediction there are compared with the
  uncached run's; the decoded image's MAE/255 is the peer benchmark's figure.

Then a search over the schedules the node can run (warmup, window, growth, computed final steps;
linear, quadratic or Spectrum's forecast; the linear at 0.7 of its trend, of the feature or the model's
output) at the call budgets of the targets, ranked by the open
loop's error and checked closed loop. Figures of dynamics on a small proxy, not Krea-2 quality.

    python -m benchmarks.forecast_error                 # both regimes, writes results/forecast_error.json
    python -m benchmarks.forecast_error --regimes turbo --no-search
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import itertools
import json
import math
import statistics
from pathlib import Path

import torch

from devkit.comfy_harness import find_comfyui, load_pack, use_comfyui_in_process
from devkit.krea2_prompts import PROXY_MODEL, TURBO_PROXY_MODEL

BENCH_DIR = Path(__file__).resolve().parent

PACK = load_pack().__name__   # imports no ComfyUI
image_compare = importlib.import_module(f"{PACK}.adapters.image_compare")
feature_forecast = importlib.import_module(f"{PACK}.adapters.forecast.feature_forecast")
forecast_schedule = importlib.import_module(f"{PACK}.adapters.forecast.forecast_schedule")
forecast_settings = importlib.import_module(f"{PACK}.adapters.forecast.forecast_settings")
Forecaster, FeatureHistory = feature_forecast.Forecaster, feature_forecast.FeatureHistory
ForecastSchedule, ForecastSettings = forecast_schedule.ForecastSchedule, forecast_settings.ForecastSettings

RESULTS = BENCH_DIR / "results" / "forecast_error.json"
# (steps, CFG, the model it samples): the peer benchmark's regimes (benchmarks/peers/cases.py).
REGIMES = {"turbo": (8, 1.0, TURBO_PROXY_MODEL), "raw": (52, 3.5, PROXY_MODEL)}
# The settings the peer benchmark measures (benchmarks/peers/cases.py), by regime.
NAMED = {"turbo": ("turbo_5_of_8", "turbo_4_of_8", "spectrum_paper", "spectrum_paper_fast"),
         "raw": ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52", "spectrum_paper", "spectrum_paper_fast")}
LINEAR_WINDOWS = {"turbo": (2.0, 3.0, 4.0), "raw": (3.0, 4.0, 6.0, 8.0)}
# A preset as it was before a change to it, measured beside it: what the change bought, step by step.
BEFORE = {"turbo": {"turbo_4_of_8 forecasting the feature (before)": ("turbo_4_of_8", Forecaster("linear", extrapolation=0.6))}}
# The targets' call budgets: 4 of 8 calls; at least 4x fewer calls of 52 (at most 13 computed).
BUDGETS = {"turbo": 4, "raw": 13}
# The search's best by open-loop score, sampled through the node (at 8 steps: all of them, they are few).
CLOSED_LOOP_CANDIDATES = {"turbo": 60, "raw": 8}


def linear_window(n: float) -> ForecastSettings:
    return ForecastSettings("custom", Forecaster("linear"), ForecastSchedule(2, n, 0.0, 1))


def settings_for(regime: str) -> dict[str, ForecastSettings]:
    named = {name: ForecastSettings.from_preset(name) for name in NAMED[regime]}
    before = {name: ForecastSettings("custom", forecast, ForecastSettings.from_preset(preset).schedule)
              for name, (preset, forecast) in BEFORE.get(regime, {}).items()}
    return {**named, **before, **{f"linear N {n:g}": linear_window(n) for n in LINEAR_WINDOWS[regime]}}


# --- open loop: the node's fit on the true features ------------------------------------------------

def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in float64."""
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm()) if b.norm() > 0 else (0.0 if a.norm() == 0 else math.inf)


def open_loop_errors(features: list[torch.Tensor], mask, forecast: Forecaster,
                     part=None) -> dict[int, float]:
    """Per forecast step, the relative error of the forecast the node's fit makes from the true features of
    the steps computed before it (``mask[step]`` true: computed), in the node's order: a step the schedule
    forecasts is computed while the history holds too few points (``ForecastRun._reason``). ``part``
    picks what is compared (e.g. the image tokens); the whole feature by default."""
    history = FeatureHistory(forecast, len(features))
    errors = {}
    for step, feature in enumerate(features):
        if mask[step] or not history.ready:
            history.add(step, feature)
            continue
        guess = history.forecast(step)
        errors[step] = relative(guess if part is None else part(guess), feature if part is None else part(feature))
    return errors


def consecutive_change(features: list[torch.Tensor], part=None) -> list[float | None]:
    """Per step, ||f_s - f_(s-1)|| / ||f_(s-1)|| (None at the first step): how far the step moves the feature."""
    pick = part or (lambda f: f)
    return [None] + [relative(pick(features[s]), pick(features[s - 1])) for s in range(1, len(features))]


def open_loop(reference: list["Sampled"], settings: ForecastSettings, img_tokens: int) -> dict:
    """Per forecast step, the open-loop error of ``settings`` on what its target forecasts, mean over the images."""
    per_image = [ref.forecast_target(settings.forecast) for ref in reference]
    steps = len(per_image[0])
    mask = settings.schedule.computed(steps)
    image_part = lambda f: f[:, -img_tokens:]  # noqa: E731  (no reference latents: the image tokens are last)
    whole = [open_loop_errors(features, mask, settings.forecast) for features in per_image]
    image = [open_loop_errors(features, mask, settings.forecast, image_part) for features in per_image]
    forecast_steps = sorted(whole[0])
    mean = lambda runs, s: statistics.mean(run[s] for run in runs)  # noqa: E731
    return {"mask": [int(m) for m in mask], "computed": steps - len(forecast_steps),
            "forecast_steps": forecast_steps,
            "rel_err": {s: mean(whole, s) for s in forecast_steps},
            "rel_err_img": {s: mean(image, s) for s in forecast_steps},
            "rel_err_img_per_image": {s: [run[s] for run in image] for s in forecast_steps}}


def open_loop_score(result: dict, sigmas: list[float]) -> float:
    """A ranking of schedules: each forecast step's image-token error weighted by the step's sigma decrement
    (an Euler step moves the latent by the velocity times it)."""
    return sum(err * (sigmas[s] - sigmas[s + 1]) for s, err in result["rel_err_img"].items())


def candidate_settings(regime: str) -> list[ForecastSettings]:
    """The schedules the node can run at the regime's call budget, each with the forecasts it offers."""
    steps, budget = REGIMES[regime][0], BUDGETS[regime]
    warmups, finals = (1, 2, 3), (0, 1, 2)
    windows = (2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0) if regime == "turbo" else tuple(x / 2 for x in range(4, 17))
    growths = (0.0, 0.5, 1.0) if regime == "turbo" else (0.0, 0.25, 0.5, 0.75, 1.0)
    forecasts = (Forecaster("linear"), Forecaster("quadratic"), Forecaster("spectrum", 4, 0.1, 0.5),
                 Forecaster("spectrum", 2, 0.1, 0.5), Forecaster("linear", extrapolation=0.7),
                 Forecaster("linear", extrapolation=0.7, target="output"))
    low = budget if regime == "turbo" else budget - 1
    seen, out = set(), []
    for warmup, window, growth, final in itertools.product(warmups, windows, growths, finals):
        schedule = ForecastSchedule(warmup, window, growth, final)
        for forecast in forecasts:
            mask = effective_mask(schedule.computed(steps), forecast)
            if low <= sum(mask) <= budget and (mask, forecast) not in seen:
                seen.add((mask, forecast))
                out.append(ForecastSettings("custom", forecast, schedule))
    return out


def effective_mask(mask, forecast: Forecaster) -> tuple[int, ...]:
    """The steps the node computes: the schedule's, and those it forecasts while the history is too short."""
    out, points = [], 0
    for computed in mask:
        compute = bool(computed) or points < forecast.min_points
        points += compute
        out.append(int(compute))
    return tuple(out)


def describe(settings: ForecastSettings) -> str:
    f, s = settings.forecast, settings.schedule
    kind = f.forecast if f.forecast != "spectrum" else f"spectrum m{f.chebyshev_degree} w{f.blend_w:g}"
    kind += f" at {f.extrapolation:g}" if f.extrapolation != 1.0 else ""
    kind += f" of the {f.target}" if f.target != "feature" else ""
    return f"{kind}, warmup {s.warmup_steps}, N {s.window_size:g}, alpha {s.window_growth:g}, final {s.final_computed_steps}"


# --- sampling in ComfyUI ----------------------------------------------------------------------------

@dataclasses.dataclass
class Sampled:
    latent: torch.Tensor                 # the sampler's output
    x: list[torch.Tensor]                # the latent entering each step
    denoised: list[torch.Tensor]         # the model's denoised prediction at each step
    features: list[torch.Tensor] | None  # the final layer's input, one per model call (uncached only)
    outputs: list[torch.Tensor] | None   # the final layer's output, one per model call (uncached only)

    def forecast_target(self, forecast: Forecaster) -> list[torch.Tensor]:
        """What a forecast of ``forecast.target`` forecasts: the features or the outputs."""
        return self.outputs if forecast.target == "output" else self.features


def node_preset(settings: ForecastSettings) -> dict:
    """The Forecast node's ``preset`` input that runs ``settings``: the name, with its inputs where it has any."""
    if settings.preset == "custom":
        return {"preset": "custom", **dataclasses.asdict(settings.forecast), **dataclasses.asdict(settings.schedule)}
    if settings.preset == "auto":
        return {"preset": "auto", "speedup": settings.schedule.speedup}
    return {"preset": settings.preset}


class ProxySampler:
    """The proxy in ComfyUI, in this process: the peer benchmark's graph (class conditioning, zeroed negative,
    128x128 euler/simple) sampled uncached or through the forecasting node."""

    def __init__(self, checkpoint: Path):
        import comfy.sd

        from devkit.krea2_proxy import SETTINGS

        self.model = comfy.sd.load_diffusion_model(str(checkpoint))
        self.tokens = SETTINGS.tokens
        registry = importlib.import_module(f"{PACK}.adapters.families.registry")
        target = registry.resolve(self.model.model.diffusion_model, registry.FORECAST_SCOPE)
        self.final_layer = getattr(self.model.model.diffusion_model, target.family.final_layer)
        self.node = importlib.import_module(f"{PACK}.nodes").CacheDiTSpectrum
        self.node.hidden = type("Hidden", (), {"unique_id": "forecast-error"})()

    def sigmas(self, steps: int) -> list[float]:
        import comfy.samplers

        sampling = self.model.get_model_object("model_sampling")
        return [float(s) for s in comfy.samplers.calculate_sigmas(sampling, "simple", steps)]

    def image_tokens(self, latent: torch.Tensor) -> int:
        patch = self.model.model.diffusion_model.patch
        return (latent.shape[-2] // patch) * (latent.shape[-1] // patch)

    def inputs(self, image: tuple[int, int]):
        import comfy.sample

        from devkit.krea2_proxy import class_conditioning

        label, seed = image
        context = class_conditioning(label)
        positive, negative = [[context, {}]], [[torch.zeros_like(context), {}]]
        latent = comfy.sample.fix_empty_latent_channels(self.model, torch.zeros(1, 4, 16, 16))  # EmptyLatentImage 128
        return positive, negative, latent, comfy.sample.prepare_noise(latent, seed)

    def patched(self, settings: ForecastSettings):
        """The proxy through the Forecast node, its ``preset`` input set to run ``settings``."""
        return self.node.execute(self.model, node_preset(settings)).args[0]

    def sample(self, image, steps: int, cfg: float, settings: ForecastSettings | None) -> Sampled:
        import comfy.sample

        positive, negative, latent, noise = self.inputs(image)
        xs, denoised, features, outputs = [], [], [], []

        def callback(step, x0, x, total):
            xs.append(x.detach().clone())
            denoised.append(x0.detach().clone())

        model, hooks = self.model, []
        if settings is None:
            hooks = [self.final_layer.register_forward_pre_hook(lambda module, args: features.append(args[0].detach().clone())),
                     self.final_layer.register_forward_hook(lambda module, args, out: outputs.append(out.detach().clone()))]
        else:
            model = self.patched(settings)
        try:
            out = comfy.sample.sample(model, noise, steps, cfg, "euler", "simple", positive, negative, latent,
                                      disable_pbar=True, seed=image[1], callback=callback)
        finally:
            for hook in hooks:
                hook.remove()
        if settings is None and len(features) != steps:
            raise RuntimeError(f"expected one model call per step ({steps}), the final layer ran {len(features)} "
                               "times: this script reads CFG 1 or a batched cond/uncond call")
        return Sampled(out, xs, denoised, *((features, outputs) if settings is None else (None, None)))


def mae_255(image: torch.Tensor, reference: torch.Tensor) -> float:
    """The mean absolute difference of two decoded images, on the 0-255 scale (the compare node's)."""
    return image_compare.mae_255_and_mse(image, reference)[0]


def closed_loop_run(sampler: ProxySampler, images, reference: list[Sampled], steps: int, cfg: float,
                    settings: ForecastSettings, decode) -> dict:
    """The node's run per image against the uncached one: per step the latent's and the denoised prediction's
    relative error (mean over images), and the decoded image's MAE/255."""
    x_err, d_err, maes = [[] for _ in range(steps)], [[] for _ in range(steps)], []
    for image, ref in zip(images, reference):
        run = sampler.sample(image, steps, cfg, settings)
        for s in range(steps):
            x_err[s].append(relative(run.x[s], ref.x[s]))
            d_err[s].append(relative(run.denoised[s], ref.denoised[s]))
        maes.append(mae_255(decode(run.latent), decode(ref.latent)))
    return {"x_rel_err": [statistics.mean(e) for e in x_err], "denoised_rel_err": [statistics.mean(e) for e in d_err],
            "mae_255": statistics.mean(maes), "mae_255_per_image": maes}


# --- the report --------------------------------------------------------------------------------------

def table(name: str, regime: dict, row: dict) -> list[str]:
    ol, cl = row["open_loop"], row.get("closed_loop")
    head = f"{name}: {ol['computed']}/{len(ol['mask'])} computed"
    if cl:
        head += f", MAE {cl['mae_255']:.2f}/255 (closed loop)"
    lines = [head, "  step  sigma   what      err   err_img  change  | x_err  den_err"]
    for s, computed in enumerate(ol["mask"]):
        what = "computed" if s not in ol["rel_err"] else "forecast"
        err = f"{ol['rel_err'][s]:6.3f} {ol['rel_err_img'][s]:7.3f}" if what == "forecast" else " " * 14
        change = regime[CHANGE_KEY[row["target"]]][s]
        change = f"{change:6.3f}" if change is not None else "     -"
        closed = f"  | {cl['x_rel_err'][s]:5.3f}  {cl['denoised_rel_err'][s]:6.3f}" if cl else ""
        lines.append(f"  {s:4d}  {regime['sigmas'][s]:5.3f}  {what:8s} {err}  {change}{closed}")
    return lines


def rounded(value):
    if isinstance(value, float):
        return round(value, 5)
    if isinstance(value, dict):
        return {str(k): rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def write_results(path, results: dict) -> None:
    """A benchmark's results as strict JSON, floats to five places, one line per value."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(rounded(results), indent=1, allow_nan=False) + "\n")


def comfyui_in_process() -> Path:
    """ComfyUI imported into this process on one thread, as the in-process benchmarks sample; its root."""
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    use_comfyui_in_process(comfy_root)
    torch.set_num_threads(1)
    return comfy_root


# Per target, the regime's key for how far each step moves what it forecasts (image tokens).
CHANGE_KEY = {"feature": "change_img", "output": "change_img_output"}


def run_regime(sampler: ProxySampler, regime: str, images, decode, search: bool, progress=print) -> dict:
    steps, cfg, _ = REGIMES[regime]
    reference = [sampler.sample(image, steps, cfg, None) for image in images]
    img_tokens = sampler.image_tokens(reference[0].latent)
    sigmas = sampler.sigmas(steps)
    image_part = lambda f: f[:, -img_tokens:]  # noqa: E731
    out = {"steps": steps, "cfg": cfg, "images": [list(i) for i in images], "sigmas": sigmas,
           "feature_shape": list(reference[0].features[0].shape),
           "output_shape": list(reference[0].outputs[0].shape), "image_tokens": img_tokens}
    for target, key in CHANGE_KEY.items():
        changes = [consecutive_change(ref.forecast_target(Forecaster(target=target)), image_part) for ref in reference]
        out[key] = [None] + [statistics.mean(c[s] for c in changes) for s in range(1, steps)]
    out.update({"settings": {}, "search": []})
    for name, settings in settings_for(regime).items():
        row = {"describe": describe(settings), "target": settings.forecast.target,
               "open_loop": open_loop(reference, settings, img_tokens)}
        row["open_loop"]["score"] = open_loop_score(row["open_loop"], sigmas)
        row["closed_loop"] = closed_loop_run(sampler, images, reference, steps, cfg, settings, decode)
        out["settings"][name] = row
        progress("\n".join(table(name, out, row)))
    if search:
        ranked = []
        for settings in candidate_settings(regime):
            result = open_loop(reference, settings, img_tokens)
            ranked.append((open_loop_score(result, sigmas), settings, result))
        ranked.sort(key=lambda item: item[0])
        progress(f"{regime}: {len(ranked)} runnable schedules at the call budget; best by open-loop score:")
        for score, settings, result in ranked[:CLOSED_LOOP_CANDIDATES[regime]]:
            closed = closed_loop_run(sampler, images, reference, steps, cfg, settings, decode)
            entry = {"describe": describe(settings), "forecast": dataclasses.asdict(settings.forecast),
                     "schedule": dataclasses.asdict(settings.schedule), "computed": result["computed"],
                     "computed_steps": [s for s in range(steps) if s not in result["rel_err"]], "score": score,
                     "rel_err_img": result["rel_err_img"], "closed_loop": closed}
            out["search"].append(entry)
            progress(f"  {entry['describe']} ({entry['computed']} computed): computed {entry['computed_steps']}, score {score:.4f}, "
                     f"max img err {max(result['rel_err_img'].values()):.3f}, MAE {closed['mae_255']:.2f}/255")
        best = min(out["search"], key=lambda entry: entry["closed_loop"]["mae_255"])
        progress(f"{regime}: lowest closed-loop MAE of the search: {best['describe']}, computed "
                 f"{best['computed_steps']}, MAE {best['closed_loop']['mae_255']:.2f}/255")
    return out


def regime_build(model: str, comfy_root: Path, builds: dict):
    """The build behind a regime's model file name (``REGIMES``), from its cache, once per run."""
    if model not in builds:
        from devkit.krea2_proxy import ensure_proxy
        from devkit.krea2_turbo_proxy import ensure_turbo_proxy

        builds[model] = {PROXY_MODEL: ensure_proxy, TURBO_PROXY_MODEL: ensure_turbo_proxy}[model](comfy_root)
    return builds[model]


def regime_record(model: str, build, cfg: float, **measured) -> dict:
    """A regime's entry in a results file: its model, the build it ran on (whose weights a test holds to the
    pinned ones) and its CFG, then what was measured."""
    return {"model": model, "proxy": build.checkpoint.parent.name, "weights_sha256": build.info["weights_sha256"],
            "cfg": cfg, **measured}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--regimes", default=",".join(REGIMES), help="turbo, raw or both (comma-separated)")
    parser.add_argument("--images", type=int, default=3, help="how many of the peer benchmark's images (as it: 3)")
    parser.add_argument("--no-search", action="store_true", help="only the named settings, no schedule search")
    parser.add_argument("--json", default=str(RESULTS))
    args = parser.parse_args(argv)
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    unknown = set(args.regimes.split(",")) - set(REGIMES)
    if unknown:
        parser.error(f"--regimes: unknown {sorted(unknown)}; choose from {sorted(REGIMES)}")
    from benchmarks.peers.cases import IMAGES

    use_comfyui_in_process(comfy_root)
    torch.set_num_threads(1)
    images = IMAGES[:args.images]
    builds = {}
    results = {"proxy": regime_build(PROXY_MODEL, comfy_root, builds).checkpoint.parent.name,
               "images": [list(i) for i in images],
               "note": "small trained Krea-2 proxies on procedural images (8 steps: the Turbo proxy distilled for "
                       "them; 52 steps: the trained proxy, whose codec decodes both): dynamics, not Krea-2 quality",
               "regimes": {}}
    with torch.inference_mode():
        for regime in args.regimes.split(","):
            model = REGIMES[regime][2]
            build = regime_build(model, comfy_root, builds)
            out = run_regime(ProxySampler(build.checkpoint), regime, images, build.decode, not args.no_search,
                             progress=lambda text: print(text, flush=True))
            results["regimes"][regime] = {"model": model, "proxy": build.checkpoint.parent.name, **out}
    results["builds"] = {build.checkpoint.parent.name: {"weights_sha256": build.info["weights_sha256"]}
                         for build in builds.values()}
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(rounded(results), indent=1, allow_nan=False))


if __name__ == "__main__":
    main()
