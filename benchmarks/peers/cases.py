"""The peer benchmark's case catalogue: the methods, the settings swept along each, the images.

A case is one graph on a regime's proxy: uncached, through this pack's node (``cache``: its inputs),
through ComfyUI's EasyCache or LazyCache (``peer``), or plain sampling at fewer steps (the first
thing a user tries to sample faster), in a Turbo-like regime (on the Turbo proxy), a Raw-like one
(on the trained proxy), or a Flux one (20 or 28 steps at CFG 3.5 on the Flux proxy, ``devkit/flux_proxy.py``).
Its ``method`` names the curve it belongs to, its ``setting`` what varies along that curve.
"""

from __future__ import annotations

import dataclasses

from benchmarks.speedup import Case, planned_calls
from devkit.krea2_prompts import FLUX_PROXY_MODEL, PROXY_MODEL, TURBO_PROXY_MODEL
from benchmarks.projection import UNCACHED
from benchmarks.projection import OFF_FULL_TEXT as CACHING_OFF_FULL_TEXT


KREA2, FLUX = "Krea-2", "Flux"


@dataclasses.dataclass(frozen=True)
class Regime:
    steps: int
    cfg: float
    # The checkpoint's file name in the server's diffusion_models (__main__.py links each to its checkpoint).
    model: str = PROXY_MODEL
    # Whose dynamics the proxy stands for: only Krea-2 rows are projected onto Krea-2's costs and held to
    # the Krea-2 targets, and each family's run writes its own results (peers.json, peers_flux.json).
    family: str = KREA2


# The core nodes' own defaults besides the threshold (their reuse_threshold default is 0.2).
PEER_DEFAULTS = {"start_percent": 0.15, "end_percent": 0.95, "verbose": False}
# Turbo-like on the Turbo proxy (distilled for 8 steps at CFG 1, as Krea-2 Turbo is), Raw-like on the trained proxy.
# The Flux proxy is a base model sampled with CFG, as Chroma, Flux.2 Klein base and de-distilled Flux.1 are
# run: 20 and 28 steps at CFG 3.5 (cond and uncond batched).
REGIMES = {"turbo": Regime(8, 1.0, TURBO_PROXY_MODEL), "raw": Regime(52, 3.5, PROXY_MODEL),
           "flux20": Regime(20, 3.5, FLUX_PROXY_MODEL, FLUX), "flux28": Regime(28, 3.5, FLUX_PROXY_MODEL, FLUX)}


def regimes_of(family: str) -> tuple[str, ...]:
    return tuple(name for name, regime in REGIMES.items() if regime.family == family)


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
NODE_DEFAULT_THRESHOLD = 0.24
# Whole-call forecasting (the CacheDiTSpectrum node): its named presets, Spectrum as published, a
# sweep of the linear forecast's window (one step in N computed after 2 warmup steps, the last computed),
# and ``auto`` at the speedups a user asks for (it lays its computed steps out on any step count).
FORECAST_PRESETS = "Cache-DiT forecast presets"
SPECTRUM_PUBLISHED = "Cache-DiT Spectrum as published"
FORECAST_LINEAR = "Cache-DiT forecast, linear, window N"
FORECAST_AUTO = "Cache-DiT forecast auto, speedup"
# The Raw presets' schedules are windows of steps, so they run at any step count (at 20 steps 7, 5 and 4
# calls; at 28 8, 7 and 5); the Turbo presets are for 8 steps.
RAW_PRESETS = ("raw_1_in_4", "raw_1_in_5", "raw_8_of_52")
FORECAST_PRESET_NAMES = {"turbo": ("turbo_5_of_8", "turbo_4_of_8"), "raw": RAW_PRESETS,
                         "flux20": RAW_PRESETS, "flux28": RAW_PRESETS}
PUBLISHED_PRESETS = ("spectrum_paper", "spectrum_paper_fast")
LINEAR_WINDOWS = {"turbo": (2.0, 3.0, 4.0), "raw": (3.0, 4.0, 6.0, 8.0), "flux20": (2.0, 3.0, 4.0, 6.0),
                  "flux28": (2.0, 3.0, 4.0, 6.0)}
# Turbo: 4, 5 and 6 of 8 calls (the presets' 4 and 5 among them); the others: the speedups of
# benchmarks/forecast_auto.py's grid.
AUTO_SPEEDUPS = {"turbo": (2.0, 1.6, 8 / 6), "raw": (2.0, 3.0, 4.0, 6.0), "flux20": (2.0, 3.0, 4.0, 6.0),
                 "flux28": (2.0, 3.0, 4.0, 6.0)}

NODE_THRESHOLDS = (0.08, 0.12, 0.16, 0.24, 0.32, 0.48)
FREE_THRESHOLDS = (0.08, 0.12, 0.16, 0.24, 0.32, 0.48)
FREE = {"max_warmup_steps": 2, "max_continuous_cached_steps": -1}
CALIBRATOR_THRESHOLDS = (0.12, 0.24, 0.48)
MASK_POLICIES = ("slow", "medium", "fast", "ultra")
PEER_THRESHOLDS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.8, 1.5)
PEER_DEFAULT_THRESHOLD = 0.2

# Fewer steps: plain euler/simple at the regime's CFG, no node. Its step counts (fewer_steps_cases): every
# call count the node's step masks and forecast schedules fix (the pack's own plans), and FEWER_STEPS_SPAN
# across what the thresholds decide as they run: measured on the proxy, Turbo's threshold rows compute 5-8
# calls, Raw's 16-23 and the peers' 15-34, so the span runs from below the fastest setting to above the
# slowest, denser where the Raw settings crowd. ComfyUI's multistep samplers (one model call per step like
# euler, at CFG 1 and batched CFG: tests/benchmarks/test_peers_benchmark.py counts them) at a few of those
# counts: Turbo's step masks and presets (6, 5, 4); Raw's ultra mask and thresholds (17) and presets (13, 11).
# Flux: nothing was measured before its first run, so its span is dense, from auto's fewest calls (3 at 6x)
# to one below the full steps; its multistep counts: auto at 2x (10 of 20, 14 of 28) and the presets' range.
FEWER_STEPS = "fewer steps, euler"
FEWER_STEPS_SPAN = {"turbo": (7, 6, 5, 4, 3), "raw": (35, 26, 20, 17, 13, 11, 10, 9, 8, 6),
                    "flux20": tuple(range(19, 2, -1)),
                    "flux28": (27, 26, 24, 22, 20, 18, 16, 14, 12, 10, 9, 8, 7, 6, 5, 4, 3)}
MULTISTEP_SAMPLERS = ("dpmpp_2m", "res_multistep", "ipndm", "deis", "uni_pc_bh2")
MULTISTEP_COUNTS = {"turbo": (6, 5, 4), "raw": (17, 13, 11), "flux20": (10, 7, 5), "flux28": (14, 8, 5)}

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
    sampler: str = "euler"
    model: str = PROXY_MODEL


def case(regime: str, method: str, setting: str = "", cache: dict | None = None,
         peer: dict | None = None) -> PeerCase:
    of = REGIMES[regime]
    name = " ".join(part for part in (regime, method, setting) if part)
    return PeerCase(name, of.steps, of.cfg, cache, regime=regime, method=method, setting=setting, peer=peer,
                    model=of.model)


def multistep_method(sampler: str) -> str:
    return f"fewer steps, {sampler}"


def fewer_steps_case(regime: str, steps: int, sampler: str = "euler") -> PeerCase:
    """Plain ``sampler`` at ``steps`` steps, the regime's CFG and model, no node: compared, as every row,
    with the regime's uncached image at its full steps."""
    made = case(regime, multistep_method(sampler), f"{steps}")
    made.steps, made.sampler = steps, sampler
    return made


def fewer_steps_cases(regime: str, cases: list[PeerCase]) -> list[PeerCase]:
    """Euler at every call count below the full steps that ``cases`` fix in advance or FEWER_STEPS_SPAN
    names, slowest first (the curve's order); the multistep samplers at MULTISTEP_COUNTS."""
    full = REGIMES[regime].steps
    counts = ({planned_calls(c) for c in cases if c.regime == regime} | set(FEWER_STEPS_SPAN[regime])) - {None, full}
    made = [fewer_steps_case(regime, n) for n in sorted(counts, reverse=True)]
    return made + [fewer_steps_case(regime, n, s) for s in MULTISTEP_SAMPLERS for n in MULTISTEP_COUNTS[regime]]


def forecast_case(regime: str, method: str, setting: str, preset: str, **custom) -> PeerCase:
    made = case(regime, method, setting, {})
    made.forecast = {"preset": preset, **custom}
    return made


def forecast_cases(regime: str) -> list[PeerCase]:
    cases = [forecast_case(regime, FORECAST_PRESETS, name, name) for name in FORECAST_PRESET_NAMES[regime]]
    cases += [forecast_case(regime, SPECTRUM_PUBLISHED, name, name) for name in PUBLISHED_PRESETS]
    cases += [forecast_case(regime, FORECAST_LINEAR, f"{n:g}", "custom", forecast="linear", warmup_steps=2,
                            window_size=n, window_growth=0.0, final_computed_steps=1) for n in LINEAR_WINDOWS[regime]]
    cases += [forecast_case(regime, FORECAST_AUTO, f"{x:g}", "auto", speedup=x) for x in AUTO_SPEEDUPS[regime]]
    return cases


def peer_case(regime: str, peer: str, threshold: float, own_input: bool = True) -> PeerCase:
    made = case(regime, peer if own_input else EASYCACHE_IN_PLACE, f"{threshold:g}",
                peer={"class_type": peer, "reuse_threshold": threshold, **PEER_DEFAULTS})
    made.own_input = own_input
    return made


def full_cases(regimes=regimes_of(KREA2)) -> list[PeerCase]:
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
        cases += forecast_cases(regime)
        cases += [peer_case(regime, peer, t) for peer in PEERS for t in PEER_THRESHOLDS]
        cases.append(peer_case(regime, EASYCACHE, PEER_DEFAULT_THRESHOLD, own_input=False))
        cases += fewer_steps_cases(regime, cases)
    return cases


def caching_off_cases(regime: str) -> list[PeerCase]:
    """The node caching nothing: with its text-path reuse, and with the text path on every call."""
    full_text = case(regime, CACHING_OFF_FULL_TEXT, "0", {"residual_diff_threshold": 0.0})
    full_text.full_text = True
    return [case(regime, CACHING_OFF, "0", {"residual_diff_threshold": 0.0}), full_text]


def quick_cases() -> list[PeerCase]:
    """A handful of Turbo-like cases: one of each kind of method, fewer steps too."""
    return [case("turbo", UNCACHED), *caching_off_cases("turbo"),
            case("turbo", THRESHOLD, f"{NODE_DEFAULT_THRESHOLD:g}", {}),
            case("turbo", calibrator_method("taylorseer"), f"{NODE_DEFAULT_THRESHOLD:g}", {"calibrator": "taylorseer"}),
            forecast_case("turbo", FORECAST_PRESETS, "turbo_5_of_8", "turbo_5_of_8"),
            peer_case("turbo", EASYCACHE, 0.2), peer_case("turbo", EASYCACHE, 1.2),
            peer_case("turbo", LAZYCACHE, 0.2), peer_case("turbo", LAZYCACHE, 1.2),
            peer_case("turbo", EASYCACHE, PEER_DEFAULT_THRESHOLD, own_input=False),
            # Euler at and around the preset's 5 calls (the defaults' 7 fall between the uncached run and 6),
            # and one multistep sampler at 5.
            *(fewer_steps_case("turbo", n) for n in (6, 5, 4)), fewer_steps_case("turbo", 5, "dpmpp_2m")]


def is_node(row: dict) -> bool:
    return row["method"].startswith("Cache-DiT")


def is_forecast(row: dict) -> bool:
    """A row of the whole-call forecasting node (the other node rows are the DBCache node's)."""
    return row["method"] in (FORECAST_PRESETS, SPECTRUM_PUBLISHED, FORECAST_LINEAR, FORECAST_AUTO)


def is_fewer_steps(row: dict) -> bool:
    """Plain sampling at fewer steps: euler or a multistep sampler."""
    return row["method"].startswith("fewer steps, ")


def is_multistep(row: dict) -> bool:
    return is_fewer_steps(row) and row["method"] != FEWER_STEPS


def families(rows: list[dict]) -> list[str]:
    """The families whose proxies the rows sampled, in REGIMES' order."""
    return [family for family in dict.fromkeys(r.family for r in REGIMES.values())
            if any(REGIMES[row["regime"]].family == family for row in rows)]


def is_node_default(row: dict) -> bool:
    return row["method"] == THRESHOLD and row["setting"] == f"{NODE_DEFAULT_THRESHOLD:g}"
