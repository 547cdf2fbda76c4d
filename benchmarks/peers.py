"""Krea-2 Cache-DiT against ComfyUI's own step caches, EasyCache and LazyCache: image quality at equal speed.

ComfyUI ships ``EasyCache`` and ``LazyCache`` (``comfy_extras/nodes_easycache.py``): they work on
any model, Krea-2 included, by skipping whole model calls. This benchmark samples the small trained
Krea-2 proxy (tests/krea2_proxy.py) through the real ComfyUI server on the CPU with each of them
and with this pack's node, the same seeds and graphs in one run, Turbo-like (8 steps, CFG 1) and
Raw-like (52 steps, CFG 3.5, cond and uncond batched):

- uncached (the reference), and the node with caching off (what it costs when it caches nothing);
- the node: its defaults within a threshold sweep, the same sweep with a shorter warmup and no cap
  on cached steps in a row, the step masks, each calibrator over the threshold sweep, and each
  calibrator on each step mask (a mask fixes which steps are served, the calibrator how);
- EasyCache and LazyCache over a sweep of ``reuse_threshold`` (their default start and end), their
  model given its own copy of its input latent (the test node ``Krea2TestOwnModelInput``) as it has
  on a GPU in bf16, where ComfyUI's cast to the compute dtype copies it: EasyCache's skipped step
  adds its cached difference into that input in place, and with float32 compute (this CPU) the
  input is the tensor ComfyUI then computes the denoised latent from, which ruins the image. One
  row of EasyCache as it runs here without the copy shows that.

Every case is warmed up once, then each repeat runs every case on every image (class and seed of
the proxy), the order of the cases reversed every other repeat, so drift on a shared machine hits
every case alike. Per case: cached (the node) or skipped (a peer) steps, the ideal speedup (the
node: transformer block evaluations without the cache / with it, counting the blocks cache-dit
always computes; a peer: model calls without it / with it), the wall-clock speedup (median
uncached time / median time, ComfyUI's own execution times), and MAE/255 and PSNR of the decoded
image against the uncached image of the same seed. Then, per regime: at each peer setting, the
node setting with the lowest MAE among those at least as fast (within 5%).

The node's own cost (caching off with the text path on every call, against no node) is a margin of
1%, below what one repeat varies on a CPU: after the table, no node, caching off and that case run
back to back ``--own-cost-repeats`` times (30), and its check reads the median of the per-repeat
ratios with a 95% confidence interval (``spread.median_interval``).

It writes ``peers.json`` (the table) and ``peers.png`` (wall-clock speedup against MAE, one curve
per method) to ``benchmarks/results/``, and prints the table as Markdown for the README. A small
model on procedural images: figures of **dynamics on the proxy, not Krea-2 quality**.

    python benchmarks/peers.py                 # the full run (about 20 minutes on one CPU thread)
    python benchmarks/peers.py --quick         # a handful of cases, one image, to see it work
    python benchmarks/peers.py --replot        # the written table compared and plotted again
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import os
import re
import statistics
import sys
import tempfile
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from speedup import Case, run_prompt  # noqa: E402  (also puts devkit/ on the path and loads the pack)
from spread import (CONFIDENCE, Spread, at_least, caching_efficiency, interval_at_least, median_interval,  # noqa: E402
                    paired_ratios, show, spread)

from krea2_cachedit.adapters.image_compare import mae_255_and_mse, psnr_from_mse  # noqa: E402
from krea2_cachedit.adapters.strict_json import dumps as strict_json  # noqa: E402

from comfy_harness import ComfyServer, find_comfyui, load_pack  # noqa: E402
import krea2_costs  # noqa: E402
from projection import GPU_CALL_S, UNCACHED, add_projection  # noqa: E402
from projection import OFF_FULL_TEXT as CACHING_OFF_FULL_TEXT  # noqa: E402
from krea2_prompts import PROXY_MODEL, proxy_prompt  # noqa: E402

RESULTS_DIR = BENCH_DIR / "results"
COSTS = krea2_costs.RESULTS   # Krea-2's component costs at real size, for the projection
PEER_NODE = "20"  # the EasyCache / LazyCache node, between the loader and the KSampler
FULL_TEXT_NODE = "22"  # the pass-through model_function_wrapper before the node (CACHING_OFF_FULL_TEXT)
# The core nodes' own defaults besides the threshold (their reuse_threshold default is 0.2).
PEER_DEFAULTS = {"start_percent": 0.15, "end_percent": 0.95, "verbose": False}
REGIMES = {"turbo": (8, 1.0), "raw": (52, 3.5)}
EQUAL_SPEED = 0.05  # wall-clock speedups within 5% count as equal

# UNCACHED and CACHING_OFF_FULL_TEXT (the node with caching off and the text path on every call: its
# own per-call cost) are named in projection.py, which prices rows by them.
CACHING_OFF = "Cache-DiT caching off"  # the node with threshold 0: what the node costs when it caches nothing
THRESHOLD = "Cache-DiT threshold"  # the node's defaults, threshold swept
FREE_THRESHOLD = "Cache-DiT threshold, warmup 2, no run cap"
MASKS = "Cache-DiT step masks"
CALIBRATORS = ("taylorseer", "foca", "dmd")
FREE_TAYLORSEER = "Cache-DiT + taylorseer, warmup 2, no run cap"
EASYCACHE, LAZYCACHE = "EasyCache", "LazyCache"
PEERS = (EASYCACHE, LAZYCACHE)
# EasyCache as it runs when the model computes in the latent's own dtype (float32, as on this CPU):
# its skipped step adds the cached difference into the model's input in place, and ComfyUI computes
# the denoised latent from that same tensor. Shown for the record; not a setting anyone would pick.
EASYCACHE_IN_PLACE = "EasyCache in place (fp32 compute)"
OWN_INPUT_NODE = "21"  # Krea2TestOwnModelInput, before the peer node
NODE_DEFAULT_THRESHOLD = 0.24

NODE_THRESHOLDS = (0.08, 0.12, 0.16, 0.24, 0.32, 0.48)
FREE_THRESHOLDS = (0.08, 0.12, 0.16, 0.24, 0.32, 0.48)
FREE = {"max_warmup_steps": 2, "max_continuous_cached_steps": -1}
CALIBRATOR_THRESHOLDS = (0.12, 0.24, 0.48)
MASK_POLICIES = ("medium", "fast", "ultra")
PEER_THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.5)
PEER_DEFAULT_THRESHOLD = 0.2

# Images: (class of the proxy's data set, seed); classes of both colour schemes and several shapes.
IMAGES = ((0, 0), (5, 1), (2, 2), (7, 3))
WARMUP_IMAGE = (1, 10_000)


def calibrator_method(name: str) -> str:
    return f"Cache-DiT + {name}"


@dataclasses.dataclass
class PeerCase(Case):
    regime: str = "turbo"
    method: str = UNCACHED   # the curve this case belongs to
    setting: str = ""        # what varies along that curve
    peer: dict | None = None  # {"class_type": "EasyCache" or "LazyCache", its inputs}; None: no peer node
    # The peer's model gets its own copy of its input latent (Krea2TestOwnModelInput), as on a GPU in
    # bf16 where ComfyUI's cast to the compute dtype copies: EasyCache writes into that input.
    own_input: bool = True
    # A pass-through model_function_wrapper before the node: the text path is computed on every call.
    full_text: bool = False


def case(regime: str, method: str, setting: str = "", cache: dict | None = None,
         peer: dict | None = None) -> PeerCase:
    steps, cfg = REGIMES[regime]
    name = " ".join(part for part in (regime, method, setting) if part)
    return PeerCase(name, steps, cfg, cache, regime=regime, method=method, setting=setting, peer=peer)


def peer_case(regime: str, peer: str, threshold: float, own_input: bool = True) -> PeerCase:
    made = case(regime, peer if own_input else EASYCACHE_IN_PLACE, f"{threshold:g}",
                peer={"class_type": peer, "reuse_threshold": threshold, **PEER_DEFAULTS})
    made.own_input = own_input
    return made


def full_cases(regimes=tuple(REGIMES)) -> list[PeerCase]:
    cases = []
    for regime in regimes:
        cases += [case(regime, UNCACHED), *caching_off_cases(regime)]
        cases += [case(regime, THRESHOLD, f"{t:g}", {"residual_diff_threshold": t}) for t in NODE_THRESHOLDS]
        cases += [case(regime, FREE_THRESHOLD, f"{t:g}", {"residual_diff_threshold": t, **FREE})
                  for t in FREE_THRESHOLDS]
        cases += [case(regime, MASKS, mask, {"steps_mask": mask}) for mask in MASK_POLICIES]
        cases += [case(regime, f"{MASKS} + {c}", mask, {"steps_mask": mask, "calibrator": c})
                  for c in CALIBRATORS for mask in MASK_POLICIES]
        cases += [case(regime, calibrator_method(c), f"{t:g}", {"residual_diff_threshold": t, "calibrator": c})
                  for c in CALIBRATORS for t in CALIBRATOR_THRESHOLDS]
        cases += [case(regime, FREE_TAYLORSEER, f"{t:g}", {"residual_diff_threshold": t, "calibrator": "taylorseer",
                                                          **FREE}) for t in CALIBRATOR_THRESHOLDS]
        cases += [peer_case(regime, peer, t) for peer in PEERS for t in PEER_THRESHOLDS]
        cases.append(peer_case(regime, EASYCACHE, PEER_DEFAULT_THRESHOLD, own_input=False))
    return cases


def caching_off_cases(regime: str) -> list[PeerCase]:
    """The node caching nothing: with its text-path reuse, and with the text path on every call."""
    full_text = case(regime, CACHING_OFF_FULL_TEXT, "0", {"residual_diff_threshold": 0.0})
    full_text.full_text = True
    return [case(regime, CACHING_OFF, "0", {"residual_diff_threshold": 0.0}), full_text]


def quick_cases() -> list[PeerCase]:
    """A handful of Turbo-like cases: one of each kind of method."""
    return [case("turbo", UNCACHED), *caching_off_cases("turbo"),
            case("turbo", THRESHOLD, f"{NODE_DEFAULT_THRESHOLD:g}", {}),
            case("turbo", calibrator_method("taylorseer"), f"{NODE_DEFAULT_THRESHOLD:g}", {"calibrator": "taylorseer"}),
            peer_case("turbo", EASYCACHE, 0.2), peer_case("turbo", EASYCACHE, 1.2),
            peer_case("turbo", LAZYCACHE, 0.2), peer_case("turbo", LAZYCACHE, 1.2),
            peer_case("turbo", EASYCACHE, PEER_DEFAULT_THRESHOLD, own_input=False)]


def is_node_default(row: dict) -> bool:
    return row["method"] == THRESHOLD and row["setting"] == f"{NODE_DEFAULT_THRESHOLD:g}"


# --- running one case ------------------------------------------------------------------------------

def case_prompt(case: PeerCase, label: int, seed: int) -> dict:
    """The proxy prompt, with the node (``case.cache``) or a peer node (``case.peer``) on the model."""
    prompt = proxy_prompt(label=label, cfg=case.cfg, steps=case.steps, cache=case.cache, seed=seed,
                          prefix=f"peers_{case.name.replace(' ', '_').replace(',', '')}")
    if case.peer is not None:
        inputs = {k: v for k, v in case.peer.items() if k != "class_type"}
        model = ["1", 0]
        if case.own_input:
            prompt[OWN_INPUT_NODE] = {"class_type": "Krea2TestOwnModelInput", "inputs": {"model": model}}
            model = [OWN_INPUT_NODE, 0]
        prompt[PEER_NODE] = {"class_type": case.peer["class_type"], "inputs": {"model": model, **inputs}}
        prompt["6"]["inputs"]["model"] = [PEER_NODE, 0]
    if case.full_text:
        prompt[FULL_TEXT_NODE] = {"class_type": "Krea2TestModelFunctionWrapper", "inputs": {"model": ["1", 0]}}
        prompt["5"]["inputs"]["model"] = [FULL_TEXT_NODE, 0]
    return prompt


# What EasyCache and LazyCache log when a sampling run ends (easycache_sample_wrapper).
PEER_SUMMARY = re.compile(r"(EasyCache|LazyCache) - skipped (\d+)/(\d+) steps")


def peer_skipped(log: str, peer: str) -> tuple[int, int]:
    """Skipped and total steps from the log a prompt wrote: exactly one sampling run, of ``peer``."""
    found = PEER_SUMMARY.findall(log)
    if len(found) != 1 or found[0][0] != peer:
        raise RuntimeError(f"expected one {peer} summary line in this prompt's log, found {found}:\n{log[-3000:]}")
    return int(found[0][1]), int(found[0][2])


@dataclasses.dataclass
class Sample:
    seconds: float
    latent: object   # torch.Tensor
    skipped: int     # steps the node served from its cache, or the peer skipped
    steps: int
    ideal: float
    # What the projection to Krea-2's size needs (projection.py): model calls, those the node's cache
    # served (its always-computed blocks only), text path computations, always-computed blocks.
    calls: int = 0
    cached_calls: int = 0
    text_computed: int = 0
    always_blocks: int = 0


def node_sample(seconds: float, latent, stats: dict) -> Sample:
    blocks = stats["block_evals_uncached"] // max(stats["calls"], 1)
    text = stats.get("text_path") or {"computed": stats["calls"]}
    settings = stats["settings"]
    return Sample(seconds, latent, len(stats["cached_steps"]), stats["steps"], stats["ideal_speedup"],
                  calls=stats["calls"], cached_calls=sum(1 for call in stats["call_log"] if call[3] < blocks),
                  text_computed=text["computed"],
                  always_blocks=settings["Fn_compute_blocks"] + settings["Bn_compute_blocks"])


def run_case(server: ComfyServer, case: PeerCase, image: tuple[int, int]) -> Sample:
    label, seed = image
    log_start = server.log_path.stat().st_size if server.log_path.exists() else 0
    run = run_prompt(server, case_prompt(case, label, seed))
    if run.stats is not None:
        if run.stats["status"] != "ok":
            raise RuntimeError(f"{case.name}: the node did not cache this run: {run.stats}")
        return node_sample(run.seconds, run.latent, run.stats)
    if case.peer is not None:
        with open(server.log_path, "rb") as log:
            log.seek(log_start)
            skipped, steps = peer_skipped(log.read().decode(errors="replace"), case.peer["class_type"])
        if steps != case.steps:
            raise RuntimeError(f"{case.name}: {case.peer['class_type']} reports {steps} steps, the prompt has "
                               f"{case.steps}")
        return Sample(run.seconds, run.latent, skipped, steps, steps / (steps - skipped) if steps > skipped else math.inf,
                      calls=steps, text_computed=steps - skipped)
    return Sample(run.seconds, run.latent, 0, case.steps, 1.0, calls=case.steps, text_computed=case.steps)


# --- the side-by-side run --------------------------------------------------------------------------

def measure(server: ComfyServer, cases: list[PeerCase], images, repeats: int, decode, warmup: bool = True,
            progress=print) -> list[dict]:
    """Every case on every image, ``repeats`` times in alternating order; one summary row per case."""
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"case names must be unique: {names}")
    times = {c.name: [] for c in cases}
    samples = {c.name: {} for c in cases}   # image -> its samples, one per repeat
    if warmup:
        progress(f"Warming up {len(cases)} cases ...")
        for c in cases:
            run_case(server, c, WARMUP_IMAGE)
    for rep in range(repeats):
        progress(f"Repeat {rep + 1}/{repeats} ...")
        order = cases if rep % 2 == 0 else cases[::-1]
        for image in images:
            for c in order:
                sample = run_case(server, c, image)
                times[c.name].append(sample.seconds)
                samples[c.name].setdefault(tuple(image), []).append(sample)
    return summarize(cases, times, samples, decode)


# The node's own cost is a margin of 1%: no single repeat shows it on a CPU whose runs vary by a few
# percent, but the median of many tightly interleaved pairs does (spread.median_interval).
OWN_COST_PAIRS = 30


def own_cost_cases(cases: list[PeerCase], regime: str) -> list[PeerCase]:
    """No node, the node caching nothing, and the same with the text path on every call."""
    methods = (UNCACHED, CACHING_OFF, CACHING_OFF_FULL_TEXT)
    return [next(c for c in cases if c.regime == regime and c.method == m) for m in methods]


def measure_own_cost(server: ComfyServer, cases: list[PeerCase], images, pairs: int, progress=print) -> dict:
    """Per regime: the three cases of ``own_cost_cases`` back to back, ``pairs`` times (order reversed every
    other time, the images taken in turn), so each repeat's times are seconds apart and the node's
    own cost is read from the median of per-repeat ratios. Cases already warmed up by ``measure``."""
    result = {}
    for regime in dict.fromkeys(c.regime for c in cases):
        trio = own_cost_cases(cases, regime)
        progress(f"The node's own cost, {regime}: {pairs} interleaved repeats of {len(trio)} cases ...")
        times = {c.method: [] for c in trio}
        for rep in range(pairs):
            for c in (trio if rep % 2 == 0 else trio[::-1]):
                times[c.method].append(run_case(server, c, images[rep % len(images)]).seconds)
        result[regime] = {"pairs": pairs, "times": times}
    return result


def own_cost_interval(times: dict, method: str) -> Spread:
    """Wall speedup of ``method`` over no node (below 1: it costs), median of the per-repeat ratios, with
    its confidence interval."""
    return median_interval(paired_ratios(times[UNCACHED], times[method]))


def reference_of(cases: list[PeerCase], regime: str) -> PeerCase:
    (reference,) = [c for c in cases if c.regime == regime and c.method == UNCACHED]
    return reference


def summarize(cases: list[PeerCase], times: dict, samples: dict, decode) -> list[dict]:
    import torch

    rows = []
    for c in cases:
        reference = reference_of(cases, c.regime)
        maes, mses, finite = [], [], True
        for image, runs in samples[c.name].items():
            picture, target = decode(runs[-1].latent), decode(samples[reference.name][image][-1].latent)
            finite = finite and bool(torch.isfinite(picture).all())
            mae, mse = mae_255_and_mse(picture, target)
            maes.append(mae)
            mses.append(mse)
        every_run = [s for runs in samples[c.name].values() for s in runs]
        mean_mse = statistics.mean(mses)
        rows.append({
            "case": c.name, "regime": c.regime, "method": c.method, "setting": c.setting,
            "steps": c.steps, "cfg": c.cfg, "inputs": c.peer or c.cache,
            "skipped": [runs[-1].skipped for runs in samples[c.name].values()],
            "skipped_range": [min(s.skipped for s in every_run), max(s.skipped for s in every_run)],
            "ideal": statistics.mean(s.ideal for s in every_run),
            # Model calls without / with: the node's cached step still runs its Fn blocks and the model's
            # embeddings and final layer, a peer's skipped step runs nothing.
            "step_ideal": statistics.mean(s.steps / (s.steps - s.skipped) for s in every_run),
            "seconds": statistics.median(times[c.name]),
            "times": times[c.name],  # per repeat, summed over the images: what the checks pair
            "wall": statistics.median(times[reference.name]) / statistics.median(times[c.name]),
            # Per-repeat ratios against the uncached run of the same repeat and image: median and
            # interquartile range (benchmarks/spread.py), how sure the wall figure is.
            "wall_spread": dataclasses.astuple(spread(paired_ratios(times[reference.name], times[c.name]))),
            "mae_255": statistics.mean(maes), "mae_255_per_image": maes,
            # PSNR of the mean squared error over the images; None when every image is identical.
            "psnr_db": psnr_from_mse(mean_mse, cap=math.inf) if mean_mse > 0 else None,
            "finite": finite, "runs": len(times[c.name]), "images": [list(i) for i in samples[c.name]],
            "calls": statistics.mean(s.calls for s in every_run),
            "cached_calls": statistics.mean(s.cached_calls for s in every_run),
            "text_computed": statistics.mean(s.text_computed for s in every_run),
            "always_blocks": max(s.always_blocks for s in every_run),
        })
    return rows


# --- quality at equal speed ------------------------------------------------------------------------

def best_at_least_as_fast(rows: list[dict], wall: float, tolerance: float = EQUAL_SPEED,
                          key: str = "wall") -> dict | None:
    """The row with the lowest MAE among those whose speedup (``key``: measured ``wall`` or ``projected``)
    is at least ``wall`` (within tolerance)."""
    rivals = [r for r in rows if r[key] >= wall * (1 - tolerance)]
    return min(rivals, key=lambda r: r["mae_255"]) if rivals else None


def is_node(row: dict) -> bool:
    return row["method"].startswith("Cache-DiT")


def compare(challengers: list[dict], field: list[dict], tolerance: float = EQUAL_SPEED,
            key: str = "wall") -> list[dict]:
    """At each challenger setting, the best of ``field`` at least as fast: who has the lower MAE."""
    verdicts = []
    for challenger in challengers:
        best = best_at_least_as_fast(field, challenger[key], tolerance, key)
        verdicts.append({
            "regime": challenger["regime"], "challenger": challenger["case"], "challenger_wall": challenger[key],
            "challenger_mae_255": challenger["mae_255"], "best": best and best["case"],
            "best_wall": best and best[key], "best_mae_255": best and best["mae_255"],
            "winner": ("unmatched" if best is None else "challenger" if challenger["mae_255"] < best["mae_255"] else
                       "tie" if challenger["mae_255"] == best["mae_255"] else "best")})
    return verdicts


def head_to_head(rows: list[dict], tolerance: float = EQUAL_SPEED, key: str = "wall") -> dict:
    """Per regime: each peer setting that skips something against the node's best at least as fast, and
    each node method other than the defaults' own curve against that curve; speed is ``key``."""
    result = {"basis": key, "peers_vs_node": [], "node_methods_vs_defaults": []}
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        node = [r for r in of_regime if is_node(r)]
        peers = [r for r in of_regime if r["method"] in PEERS and max(r["skipped"]) > 0]
        result["peers_vs_node"] += compare(peers, node, tolerance, key)
        defaults_curve = [r for r in node if r["method"] == THRESHOLD]
        others = [r for r in node if r["method"] != THRESHOLD and r["ideal"] > 1.0]
        result["node_methods_vs_defaults"] += compare(others, defaults_curve, tolerance, key)
    result["step_costs"] = step_costs(rows)
    return result


# The node's settings without a calibrator: their seconds against their cached steps are one line.
PLAIN_NODE = (CACHING_OFF, THRESHOLD, FREE_THRESHOLD, MASKS)


def step_costs(rows: list[dict]) -> list[dict]:
    """Per regime, for the node's plain settings and for each peer: a least-squares line through the
    (cached or skipped steps, seconds) of its rows. Its slope is what one more cached step saves; set
    against an uncached step's share of the uncached run, it says what a cached step still costs."""
    costs = []
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        (uncached,) = [r for r in of_regime if r["method"] == UNCACHED]
        for who, methods in (("Cache-DiT", PLAIN_NODE), *((peer, (peer,)) for peer in PEERS)):
            points = [(statistics.mean(r["skipped"]), r["seconds"]) for r in of_regime if r["method"] in methods]
            if len({x for x, _ in points}) < 2:
                continue
            slope, intercept = statistics.linear_regression(*zip(*points))
            costs.append({"regime": regime, "method": who, "settings": len(points), "seconds_at_none": intercept,
                          "saved_per_step_s": -slope, "uncached_per_step_s": uncached["seconds"] / uncached["steps"]})
    return costs


def verdict_lines(comparisons: dict) -> list[str]:
    """What ``head_to_head`` found, one line per peer setting, then a tally per regime and method."""
    lines = []
    for v in comparisons["peers_vs_node"]:
        if v["best"] is None:
            lines.append(f"{v['challenger']}: {v['challenger_wall']:.2f}x, MAE {v['challenger_mae_255']:.2f}; no node "
                         f"setting is as fast")
            continue
        who = {"best": "node wins", "challenger": "peer wins", "tie": "tie"}[v["winner"]]
        lines.append(f"{v['challenger']}: {v['challenger_wall']:.2f}x, MAE {v['challenger_mae_255']:.2f} | best node "
                     f"at least as fast: {v['best']} {v['best_wall']:.2f}x, MAE {v['best_mae_255']:.2f} -> {who}")
    lines.append("")
    for key, challenger_side, field_side in (("peers_vs_node", "the peer", "the node"),
                                             ("node_methods_vs_defaults", "the method", "the defaults' curve")):
        for (regime, method), verdicts in tally(comparisons[key]).items():
            counts = {w: sum(v["winner"] == w for v in verdicts) for w in ("challenger", "best", "tie", "unmatched")}
            lines.append(f"{regime} {method}: {field_side} lower at {counts['best']}, {challenger_side} lower at "
                         f"{counts['challenger']}, tie {counts['tie']}, nothing as fast at {counts['unmatched']} "
                         f"of {len(verdicts)} settings")
    lines.append("")
    for c in comparisons["step_costs"] if comparisons.get("basis", "wall") == "wall" else []:
        lines.append(f"{c['regime']} {c['method']}: one more cached step saves {c['saved_per_step_s'] * 1000:.1f} ms "
                     f"(an uncached run takes {c['uncached_per_step_s'] * 1000:.1f} ms per step; fit over "
                     f"{c['settings']} settings, {c['seconds_at_none']:.3f} s at none cached)")
    return lines


# Targets, checked on every full run (``check:`` lines): what the node's own machinery may cost and
# what a caching row must return of the blocks it skips.
NODE_COST_CEILING = 0.01        # caching off, text path on every call, against no node
CACHING_EFFICIENCY_FLOOR = 0.90  # a caching row's speedup over caching off, as a share of its ideal


def _wall_spread(row: dict) -> Spread:
    return Spread(*row["wall_spread"])


def efficiency_check(row: dict, off: dict) -> str:
    """A caching row's share of its ideal over caching off, judged by the median's confidence interval
    over the table's repeats (5 repeats of 3 images: 15 pairs)."""
    try:
        efficiency = caching_efficiency(row["times"], off["times"], row["ideal"], summary=median_interval)
    except ValueError:  # too few repeats to bound a median (a quick run)
        efficiency = caching_efficiency(row["times"], off["times"], row["ideal"])
        return (f"check: {row['case']}: {efficiency.median:.0%} of its ideal over caching off "
                f"(at least {CACHING_EFFICIENCY_FLOOR:.0%}: undecided ({len(row['times'])} repeats))")
    verdict = interval_at_least(efficiency, CACHING_EFFICIENCY_FLOOR)  # the interval is printed beside it
    return (f"check: {row['case']}: {efficiency.median:.0%} of its ideal over caching off ({CONFIDENCE:.0%} "
            f"interval {efficiency.low:.0%} to {efficiency.high:.0%}; at least {CACHING_EFFICIENCY_FLOOR:.0%}: "
            f"{verdict})")


def own_cost_check(regime: str, measured: dict) -> list[str]:
    """The node's own cost from the interleaved pairs, with a confidence interval that decides the margin;
    the node caching nothing with its text-path reuse beside it (what a user pays with caching off)."""
    full, off = (own_cost_interval(measured["times"], m) for m in (CACHING_OFF_FULL_TEXT, CACHING_OFF))
    verdict = interval_at_least(full, 1 - NODE_COST_CEILING)
    if verdict == "BELOW":  # checked on the wall speedup (at least 0.99x): said of the cost, over 1%
        verdict = "OVER"
    return [f"check: {regime}: the node's own cost (caching off, text path every call) {_cost(full)} over no node "
            f"(at most {NODE_COST_CEILING:.0%}: {verdict}; {measured['pairs']} interleaved repeats)",
            f"{regime}: caching off with the text path reused, over no node: {_cost(off)}"]


def table_own_cost_check(regime: str, row: dict) -> str:
    wall = _wall_spread(row)
    verdict = show(at_least(wall, 1 - NODE_COST_CEILING), wall)
    return (f"check: {regime}: the node's own cost (caching off, text path every call) "
            f"{1 / wall.median - 1:+.1%} over no node (at most {NODE_COST_CEILING:.0%}: {verdict})")


def _cost(interval: Spread) -> str:
    """A wall speedup below 1 as the extra time it means, with its confidence interval."""
    return (f"{1 / interval.median - 1:+.1%} ({CONFIDENCE:.0%} interval {1 / interval.high - 1:+.1%} "
            f"to {1 / interval.low - 1:+.1%})")


def target_checks(rows: list[dict], comparisons: list[dict], own_cost: dict | None = None) -> list[str]:
    """``check:`` lines: the node's own cost and each caching row's share of its ideal, per regime, then
    the race against the peers on each basis (measured wall clock, projected). The own cost comes from
    ``measure_own_cost``'s pairs where the run has them (``own_cost``), else from the rows' repeats."""
    lines = []
    for regime in sorted({r["regime"] for r in rows}):
        of_regime = [r for r in rows if r["regime"] == regime]
        paired = (own_cost or {}).get(regime)
        if paired:
            lines += own_cost_check(regime, paired)
        else:  # a run without the interleaved repeats: the table's own repeats, by their spread
            lines += [table_own_cost_check(regime, r) for r in of_regime if r["method"] == CACHING_OFF_FULL_TEXT]
        off = next(r for r in of_regime if r["method"] == CACHING_OFF)
        for row in of_regime:
            if is_node(row) and row["ideal"] > 1.0:
                # Against caching off, repeat by repeat: the same node, text-path reuse and per-call
                # cost, so the share says what caching returns of the blocks it skips.
                lines.append(efficiency_check(row, off))
    for result in comparisons:
        lines += race_checks(rows, result)
    return lines


def race_checks(rows: list[dict], result: dict) -> list[str]:
    """Per regime: every peer setting that skips met by a node setting at least as fast with a lower MAE,
    and a node setting at least as fast as each peer's fastest."""
    key, lines = result["basis"], []
    basis = "measured" if key == "wall" else "projected"
    for regime in sorted({r["regime"] for r in rows}):
        verdicts = [v for v in result["peers_vs_node"] if v["regime"] == regime]
        won = sum(v["winner"] == "best" for v in verdicts)
        lines.append(f"check: {regime} ({basis}): a faster node setting with a lower MAE at {won} of "
                     f"{len(verdicts)} peer settings ({'ok' if won == len(verdicts) else 'MISSED'})")
        node_fastest = max(r[key] for r in rows if r["regime"] == regime and is_node(r))
        for peer in PEERS:
            peer_rows = [r for r in rows if r["regime"] == regime and r["method"] == peer]
            if peer_rows:
                fastest = max(r[key] for r in peer_rows)
                ok = node_fastest >= fastest * (1 - EQUAL_SPEED)
                lines.append(f"check: {regime} ({basis}): the node's fastest {node_fastest:.2f}x against {peer}'s "
                             f"fastest {fastest:.2f}x ({'ok' if ok else 'MISSED'})")
    return lines


def tally(verdicts: list[dict]) -> dict[tuple[str, str], list[dict]]:
    """Verdicts grouped by regime and the challenger's method (its case name without regime and setting)."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for v in verdicts:
        method = v["challenger"].removeprefix(f"{v['regime']} ").rsplit(" ", 1)[0]
        groups.setdefault((v["regime"], method), []).append(v)
    return groups


# --- outputs ---------------------------------------------------------------------------------------

PEER_STYLE = {EASYCACHE: dict(color="black", linestyle="--"), LAZYCACHE: dict(color="darkgoldenrod", linestyle="--")}
# The panels: wall-clock speedup (what a user gets), and model calls without / with (what each method
# saves in steps, whatever a cached step still costs).
AXES = (("wall", "wall-clock speedup (x, median of alternating repeats)"),
        ("projected", f"PROJECTED speedup on Krea-2 (x; component costs, a call at {GPU_CALL_S * 1000:g} ms)"),
        ("step_ideal", "model calls without / with (x; a node's cached step still runs its Fn block)"))


def plot(rows: list[dict], path: Path, title: str) -> dict[str, list[str]]:
    """MAE/255 against the wall-clock speedup (top) and against the model calls saved (bottom), one
    column per regime, one curve per method; returns the curves drawn per regime."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import matplotlib.ticker

    regimes = [r for r in REGIMES if any(row["regime"] == r for row in rows)]
    panels = [(key, label) for key, label in AXES if all(key in row for row in rows)]
    figure, axes = plt.subplots(len(panels), len(regimes), figsize=(7 * len(regimes), 5 * len(panels) + 1.5),
                                squeeze=False)
    drawn = {}
    for column, regime in enumerate(regimes):
        of_regime = [r for r in rows if r["regime"] == regime]
        methods = list(dict.fromkeys(r["method"] for r in of_regime))
        drawn[regime] = methods
        for line, (key, label) in enumerate(panels):
            axis = axes[line][column]
            for method in methods:
                points = [r for r in of_regime if r["method"] == method]  # in the order of its sweep
                style = (dict(color="black", marker="o", linestyle="none") if method == UNCACHED else
                         dict(marker="s", linewidth=2.4, markersize=6, **PEER_STYLE[method]) if method in PEERS else
                         dict(marker="x", color="grey", linestyle="none", markersize=8)
                         if method == EASYCACHE_IN_PLACE else dict(marker="o", linewidth=1.2, markersize=4))
                axis.plot([r[key] for r in points], [r["mae_255"] for r in points], label=method, **style)
            for row in of_regime:
                if is_node_default(row):
                    axis.plot(row[key], row["mae_255"], marker="*", markersize=15, color="gold",
                              markeredgecolor="black", linestyle="none", label="node defaults")
            steps, cfg = REGIMES[regime]
            axis.set_title(f"{steps} steps, CFG {cfg:g}" + (" (batched)" if cfg > 1 else ""))
            axis.set_xlabel(label)
            axis.set_ylabel("MAE/255 of the decoded image vs uncached")
            axis.set_yscale("symlog", linthresh=1.0)  # linear below 1, logarithmic above
            if key == "step_ideal":  # up to 13x at 52 steps: a log scale keeps the low end readable
                axis.set_xscale("log", base=2)
                axis.xaxis.set_major_formatter(matplotlib.ticker.FormatStrFormatter("%gx"))
            axis.grid(True, alpha=0.3)
        axes[-1][column].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=2)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return drawn


def markdown_table(rows: list[dict]) -> str:
    projected = all("projected" in r for r in rows)
    lines = ["| steps, CFG | method | setting | cached/skipped | s/run | ideal | wall-clock | wall/ideal | MAE/255 | PSNR dB |"
             + (" projected on Krea-2 |" if projected else ""),
             "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if projected else "")]
    for r in rows:
        low, high = r["skipped_range"]
        skipped = f"{low}/{r['steps']}" if low == high else f"{low}-{high}/{r['steps']}"
        psnr = "identical" if r["psnr_db"] is None else f"{r['psnr_db']:.1f}"
        setting = r["setting"] + (" (defaults)" if is_node_default(r) else "")
        lines.append(f"| {r['steps']}, {r['cfg']:g} | {r['method']} | {setting} | {skipped} | {r['seconds']:.3f} | "
                     f"{r['ideal']:.2f}x | {r['wall']:.2f}x | {r['wall'] / r['ideal']:.0%} | {r['mae_255']:.2f} | {psnr} |"
                     + (f" {r['projected']:.2f}x |" if projected else ""))
    return "\n".join(lines)


def conditions(comfy_root: Path, proxy, images, repeats: int, threads: str | None) -> dict:
    import torch

    version = re.search(r'__version__\s*=\s*"([^"]+)"', (comfy_root / "comfyui_version.py").read_text())
    return {"date": datetime.date.today().isoformat(), "comfyui": version.group(1) if version else "unknown",
            "torch": torch.__version__, "device": "CPU", "threads": threads,
            "proxy": proxy.checkpoint.parent.name, "image_size": proxy.settings.image_size, "sampler": "euler/simple",
            "images": [list(i) for i in images], "repeats": repeats,
            "note": "small trained Krea-2 proxy on procedural images: dynamics, not Krea-2 quality"}


def write_results(rows: list[dict], comparisons: dict, info: dict, out_dir: Path,
                  stem: str = "peers", own_cost: dict | None = None) -> tuple[Path, Path, dict[str, list[str]]]:
    """The table as JSON and the plot as PNG; also returns the curves drawn per regime."""
    out_dir.mkdir(parents=True, exist_ok=True)
    json_path, png_path = out_dir / f"{stem}.json", out_dir / f"{stem}.png"
    written = {"conditions": info, "rows": rows, "comparisons": comparisons, "own_cost": own_cost or {}}
    json_path.write_text(strict_json(written, indent=1) + "\n")
    drawn = plot(rows, png_path, f"Krea-2 proxy (small trained model, {info['device']}, {info['threads']} thread(s)), "
                                 f"{info['date']}: proxy figures, dynamics, not Krea-2 quality")
    return json_path, png_path, drawn


def run(args) -> tuple[list[dict], dict]:
    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("This benchmark needs ComfyUI (set COMFYUI_PATH or put ComfyUI at ~/comfy/ComfyUI).")
    if args.threads:
        # The server inherits it: torch reads it at start-up for its intra-op threads.
        os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = str(args.threads)
    load_pack()
    from krea2_proxy import ensure_proxy

    proxy = ensure_proxy(comfy_root)
    cases = quick_cases() if args.quick else full_cases(tuple(args.regimes.split(",")))
    images = IMAGES[:args.images]
    base = ComfyServer.prepare_base_dir(Path(tempfile.mkdtemp(prefix="krea2_peers_")))
    (base / "models" / "diffusion_models" / PROXY_MODEL).symlink_to(proxy.checkpoint)
    server = ComfyServer(comfy_root, base).start()
    try:
        progress = lambda text: print(text, flush=True)  # noqa: E731
        rows = measure(server, cases, images, args.repeats, proxy.decode, progress=progress)
        own_cost = measure_own_cost(server, cases, images, args.own_cost_repeats, progress) \
            if args.own_cost_repeats else None
    finally:
        server.stop()
    info = conditions(comfy_root, proxy, images, args.repeats, os.environ.get("OMP_NUM_THREADS"))
    # A quick run never replaces the full run's figures.
    return report(rows, info, Path(args.out), stem="peers_quick" if args.quick else "peers", own_cost=own_cost)


def report(rows: list[dict], info: dict, out_dir: Path, stem: str = "peers",
           costs_path: Path = COSTS, own_cost: dict | None = None) -> tuple[list[dict], dict]:
    """Compare (measured, and projected when Krea-2's component costs are measured), write the JSON and
    the plot, print the Markdown table, the verdicts and the target checks."""
    comparisons = head_to_head(rows)
    bases = [comparisons]
    if costs_path.exists() and any(r["method"] == CACHING_OFF_FULL_TEXT for r in rows):
        info = {**info, "projection": add_projection(rows, krea2_costs.load(costs_path))}
        comparisons["projected"] = head_to_head(rows, key="projected")
        bases.append(comparisons["projected"])
    json_path, png_path, _ = write_results(rows, comparisons, info, out_dir, stem, own_cost)
    print(markdown_table(rows))
    for result in bases:
        print(f"\nAt each peer setting, the node's best setting at least as fast (within 5%), "
              f"{'measured' if result['basis'] == 'wall' else 'PROJECTED on Krea-2'}:")
        print("\n".join(verdict_lines(result)))
    print()
    print("\n".join(target_checks(rows, bases, own_cost)))
    print(f"\nWrote {json_path} and {png_path}")
    return rows, comparisons


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--images", type=int, default=3, choices=range(1, len(IMAGES) + 1),
                        help="how many of the (class, seed) images each repeat samples")
    parser.add_argument("--regimes", default=",".join(REGIMES), help="turbo, raw or both (comma-separated)")
    parser.add_argument("--quick", action="store_true",
                        help="a handful of Turbo-like cases (what the test tier runs), written as peers_quick.*")
    parser.add_argument("--threads", type=int, default=1,
                        help="CPU threads of the server (OMP_NUM_THREADS; 0 leaves it alone); one thread keeps "
                             "timings steady on a shared machine")
    parser.add_argument("--own-cost-repeats", type=int, default=OWN_COST_PAIRS,
                        help="interleaved repeats of no node / caching off / caching off with the text path on "
                             "every call, after the table, that decide the node's own cost (0: none)")
    parser.add_argument("--out", default=str(RESULTS_DIR), help="folder for peers.json and peers.png")
    parser.add_argument("--replot", action="store_true",
                        help="sample nothing: read the rows of --out's peers.json, compare, plot and print again")
    args = parser.parse_args(argv)
    if args.replot:
        written = json.loads((Path(args.out) / "peers.json").read_text())
        if not all("times" in row for row in written["rows"]):
            parser.error("--replot: this peers.json predates the per-repeat times its checks pair; run the "
                         "benchmark again")
        report(written["rows"], written["conditions"], Path(args.out), own_cost=written.get("own_cost"))
        return
    unknown = set(args.regimes.split(",")) - set(REGIMES)
    if unknown:
        parser.error(f"--regimes: unknown {sorted(unknown)}; choose from {sorted(REGIMES)}")
    run(args)


if __name__ == "__main__":
    main()
