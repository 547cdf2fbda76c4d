"""What the GPU check samples: its workloads, the nodes' variants on each, and the two scales it runs at."""

from __future__ import annotations

import dataclasses

RAW_FULL_STEPS = 52


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    steps: int
    cfg: float


TURBO, RAW = Workload("turbo", 8, 1.0), Workload("raw", RAW_FULL_STEPS, 3.5)

# Node inputs per variant. "defaults" sends none: what the node's defaults run is in the stats record.
VARIANTS = {"uncached": None, "defaults": {}, "steps_mask fast": {"steps_mask": "fast"},
            "caching off": {"residual_diff_threshold": 0.0, "steps_mask": "none"}}
COMPILED_VARIANTS = ("uncached", "defaults", "steps_mask fast")
TWO_GPU_VARIANTS = ("uncached", "defaults", "steps_mask fast")
TWO_GPUS = Workload("raw 2 gpus", RAW_FULL_STEPS, 3.5)

# The Cache-DiT Forecast node's presets made for each workload's regime, measured eagerly beside the
# DBCache variants (same repeats, same reference); a row's variant is "forecast <preset>".
FORECAST_PRESETS = {"turbo": ("turbo_5_of_8", "turbo_4_of_8"), "raw": ("raw_1_in_4",)}
FORECAST_PREFIX = "forecast "


def forecast_variants(workload: Workload) -> tuple[str, ...]:
    return tuple(FORECAST_PREFIX + preset for preset in FORECAST_PRESETS.get(workload.name, ()))


def forecast_preset(variant: str) -> str | None:
    """The Forecast node's preset a variant runs, None for the DBCache node's variants and no node."""
    return variant.removeprefix(FORECAST_PREFIX) if variant.startswith(FORECAST_PREFIX) else None


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big the check runs: the real model on a GPU, or a small one for the CPU smoke run."""

    full_size: bool             # synthetic.FULL_SIZE (the real architecture), else the tiny test shape
    size: int                   # image side in pixels
    tokens: int                 # conditioning tokens (cond and uncond alike: CFG runs batched)
    raw_steps: int              # Raw's steps before the budget shortens them
    turbo_repeats: int
    raw_repeats: int
    budget_s: float             # the whole check, install included
    compile_guess_s: float      # a first compile warm-up's cost, before one was measured
    cpu: bool


FULL = Scale(full_size=True, size=1024, tokens=128, raw_steps=RAW_FULL_STEPS, turbo_repeats=5, raw_repeats=2,
             budget_s=480, compile_guess_s=90, cpu=False)
# The smoke run checks the path, not the numbers: small and short, and a budget it never reaches
# (the inductor kernels it compiles on its first run on a machine take minutes on two cores).
SMOKE = Scale(full_size=False, size=64, tokens=8, raw_steps=12, turbo_repeats=2, raw_repeats=1,
              budget_s=900, compile_guess_s=60, cpu=True)
