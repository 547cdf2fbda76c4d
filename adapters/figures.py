"""The figures this pack quotes to its users, each kept here once with where it comes from.

Tooltips build their figures from this module. The README, the docs and the help pages (en and zh) quote them
as text, each in one of the phrases ``phrases(locale)`` gives. ``tests/benchmarks/test_quoted_figures.py``
holds each figure here to its source, and every figure on those pages (an MAE in /255, a speedup, a timing
``a s → b s``) to one of these phrases: a figure changed in any one place fails it.

The pack's own figures come from the committed results of its benchmarks (``benchmarks/results/``). The pack
does not ship ``benchmarks/``, so the values are kept here and the test reads them back from the results. The
others are their publishers' (sglang's on real Krea-2 weights, cache-dit's in diffusers), re-measured by nobody
here.
"""

from __future__ import annotations

import dataclasses

from .dbcache.mask_standing import MASK_STANDINGS


@dataclasses.dataclass(frozen=True)
class RealWeights:
    """sglang's measurement of the node's defaults on real Krea-2 weights, one model."""

    model: str
    steps: int
    cfg: float
    uncached_s: float
    cached_s: float
    mae_255: float
    digits: int  # the seconds as sglang gives them

    @property
    def speedup(self) -> float:
        return round(self.uncached_s / self.cached_s, 1)

    def phrase(self, locale: str) -> str:
        u, c = f"{self.uncached_s:.{self.digits}f}", f"{self.cached_s:.{self.digits}f}"
        if locale == "zh":
            return f"{u} 秒 → {c} 秒（约 {self.speedup} 倍），MAE {self.mae_255:.2f}/255"
        return f"{u} s → {c} s (about {self.speedup}x), MAE {self.mae_255:.2f}/255"


# sglang's, the only measurement of cache-dit on real Krea-2 weights: the node's defaults are its settings.
SGLANG_KREA2 = (
    RealWeights("Turbo", 8, 1.0, 1.27, 0.92, 4.63, 2),
    RealWeights("Raw", 50, 4.5, 18.0, 6.3, 13.19, 1),
)


@dataclasses.dataclass(frozen=True)
class Standing:
    """One setting on one of the proxies: the model calls it computes, its MAE/255 against the uncached image
    (mean of the peer benchmark's three images) and plain ``sampler``'s at as many steps as it makes calls (the
    setting sampled with the same sampler)."""

    setting: str
    steps: int                   # 8: the distilled Turbo proxy, CFG 1; 20 or more: the trained proxy, CFG 3.5
    calls: int
    mae_255: float
    euler_mae_255: float | None  # None where the sampler was not run at `calls` steps
    sampler: str = "euler"

    def phrase(self, locale: str) -> str:
        speed = self.steps / self.calls
        if locale == "zh":
            text = f"{self.steps} 步中计算 {self.calls} 步（{speed:.1f} 倍），MAE {self.mae_255:.2f}/255"
            if self.euler_mae_255 is not None:
                text += f"（{self.sampler} {self.calls} 步：{self.euler_mae_255:.2f}）"
            return text
        text = f"{self.calls} of {self.steps} calls ({speed:.1f}x), MAE {self.mae_255:.2f}/255"
        if self.euler_mae_255 is not None:
            text += f" ({self.sampler} at {self.calls} steps: {self.euler_mae_255:.2f})"
        return text


# benchmarks/results/peers.json: the Forecast node's presets, the official Spectrum settings and the
# DBCache defaults (threshold 0.24), against fewer steps.
PRESET_STANDINGS = (
    Standing("turbo_5_of_8", 8, 5, 2.48, 4.03),
    Standing("turbo_4_of_8", 8, 4, 3.42, 4.37),
    Standing("raw_1_in_4", 52, 13, 0.95, 2.56),
    Standing("raw_1_in_5", 52, 11, 1.87, 2.88),
    Standing("raw_8_of_52", 52, 8, 3.46, 4.33),
)
SPECTRUM_PAPER_STANDINGS = (
    Standing("spectrum_paper", 8, 6, 4.97, 2.80),
    Standing("spectrum_paper", 52, 14, 10.35, 2.53),
    Standing("spectrum_paper_fast", 52, 10, 15.42, 3.67),
)
DEFAULTS_STANDINGS = (
    Standing("0.24", 8, 7, 1.27, 2.45),
    Standing("0.24", 52, 16, 2.49, None),
)

# benchmarks/results/forecast_auto.json, on four images the peer benchmark and the presets' choice never used:
# each fixed preset beside ``auto`` at the same model calls, at the step counts where a preset makes as many
# calls as ``auto`` at one of its speedups (20 and 28 steps: raw_1_in_5 laid out for 52 run at other counts).
FORECAST_AUTO_STANDINGS = (
    Standing("raw_1_in_5", 20, 5, 8.60, 6.68), Standing("auto", 20, 5, 4.68, 6.68),
    Standing("raw_1_in_5", 28, 7, 3.75, 5.21), Standing("auto", 28, 7, 2.59, 5.21),
    Standing("raw_1_in_4", 52, 13, 1.33, 2.86), Standing("auto", 52, 13, 1.12, 2.86),
    Standing("raw_8_of_52", 52, 8, 2.77, 4.76), Standing("auto", 52, 8, 2.48, 4.76),
    Standing("turbo_4_of_8", 8, 4, 3.34, 4.75), Standing("auto", 8, 4, 3.21, 4.75),
    Standing("turbo_5_of_8", 8, 5, 2.60, 3.83), Standing("auto", 8, 5, 2.72, 3.83),
)

# benchmarks/results/forecast_multistep.json: the presets and ``auto`` sampled with res_multistep (the sampler of
# ComfyUI's Z-Image Turbo and MiniMax H3 recipes) beside res_multistep at as many steps, on two more images.
MULTISTEP = "res_multistep"
FORECAST_MULTISTEP_STANDINGS = (
    Standing("turbo_5_of_8", 8, 5, 5.66, 8.41, MULTISTEP), Standing("turbo_4_of_8", 8, 4, 7.46, 8.73, MULTISTEP),
    Standing("auto", 8, 5, 6.21, 8.41, MULTISTEP), Standing("auto", 8, 4, 7.87, 8.73, MULTISTEP),
    Standing("raw_1_in_4", 20, 7, 5.55, 6.09, MULTISTEP), Standing("raw_1_in_5", 20, 5, 16.14, 10.38, MULTISTEP),
    Standing("auto", 20, 10, 2.45, 3.23, MULTISTEP), Standing("auto", 20, 5, 8.68, 10.38, MULTISTEP),
)


# benchmarks/results/peers_flux.json: the small trained Flux (a base model at CFG 3.5, not a guidance-distilled
# one), the settings its evidence recommends for Flux-architecture models run at CFG (Chroma's template), against
# fewer steps at 20 and 28 steps.
FLUX_MEDIUM_TAYLORSEER = "medium + taylorseer"
FLUX_STANDINGS = (
    Standing(FLUX_MEDIUM_TAYLORSEER, 20, 12, 1.15, 3.02), Standing(FLUX_MEDIUM_TAYLORSEER, 28, 15, 1.09, 2.51),
    Standing("auto", 20, 10, 2.03, 3.38), Standing("auto", 28, 14, 1.31, 2.83),
)


def preset_measured_steps(setting: str) -> int:
    """The step count a fixed preset's figures hold at: the one its standing against fewer steps was measured
    at (elsewhere it computes other steps, and can land farther than fewer steps)."""
    (steps,) = {row.steps for row in PRESET_STANDINGS if row.setting == setting}
    return steps


@dataclasses.dataclass(frozen=True)
class Calibrated:
    """A calibrator on the DBCache defaults, at the same cached steps (benchmarks/results/peers.json)."""

    calibrator: str
    steps: int
    calls: int
    plain_mae_255: float
    mae_255: float

    def phrase(self, locale: str) -> str:
        if locale == "zh":
            return (f"在 {self.steps} 步中同样计算 {self.calls} 步时把 MAE 从 {self.plain_mae_255:.2f}/255 降到 "
                    f"{self.mae_255:.2f}/255")
        return (f"MAE {self.plain_mae_255:.2f} → {self.mae_255:.2f}/255 at the same {self.calls} of {self.steps} "
                "calls")


DEFAULTS_TAYLORSEER = Calibrated("taylorseer", 52, 16, 2.49, 1.42)

# benchmarks/results/peers.json: dmd on the masks at 52 steps (fast, ultra; medium).
DMD_LONG_MASKS = {"fast": 40.25, "ultra": 56.98, "medium": 2.08}


def dmd_long_masks_phrase() -> str:
    return (f"MAE {DMD_LONG_MASKS['fast']:.0f}-{DMD_LONG_MASKS['ultra']:.0f}/255; `medium` "
            f"{DMD_LONG_MASKS['medium']:.2f}")


# docs/benchmarks.md, "Speedup demo (random weights)": wall-clock speedups of the masks at 8 steps, CFG 1, on the
# CPU (benchmarks/speedup.py prints them; no results file keeps them).
RANDOM_WEIGHTS_CPU = {"fast": 1.48, "ultra": 1.80}


def random_weights_phrase(locale: str) -> str:
    fast, ultra = RANDOM_WEIGHTS_CPU["fast"], RANDOM_WEIGHTS_CPU["ultra"]
    if locale == "zh":
        return f"`fast` 为 {fast:.2f} 倍，`ultra` 为 {ultra:.2f} 倍"
    return f"`fast` {fast:.2f}x, `ultra` {ultra:.2f}x wall-clock"


@dataclasses.dataclass(frozen=True)
class GpuCheck:
    """The GPU check on an H200 (benchmarks/results/gpu_check.json): random full-size Krea-2, speed only."""

    turbo_uncached_s: float
    turbo_fast_s: float
    turbo_fast_ideal: float
    raw_uncached_s: float
    raw_fast_s: float
    turbo_extra_mib: float
    raw_extra_mib: float
    compiled_fast_vs_eager: float

    def phrases(self) -> list[str]:
        speed = self.turbo_uncached_s / self.turbo_fast_s
        return [
            f"Turbo {self.turbo_uncached_s:.2f} s → {self.turbo_fast_s:.2f} s ({speed:.2f}x, "
            f"{speed / self.turbo_fast_ideal:.0%} of the ideal {self.turbo_fast_ideal:.2f}x)",
            f"Raw CFG 3.5 {self.raw_uncached_s:.1f} s → {self.raw_fast_s:.1f} s "
            f"({self.raw_uncached_s / self.raw_fast_s:.2f}x)",
            f"+{self.turbo_extra_mib:.0f}/+{self.raw_extra_mib:.0f} MiB VRAM",
            f"`TorchCompileModel` {self.compiled_fast_vs_eager:.2f}x over eager uncached",
        ]


GPU_CHECK = GpuCheck(2.1125, 1.396, 1.5664, 25.89, 13.08, 249.62, 501.0, 1.7189)

# cache-dit's own figures (its bench/cache and docs/benchmark/NVIDIA_GPU.md, in diffusers): Flux.1 dev at
# 50 steps on an NVIDIA L20, F1B0, warmup 4, threshold 0.24, 6 cached steps in a row ("SpeedUp" there is the
# ratio of TFLOPs), the row nearest the node's defaults.
CACHE_DIT_FLUX1_DEV = {"tflops_ratio": 3.94, "image_reward": 0.9997, "uncached_image_reward": 0.9898}


def cache_dit_flux1_dev_phrase(locale: str) -> str:
    f = CACHE_DIT_FLUX1_DEV
    if locale == "zh":
        return (f"TFLOPs 减少到 1/{f['tflops_ratio']:.2f}，ImageReward 为 {f['image_reward']:.4f}"
                f"（不缓存时 {f['uncached_image_reward']:.4f}）")
    return (f"{f['tflops_ratio']:.2f}x fewer TFLOPs, ImageReward {f['image_reward']:.4f} "
            f"(uncached {f['uncached_image_reward']:.4f})")


# cache-dit's other published figures, each quoted once (docs/settings.md, "Per family"), as quoted there.
CACHE_DIT_OTHERS = (
    "F8B0, warmup 4, 3 in a row, threshold 0.12: 2.05x",
    "F4B0, 4 in a row, 0.12: 2.66x",
    "50 steps: 6.0 s → 2.6 s with their cache",
    "50 steps on an H100, 12.75 s → 5.67 s with their cache",
    "F1B0, warmup 2, 1 in a row, threshold 0.8: 1.33x fewer TFLOPs",
    "F16B16: 1.12x",
    "1.89 s → 1.63 s with F1B0, warmup 4, threshold 0.6",
)


def phrases(locale: str) -> list[str]:
    """Every phrase a page in ``locale`` ("en" or "zh") may quote a figure in."""
    standings = [*PRESET_STANDINGS, *SPECTRUM_PAPER_STANDINGS, *DEFAULTS_STANDINGS, *MASK_STANDINGS,
                 *FORECAST_AUTO_STANDINGS, *FORECAST_MULTISTEP_STANDINGS, *FLUX_STANDINGS]
    found = [row.phrase(locale) for row in SGLANG_KREA2]
    found += [standing_phrase(s, locale) for s in standings]
    found += [DEFAULTS_TAYLORSEER.phrase(locale), random_weights_phrase(locale),
              cache_dit_flux1_dev_phrase(locale)]
    if locale == "en":
        found += [dmd_long_masks_phrase(), *GPU_CHECK.phrases(), *CACHE_DIT_OTHERS]
    return found


def standing_phrase(standing, locale: str) -> str:
    """A preset's, a mask's or the defaults' standing against fewer steps, in the words of ``Standing``."""
    return Standing(standing.mask if hasattr(standing, "mask") else standing.setting, standing.steps,
                    standing.calls, standing.mae_255, standing.euler_mae_255,
                    getattr(standing, "sampler", "euler")).phrase(locale)


def standing(setting: str, steps: int) -> Standing:
    """The standing of a preset, the official Spectrum settings or the defaults at ``steps``."""
    for row in (*PRESET_STANDINGS, *SPECTRUM_PAPER_STANDINGS, *DEFAULTS_STANDINGS):
        if row.setting == setting and row.steps == steps:
            return row
    raise KeyError((setting, steps))
