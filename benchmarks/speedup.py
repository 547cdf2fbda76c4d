"""Krea-2 Cache-DiT, side by side: the same sampling with and without the cache, in one run.

Default (no arguments): the small trained Krea-2 proxies sampled on the CPU through the real ComfyUI
server when one is found (see the README for how it is found), Turbo-like (8 steps, CFG 1) on the Turbo
proxy distilled for them (devkit/krea2_turbo_proxy.py) and Raw-like (52 steps, CFG 3.5) on the trained
proxy (devkit/krea2_proxy.py); both built once, about 13 and 11 minutes on 2 CPU cores, then cached;
with the node's defaults, step masks, TaylorSeer and a threshold sweep. Their
images are decoded (one codec), so the cost of caching is measured as MAE/255 and PSNR of the cached image
against the uncached one (a small model on procedural images: dynamics, not Krea-2 quality).
``--random`` samples a mid-size seeded-random Krea-2 instead (speed at a larger shape; random
weights never cache at the default threshold); without ComfyUI the benchmark samples that one
through the pack's adapters and a diffusers Krea-2 directly. Prints, per setting: cached steps,
the ideal speedup (transformer block evaluations without the cache / with it, counting the
blocks cache-dit always computes), the measured wall-clock speedup, their ratio, and how far the
cached result is from the uncached one.

With ``--model PATH`` it samples a real Krea-2 checkpoint (ComfyUI's
"Load Diffusion Model" format) on the GPU when there is one, with the node's
defaults and with step masks, so a user can pick settings for their card.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import os
import statistics
import tempfile
import time
from pathlib import Path

from devkit.comfy_harness import COMPILE_ROUTE, ComfyServer, find_comfyui, load_pack, prompt_error
from devkit.krea2_prompts import (FORECAST_CUSTOM_DEFAULTS, PROXY_MODEL, TURBO_PROXY_MODEL, krea2_prompt,
                                  proxy_prompt, with_forecast)
from benchmarks.spread import (MIN_REPEATS, Spread, above_ideal, at_least, caching_efficiency, keep_repeating,
                               paired_ratios, show, spread, within)

load_pack()  # imports no ComfyUI: for the pack's own image metric, the one the compare node reports
from krea2_cachedit.adapters.image_compare import mae_255_and_mse, psnr_from_mse  # noqa: E402

STATS_ROUTE = "/krea2_cachedit/stats"
LATENT_NODE, CACHE_NODE = "7", "5"   # krea2_prompt's SaveLatent and Krea2CacheDiT
NODE_NAME = "Krea-2 Cache-DiT"       # the node the adapters-only runs speak for

# Mid-size: blocks dominate the cost like in the full 12.9B model, small enough for a CPU.
MID_SIZE = dict(features=1024, layers=12, heads=8, kvheads=2, txtdim=160, txtlayers=4)


@dataclasses.dataclass
class Case:
    name: str
    steps: int
    cfg: float
    cache: dict | None      # Krea2CacheDiT inputs; None = the graph without the node
    compile_backend: str | None = None  # TorchCompileModel before the cache node; None = eager
    # The whole-call forecasting node instead of the DBCache one (``with_forecast``'s arguments: a preset,
    # or "custom" and its settings); ``cache`` is then {} (the node is there).
    forecast: dict | None = None
    # The proxy table's model file name (PROXY_MODEL or TURBO_PROXY_MODEL); None where the run names one model.
    model: str | None = None


OFF = {"residual_diff_threshold": 0.0}  # the node with caching off: the uncached run, timed by the node


def forecast(name: str, steps: int, cfg: float, preset: str) -> Case:
    return Case(name, steps, cfg, {}, forecast={"preset": preset})


def default_cases(steps: int, cfg: float, raw: bool, compile_backend: str | None = None) -> list[Case]:
    cases = [
        Case("uncached", steps, cfg, None),
        Case("caching off", steps, cfg, OFF),
        Case("node defaults", steps, cfg, {}),
        Case("steps_mask fast", steps, cfg, {"steps_mask": "fast"}),
        Case("steps_mask ultra", steps, cfg, {"steps_mask": "ultra"}),
        forecast("forecast turbo_5_of_8", steps, cfg, "turbo_5_of_8"),
    ]
    if raw:
        cases += [Case("raw uncached", 52, 3.5, None), Case("raw caching off", 52, 3.5, OFF),
                  Case("raw node defaults", 52, 3.5, {}), Case("raw steps_mask medium", 52, 3.5, {"steps_mask": "medium"}),
                  forecast("raw forecast raw_1_in_4", 52, 3.5, "raw_1_in_4")]
    if compile_backend:
        cases = [dataclasses.replace(c, name=f"compiled {c.name}", compile_backend=compile_backend) for c in cases]
    return cases


PROXY_THRESHOLDS = (0.12, 0.32, 0.48)  # the sweep around the default 0.24
FEWER_STEPS = "fewer steps: euler"      # plain euler at fewer steps, no node (its case names: "... euler 5")


FORECAST_PRESETS = {8: ("turbo_5_of_8", "turbo_4_of_8"), 52: ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52", "spectrum_paper")}


# The proxy table's regimes: (case name prefix, steps, CFG, step masks, the model): Turbo-like on the Turbo
# proxy (distilled for 8 steps at CFG 1, as Krea-2 Turbo is), Raw-like on the trained proxy.
PROXY_REGIMES = (("", 8, 1.0, ("fast", "ultra"), TURBO_PROXY_MODEL),
                 ("raw ", 52, 3.5, ("medium", "fast"), PROXY_MODEL))


def proxy_cases() -> list[Case]:
    """Turbo-like and Raw-like runs of the proxies: defaults, masks, TaylorSeer, a threshold sweep, the
    whole-call forecasting node's presets, and plain euler at the model calls of the masks and presets,
    each regime on its model (``PROXY_REGIMES``)."""
    cases = []
    for prefix, steps, cfg, masks, model in PROXY_REGIMES:
        regime = [Case(f"{prefix}uncached", steps, cfg, None), Case(f"{prefix}caching off", steps, cfg, OFF),
                  Case(f"{prefix}node defaults", steps, cfg, {}),
                  Case(f"{prefix}defaults + TaylorSeer", steps, cfg, {"calibrator": "taylorseer"})]
        regime += [Case(f"{prefix}steps_mask {mask}", steps, cfg, {"steps_mask": mask}) for mask in masks]
        regime += [Case(f"{prefix}threshold {t:g}", steps, cfg, {"residual_diff_threshold": t})
                   for t in PROXY_THRESHOLDS]
        regime += [forecast(f"{prefix}forecast {preset}", steps, cfg, preset) for preset in FORECAST_PRESETS[steps]]
        cases += [dataclasses.replace(c, model=model) for c in regime + fewer_steps_cases(regime, prefix)]
    return cases


def planned_calls(case: Case) -> int | None:
    """The model calls a case computes when they are fixed before it runs (the pack's own plans): every
    step without the node or with caching off, the steps a step mask or a forecast schedule computes;
    None where a threshold decides as the run goes."""
    from krea2_cachedit.adapters.dbcache.settings import build_step_mask
    from krea2_cachedit.adapters.forecast.auto_schedule import AUTO, DEFAULT_SPEEDUP, auto_calls
    from krea2_cachedit.adapters.forecast.forecast_schedule import ForecastSchedule
    from krea2_cachedit.adapters.forecast.forecast_settings import CUSTOM, ForecastSettings

    if case.cache is None:
        return case.steps
    if case.forecast is not None:
        if case.forecast["preset"] == AUTO:   # its calls follow from the speedup asked for, on any step count
            return auto_calls(case.steps, case.forecast.get("speedup", DEFAULT_SPEEDUP))
        if case.forecast["preset"] != CUSTOM:
            return sum(ForecastSettings.from_preset(case.forecast["preset"]).schedule.computed(case.steps))
        custom = {**FORECAST_CUSTOM_DEFAULTS, **case.forecast}
        return sum(ForecastSchedule(custom["warmup_steps"], custom["window_size"], custom["window_growth"],
                                    custom["final_computed_steps"]).computed(case.steps))
    if case.cache.get("steps_mask", "none") != "none":   # "static": a masked step is served whatever the threshold
        try:
            return sum(build_step_mask(case.cache["steps_mask"], case.steps))
        except ValueError:   # no mask for this step count: the node runs on its threshold alone
            return None
    return case.steps if case.cache.get("residual_diff_threshold") == 0.0 else None


def fewer_steps_cases(cases: list[Case], prefix: str = "") -> list[Case]:
    """Plain euler (no node) at each call count below the full steps that one regime's cases (same steps,
    CFG and model) fix in advance: the first thing a user tries to sample faster, at as many model calls
    as the cached rows it stands beside."""
    steps, cfg, model = cases[0].steps, cases[0].cfg, cases[0].model
    counts = {planned_calls(c) for c in cases} - {None, steps}
    return [Case(f"{prefix}{FEWER_STEPS} {n}", n, cfg, None, model=model) for n in sorted(counts, reverse=True)]


def reference_case(name: str) -> str:
    """The uncached case a case is compared with: same workload, same compile."""
    prefix = "compiled " if name.startswith("compiled ") else ""
    return f"{prefix}{'raw ' if 'raw ' in name else ''}uncached"


# --- through the real ComfyUI ------------------------------------------------------------

def execution_seconds(entry: dict) -> float:
    stamps = {kind: data["timestamp"] for kind, data in entry["status"]["messages"]}
    return (stamps["execution_success"] - stamps["execution_start"]) / 1000.0


@dataclasses.dataclass
class PromptRun:
    seconds: float          # ComfyUI's own execution time of the prompt
    latent: object          # the final latent (torch.Tensor)
    stats: dict | None      # the Cache-DiT node's record of this prompt; None without the node


def run_prompt(server: ComfyServer, prompt: dict, timeout: float = 600.0) -> PromptRun:
    """Queue one prompt, wait for it, and read its time, latent and (when cached) its stats record."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id, timeout)
    if prompt_error(entry):
        raise RuntimeError(f"{prompt_error(entry)}\n{server.log_tail()}")
    stats = server.stats_for(prompt_id, CACHE_NODE)[0] if CACHE_NODE in prompt else None
    return PromptRun(execution_seconds(entry), server.saved_latent(entry, LATENT_NODE), stats)


def relative_l2(latent, reference) -> float:
    return float((latent.float() - reference.float()).norm() / reference.float().norm())


def run_comfyui(args, comfy_root: Path) -> list[dict]:
    load_pack()
    from devkit.krea2_synthetic import Krea2Shape, save_native_checkpoint

    base = ComfyServer.prepare_base_dir(Path(tempfile.mkdtemp(prefix="krea2_bench_")))
    proxy = None
    if args.model:
        link = base / "models" / "diffusion_models" / Path(args.model).name
        link.symlink_to(Path(args.model).resolve())
        model_name, features = link.name, 12 * 2560  # the native krea2 text encoder's layout
    elif not args.random:
        from devkit.krea2_proxy import ensure_proxy
        from devkit.krea2_turbo_proxy import ensure_turbo_proxy

        proxy = ensure_proxy(comfy_root)   # its codec decodes both regimes' images
        (base / "models" / "diffusion_models" / PROXY_MODEL).symlink_to(proxy.checkpoint)
        (base / "models" / "diffusion_models" / TURBO_PROXY_MODEL).symlink_to(ensure_turbo_proxy(comfy_root).checkpoint)
        model_name, features = PROXY_MODEL, proxy.settings.context_features
    else:
        shape = Krea2Shape(**MID_SIZE)
        model_name, features = "krea2_bench.safetensors", shape.context_features
        print(f"Generating a mid-size Krea-2 ({MID_SIZE}) ...", flush=True)
        save_native_checkpoint(base / "models" / "diffusion_models" / model_name, shape, seed=0)
    server = ComfyServer(comfy_root, base, cpu=not args.gpu).start()
    try:
        return measure(server, args, model_name, features, proxy)
    finally:
        server.stop()


def case_prompt(case: Case, model_name: str, features: int, seed: int, size: int, tokens: int,
                proxy=None) -> dict:
    if proxy is not None:  # each repeat samples another class of the proxy's data set, on the case's model
        prompt = proxy_prompt(label=seed % 8, cfg=case.cfg, steps=case.steps, cache=case.cache, seed=seed,
                              model=case.model or PROXY_MODEL, prefix=f"bench_{case.name.replace(' ', '_')}")
    else:
        prompt = krea2_prompt(cfg=case.cfg, steps=case.steps, cache=case.cache, seed=seed, size=size,
                              model=model_name, pos_tokens=tokens, neg_tokens=tokens,
                              prefix=f"bench_{case.name.replace(' ', '_')}", compile_backend=case.compile_backend)
        for node in ("2", "3"):
            prompt[node]["inputs"]["features"] = features
    return with_forecast(prompt, **case.forecast) if case.forecast is not None else prompt


def measure(server: ComfyServer, args, model_name: str, features: int, proxy=None) -> list[dict]:
    cases = proxy_cases() if proxy is not None else default_cases(args.steps, args.cfg, args.raw,
                                                                  "inductor" if args.compile else None)
    if proxy is not None and args.compile:
        cases = [dataclasses.replace(c, name=f"compiled {c.name}", compile_backend="inductor") for c in cases]
    results = {c.name: {"case": c, "times": [], "latents": [], "stats": []} for c in cases}
    print("Warming up (model load, first runs) ...", flush=True)
    for case in cases:
        run_prompt(server, case_prompt(case, model_name, features, 10_000, args.size, args.tokens, proxy))
    compiled_after_warmup = server.get(COMPILE_ROUTE) if args.compile else None

    def run_case(case: Case, rep: int):
        run = run_prompt(server, case_prompt(case, model_name, features, rep, args.size, args.tokens, proxy))
        return run.seconds, run.latent, run.stats

    repeat_until_stable(cases, run_case, results, args)
    if compiled_after_warmup is not None:
        # The cache's per-step decisions must not make torch.compile compile again once warm.
        print(f"torch.compile after the warm-up: {compiled_after_warmup}; after every timed run: "
              f"{server.get(COMPILE_ROUTE)}", flush=True)
    return summarize(results, proxy.decode if proxy is not None else None)


def repeat_until_stable(cases: list, run_case, results: dict, args) -> int:
    """Timed repeats, every case once per repeat in alternating order (drift, thermal or background
    load, hits every case alike), until each row's wall speedup is stable or ``args.budget`` seconds
    are spent; at least ``args.repeats``. ``run_case(case, rep)`` returns (seconds, latent, stats)."""
    started, rep = time.monotonic(), 0
    while keep_repeating(rep, list(wall_spreads(results).values()), time.monotonic() - started, args.budget,
                         min_repeats=args.repeats):
        for case in (cases if rep % 2 == 0 else list(reversed(cases))):
            seconds, latent, stats = run_case(case, rep)
            result = results[case.name]
            result["times"].append(seconds)
            result["latents"].append((rep, latent))
            result["stats"].append(stats)
        rep += 1
        widest = max(wall_spreads(results).items(), key=lambda kv: kv[1].half_width, default=None)
        print(f"repeat {rep}: " + (f"widest spread +-{widest[1].half_width:.1%} ({widest[0]}), " if rep >= 2 and widest
                                   else "") + f"{time.monotonic() - started:.0f} s of {args.budget:g} s", flush=True)
    return rep


def wall_spreads(results: dict) -> dict[str, Spread]:
    """Each case's wall speedup (its uncached time over its own, repeat by repeat): median and spread."""
    spreads = {}
    for name, result in results.items():
        reference = results[reference_case(name)]
        if result is not reference and result["times"]:
            spreads[name] = spread(paired_ratios(reference["times"], result["times"]))
    return spreads


def image_errors(latents: list, references: list, decode) -> tuple[float, float]:
    """Mean MAE (0-255 scale) and PSNR (dB) of the decoded images against the uncached ones, same seeds."""
    maes, psnrs = [], []
    for (_, latent), (_, reference) in zip(sorted(latents, key=lambda t: t[0]), sorted(references, key=lambda t: t[0])):
        mae, mse = mae_255_and_mse(decode(latent), decode(reference))
        maes.append(mae)
        psnrs.append(psnr_from_mse(mse, cap=math.inf))  # uncapped: identical images read inf
    return statistics.mean(maes), statistics.mean(psnrs)


def summarize(results: dict, decode=None) -> list[dict]:
    rows = []
    walls = wall_spreads(results)
    for name, result in results.items():
        case = result["case"]
        reference = results[reference_case(name)]
        time_ = statistics.median(result["times"])
        deviation = max(relative_l2(lat, ref)
                        for (_, lat), (_, ref) in zip(sorted(result["latents"], key=lambda t: t[0]),
                                                      sorted(reference["latents"], key=lambda t: t[0])))
        stats = result["stats"][-1]
        mae, psnr = image_errors(result["latents"], reference["latents"], decode) if decode else (None, None)
        # Without the node: the uncached run's block evaluations over its own (fewer steps: fewer of them).
        ideal = stats["ideal_speedup"] if stats else reference["case"].steps / case.steps
        wall = Spread(1.0, 1.0, 1.0) if result is reference else walls[name]
        caching_off = results.get(reference_case(name).replace("uncached", "caching off"))
        estimate = estimate_error(result, caching_off)
        baseline = caching_off or reference  # without a caching-off case: the graph without the node
        # What caching returns of the blocks it skips: a row of the node's only (fewer steps skip none).
        efficiency = caching_efficiency(result["times"], baseline["times"], ideal) if stats and ideal > 1.0 else None
        rows.append({"case": name, "steps": case.steps, "cfg": case.cfg, "seconds": time_,
                     "cached": f"{len(stats['skipped_steps'])}/{stats['steps']}" if stats else "-",
                     "cfg_mode": stats["cfg_mode"] if stats else "-", "ideal": ideal, "wall": wall.median,
                     "efficiency": efficiency.median if efficiency else None, "deviation": deviation, "mae_255": mae,
                     "psnr_db": psnr, "reference": result is reference, "repeats": len(result["times"]),
                     "planned_calls": planned_calls(case), "uncached": reference_case(name),
                     "wall_spread": wall, "efficiency_spread": efficiency,
                     "estimate_error": estimate.median if estimate is not None else None, "estimate_spread": estimate})
    return rows


def estimate_error(result: dict, caching_off: dict | None) -> Spread | None:
    """How far the node's estimate of the uncached time is from the uncached time it measured.

    A cached run estimates what it would have taken uncached (``estimated_uncached_s``); the same
    graph with caching off measures that (its ``duration_s``, the same span of the run), paired
    repeat by repeat.
    """
    if not caching_off or result is caching_off or not all(result["stats"]) or not all(caching_off["stats"]):
        return None
    estimated = [s["estimated_uncached_s"] for s in result["stats"]]
    measured = [s["duration_s"] for s in caching_off["stats"]]
    return spread(paired_ratios(estimated, measured)).shifted(-1.0)


# --- through the adapters only (no ComfyUI) -----------------------------------------------

def run_adapters(args) -> list[dict]:
    import torch

    load_pack()
    from krea2_cachedit.adapters.families import registry
    from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
    from krea2_cachedit.adapters.record.run_record import RunMeta, build
    from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run
    from krea2_cachedit.adapters.sampling.step_clock import StepClock
    from devkit.krea2_synthetic import Krea2Shape, diffusers_transformer

    shape = Krea2Shape(**MID_SIZE)
    print(f"No ComfyUI found: sampling a mid-size diffusers Krea-2 ({MID_SIZE}) through the adapters.", flush=True)
    transformer = diffusers_transformer(shape, seed=0)
    side = args.size // 16
    sigmas = torch.linspace(1.0, 0.0, args.steps + 1)

    def sample(settings: DBCacheSettings | None, seed: int):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(1, side * side, shape.channels * 4, generator=g)
        context = torch.randn(1, args.tokens, shape.txtlayers, shape.txtdim, generator=g)
        ids = torch.zeros(args.tokens + side * side, 3)
        ids[args.tokens:, 1] = torch.arange(side * side) // side
        ids[args.tokens:, 2] = torch.arange(side * side) % side
        run = None
        target, clock = registry.resolve(transformer), StepClock(sigmas)
        if settings is not None:
            run = CacheRun(target, plan_run(settings, clock.steps, target.num_blocks, NODE_NAME), clock, conds_per_step=1,
                           node_name=NODE_NAME)
        started = time.perf_counter()
        with torch.inference_mode(), (run if run else contextlib.nullcontext()):
            for i in range(args.steps):
                # The same prompt on every call: the run may reuse its text path (as ComfyUI's uuids allow).
                text = (("prompt",), context)
                with (run.model_call(sigmas[i], [0], [x.shape], text=text) if run else contextlib.nullcontext()):
                    v = transformer(x, context, sigmas[i:i + 1], ids).sample
                x = x + (sigmas[i + 1] - sigmas[i]) * v
        elapsed = time.perf_counter() - started
        record = build(run.outcome(), RunMeta(node_name=NODE_NAME)) if run else None
        return elapsed, x, (record.as_dict() if record else None)

    cases = {"uncached": None, "caching off": DBCacheSettings(residual_diff_threshold=0.0),
             "node defaults": DBCacheSettings(), "steps_mask fast": DBCacheSettings(steps_mask="fast"),
             "steps_mask ultra": DBCacheSettings(steps_mask="ultra")}
    results = {name: {"case": Case(name, args.steps, 1.0, {} if s else None), "times": [], "latents": [],
                      "stats": []} for name, s in cases.items()}
    print("Warming up (first runs) ...", flush=True)
    for name, settings in cases.items():
        sample(settings, seed=10_000)  # warm-up
    repeat_until_stable([results[name]["case"] for name in cases],
                        lambda case, rep: sample(cases[case.name], seed=rep), results, args)
    return summarize(results)


def print_table(rows: list[dict], where: str):
    repeats = max((r.get("repeats", 0) for r in rows), default=0)
    print(f"\nKrea-2 Cache-DiT speedup ({where}); medians of {repeats} side-by-side repeats, +- the "
          f"farther quartile of the per-repeat ratios:")
    images = any(r.get("mae_255") is not None for r in rows)
    header = (f"{'setting':<31}{'steps':>6}{'cfg':>5}{'mode':>9}{'cached':>8}{'s/run':>8}{'ideal':>7}{'wall':>7}"
              f"{'spread':>9}{'wall/ideal':>11}{'deviation':>11}{'est. error':>17}"
              + (f"{'MAE/255':>9}{'PSNR dB':>9}" if images else ""))
    print(header)
    print("-" * len(header))
    for r in rows:
        estimate = r.get("estimate_spread")
        error = "-" if estimate is None else f"{estimate.median:+.1%}+-{estimate.half_range:.1%}"
        wall = r["wall_spread"]
        spread_ = "-" if r.get("reference") else f"+-{wall.half_width:.1%}"
        efficiency = ("-" if r["efficiency_spread"] is None else
                      "noise?" if above_ideal(r["efficiency_spread"]) else f"{r['efficiency']:.0%}")
        print(f"{r['case']:<31}{r['steps']:>6}{r['cfg']:>5g}{r['cfg_mode']:>9}{r['cached']:>8}{r['seconds']:>8.2f}"
              f"{r['ideal']:>6.2f}x{r['wall']:>6.2f}x{spread_:>9}{efficiency:>11}{r['deviation']:>11.4f}{error:>17}"
              + (f"{r['mae_255']:>9.2f}{r['psnr_db']:>9.1f}" if images else ""))
    print("ideal = block evaluations without the cache / with it; wall/ideal = the speedup over the same graph "
          "with caching off (the node's own per-call cost and its text-path reuse are in both) as a share of the "
          "ideal, for rows that cache; wall = uncached time / cached time, median of "
          "the per-repeat ratios (compiled cases: against compiled uncached); spread = the distance from that median to "
          "the farther quartile of those ratios (relative), so the spread's range holds the middle half of the repeats; deviation = relative L2 distance of the final latent from the uncached one "
          "(same seed); fewer steps: euler without the node at as many steps as a cached row computes model calls, its "
          "ideal the uncached run's steps over its own; est. error = the node's estimate of the uncached run time against the same graph with "
          "caching off, with its spread in points." + (" MAE/255 and PSNR: the decoded image against the "
          "uncached one (mean over the repeats; a small trained proxy on procedural images: dynamics, not "
          "Krea-2 quality)." if images else ""))
    for r in rows:
        if r["efficiency_spread"] is not None and above_ideal(r["efficiency_spread"]):
            low, high = r["efficiency_spread"].bounds
            print(f"noise? {r['case']}: wall speedup {low:.0%}-{high:.0%} of its ideal: faster than the "
                  f"blocks it skips allow, a measurement problem (a busy machine), not a result; rerun "
                  f"with a larger --budget or on a quieter machine.")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", help="a real Krea-2 checkpoint (native format); sampled on the GPU")
    parser.add_argument("--gpu", action="store_true", help="let ComfyUI use the GPU")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--cfg", type=float, default=1.0)
    parser.add_argument("--size", type=int, default=256, help="image side in pixels")
    parser.add_argument("--tokens", type=int, default=32, help="conditioning tokens")
    parser.add_argument("--repeats", type=int, default=MIN_REPEATS,
                        help="the fewest timed repeats; more follow until every row's spread is within +-3%% "
                             "or --budget is spent")
    parser.add_argument("--budget", type=float, default=240.0,
                        help="seconds of timed repeats after which no more are started (default 240)")
    parser.add_argument("--raw", action="store_true", help="also run Krea-2 Raw settings (52 steps, CFG 3.5)")
    parser.add_argument("--adapters-only", action="store_true", help="skip ComfyUI even when it is found")
    parser.add_argument("--random", action="store_true",
                        help="a mid-size seeded-random Krea-2 instead of the trained proxy (--steps, --cfg, --raw, "
                             "--size and --tokens apply to it)")
    parser.add_argument("--compile", action="store_true",
                        help="every case behind ComfyUI's TorchCompileModel (inductor), before the node")
    parser.add_argument("--threads", type=int,
                        help="CPU threads of the sampling (the ComfyUI server's OMP_NUM_THREADS too); default 1 on "
                             "the CPU: with another job on one of the cores, two threads wait on each other; 0 "
                             "leaves torch's default (one per core)")
    args = parser.parse_args(argv)
    if args.model:
        args.gpu = True
    if args.threads is None:
        args.threads = 0 if args.gpu else 1
    return args


def use_threads(threads: int):
    """Intra-op CPU threads for this process and for the ComfyUI server it starts (torch reads
    OMP_NUM_THREADS when it starts); 0 leaves torch's default.

    One thread by default: on a 2-core machine with another job on a core, two threads of one
    sampling wait on each other at every operation (an 8-step run of the mid-size model took 92 s
    with two threads, 25 s with one, side by side on the same busy machine)."""
    if threads:
        import torch

        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(threads)
        torch.set_num_threads(threads)


def threads_label(args) -> str:
    return f"{args.threads} thread{'s' if args.threads > 1 else ''}" if args.threads else "torch's default threads"


def main(argv=None):
    args = parse_args(argv)
    use_threads(args.threads)
    comfy_root = None if args.adapters_only else find_comfyui()
    if comfy_root is None and args.model:
        raise SystemExit("--model needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    if comfy_root is not None:
        print(f"Using ComfyUI at {comfy_root}", flush=True)
    proxy_built = True
    if comfy_root is not None and not (args.model or args.random):
        missing = unbuilt_proxies()
        proxy_built = not missing
        if missing:
            print(f"Not built yet: {' and '.join(missing)}. First the seeded-random model's table (a few minutes), "
                  f"then the builds (cached for later runs) and the proxies' table.", flush=True)
    rows = []
    for model in demo_models(args, comfy_root is not None, proxy_built):
        rows = run_model(args, model, comfy_root)
    return rows


def unbuilt_proxies() -> list[str]:
    """The proxy table's builds its cache lacks, each with its rough build time: the trained proxy (the
    52-step rows') and the Turbo proxy distilled from it (the 8-step rows')."""
    from devkit import krea2_proxy
    from devkit import krea2_turbo_proxy

    missing = []
    if not krea2_proxy.is_built():
        missing.append(f"the trained Krea-2 proxy (trained once, about {krea2_proxy.EXPECTED_BUILD_MINUTES} minutes "
                       f"on 2 CPU cores)")
    if not krea2_turbo_proxy.is_built():
        missing.append(f"the Turbo proxy (distilled from it once, about {krea2_turbo_proxy.EXPECTED_BUILD_MINUTES} "
                       f"minutes on 2 CPU cores)")
    return missing


def demo_models(args, comfy_found: bool, proxy_built: bool) -> list[str]:
    """What one demo run samples, in order: without the proxy built, the seeded-random model first, so
    the first table comes in minutes instead of after the proxy's build."""
    if not comfy_found:
        return ["adapters"]
    if args.model:
        return ["model"]
    if args.random:
        return ["random"]
    return ["proxy"] if proxy_built else ["random", "proxy"]


def run_model(args, model: str, comfy_root: Path | None) -> list[dict]:
    if model == "adapters":
        rows = run_adapters(args)
        where = (f"adapters only, CPU, {threads_label(args)}, generated mid-size seeded-random Krea-2 (the proxy "
                 f"needs ComfyUI)")
    else:
        args = argparse.Namespace(**{**vars(args), "random": model == "random"})
        rows = run_comfyui(args, comfy_root)
        name = {"model": f"model {args.model}", "random": "generated mid-size seeded-random Krea-2",
                "proxy": "small trained Krea-2 proxies, 128x128: 8 steps on the Turbo proxy, 52 on the trained "
                         "proxy"}[model]
        where = f"ComfyUI, {'GPU' if args.gpu else f'CPU, {threads_label(args)}'}, {name}"
    print_table(rows, where)
    fewer = fewer_steps_lines(rows)
    if fewer:
        print("\nAgainst fewer steps, at as many model calls (what a user tries first to sample faster):")
        print("\n".join(fewer))
    print_checks(rows)
    return rows


def fewer_steps_lines(rows: list[dict]) -> list[str]:
    """Each caching row whose model calls are fixed in advance, beside plain euler at as many calls: both
    MAEs against the uncached image of the same seeds (a proxy's MAE only: the images must be decoded)."""
    euler = {(r["uncached"], r["steps"]): r for r in rows if FEWER_STEPS in r["case"]}
    lines = []
    for r in rows:
        fewer = euler.get((r["uncached"], r["planned_calls"]))
        if r["efficiency_spread"] is None or fewer is None or r["mae_255"] is None:
            continue
        closer = "the cached row" if r["mae_255"] < fewer["mae_255"] else "fewer steps"
        lines.append(f"{r['case']}: {r['planned_calls']} of {r['steps']} calls computed, MAE {r['mae_255']:.2f}/255; "
                     f"euler at {fewer['steps']} steps: MAE {fewer['mae_255']:.2f}/255, {fewer['wall']:.2f}x wall "
                     f"(closer to the uncached image: {closer})")
    return lines


# What the pack promises, checked on every benchmark run; a verdict only where the row's spread
# lies wholly on one side of the margin, else "undecided" with the spread.
ESTIMATE_TOLERANCE = 0.15     # the node's "estimated uncached" against the measured uncached run
CACHED_EFFICIENCY_FLOOR = 0.90  # wall-clock speedup of a cached case as a share of its ideal


def check_lines(rows: list[dict]) -> list[str]:
    lines = []
    for r in rows:
        estimate = r.get("estimate_spread")
        if estimate is not None:
            verdict = show(within(estimate, ESTIMATE_TOLERANCE), estimate, points=True)
            lines.append(f"check: {r['case']}: time estimate {estimate.median:+.1%} "
                         f"(within {ESTIMATE_TOLERANCE:.0%}: {verdict})")
        efficiency = r["efficiency_spread"]
        if efficiency is not None:   # a caching row (fewer steps have an ideal, and no caching to judge)
            verdict = ("noise? (faster than its ideal: not a result)" if above_ideal(efficiency)
                       else show(at_least(efficiency, CACHED_EFFICIENCY_FLOOR), efficiency))
            lines.append(f"check: {r['case']}: {efficiency.median:.0%} of the ideal speedup over caching off "
                         f"(at least {CACHED_EFFICIENCY_FLOOR:.0%}: {verdict})")
    return lines


def print_checks(rows: list[dict]):
    for line in check_lines(rows):
        print(line)


if __name__ == "__main__":
    main()
