"""Node settings, presets and step masks, resolved for one sampling run.

The node stores *what the user asked for* (``CacheSettings``); the number of
steps is only known when the sampler starts, so the concrete cache-dit
configuration (``RunPlan``) is built per run by ``plan_run``.

Where the defaults come from: cache-dit's published DBCache reference settings
for Krea-2 (F1B0: ``Fn_compute_blocks=1``, ``Bn_compute_blocks=0``,
``max_warmup_steps=4``, ``residual_diff_threshold=0.24``,
``max_continuous_cached_steps=3``). Presets adapt them to Krea-2's two
published modes (see ``PRESETS``).
"""

from __future__ import annotations

import dataclasses
import logging

STEP_MASKS = ("none", "slow", "medium", "fast", "ultra")
PRESET_NAMES = ("auto", "turbo", "raw", "custom")

# A run with at most this many steps is treated as Turbo by the "auto" preset
# (Krea-2 Turbo samples in 8 steps, Raw in ~52).
AUTO_TURBO_MAX_STEPS = 16

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CacheSettings:
    """Everything the Krea2CacheDiT node lets a user set."""

    Fn_compute_blocks: int = 1
    Bn_compute_blocks: int = 0
    residual_diff_threshold: float = 0.24
    max_warmup_steps: int = 4
    warmup_interval: int = 1
    max_cached_steps: int = -1
    max_continuous_cached_steps: int = 3
    enable_taylorseer: bool = False
    taylorseer_order: int = 1
    steps_mask: str = "none"
    preset: str = "auto"

    def __post_init__(self):
        if self.preset not in PRESET_NAMES:
            raise ValueError(f"preset must be one of {PRESET_NAMES}, got {self.preset!r}")
        if self.steps_mask not in STEP_MASKS:
            raise ValueError(f"steps_mask must be one of {STEP_MASKS}, got {self.steps_mask!r}")
        if self.Fn_compute_blocks < 1 or self.Bn_compute_blocks < 0:
            raise ValueError("Fn_compute_blocks must be at least 1 and Bn_compute_blocks at least 0 "
                             "(cache-dit measures the change between steps on the first Fn blocks).")
        if self.warmup_interval < 1:
            raise ValueError("warmup_interval must be at least 1")
        if self.max_warmup_steps < 0 or self.residual_diff_threshold < 0:
            raise ValueError("max_warmup_steps and residual_diff_threshold must not be negative")
        if self.taylorseer_order < 1:
            raise ValueError("taylorseer_order must be at least 1")

    def effective(self, steps: int) -> tuple[str, "CacheSettings"]:
        """The preset that applies to a run of ``steps`` steps, and the settings it gives.

        A preset supplies *defaults*: it fills every setting the user left at the
        node's default value, and keeps every setting the user changed. "custom"
        uses the node's inputs exactly as they are.
        """
        preset = self.preset
        if preset == "auto":
            preset = "turbo" if steps <= AUTO_TURBO_MAX_STEPS else "raw"
        if preset == "custom":
            return preset, self
        defaults, chosen = CacheSettings(), PRESETS[preset]
        filled = {
            field.name: getattr(chosen, field.name)
            for field in dataclasses.fields(self)
            if field.name != "preset" and getattr(self, field.name) == getattr(defaults, field.name)
        }
        return preset, dataclasses.replace(self, **filled)

    def changed_from_defaults(self) -> list[str]:
        """The settings a user changed from the node's defaults (a preset keeps these)."""
        defaults = CacheSettings()
        return [f.name for f in dataclasses.fields(self)
                if f.name != "preset" and getattr(self, f.name) != getattr(defaults, f.name)]

    def is_exact(self) -> bool:
        """Settings under which cache-dit can never reuse a residual."""
        return self.residual_diff_threshold <= 0 and self.steps_mask == "none"


# Turbo (8 steps, CFG 1): with the reference warmup of 4 and at most 3 cached
# steps in a row, a dynamic threshold rarely finds a step to skip in so short a
# schedule; cache-dit's "medium" step mask for 8 steps computes 1111 0 1 0 1,
# so two steps come from the cache, predictably, and the last step is exact.
# Raw (~52 steps, CFG ~3.5): the reference settings, with TaylorSeer (order 1)
# to extrapolate the cached residual across the longer runs of cached steps.
PRESETS: dict[str, CacheSettings] = {
    "turbo": CacheSettings(Fn_compute_blocks=1, Bn_compute_blocks=0, residual_diff_threshold=0.24,
                           max_warmup_steps=4, max_continuous_cached_steps=3, steps_mask="medium"),
    "raw": CacheSettings(Fn_compute_blocks=1, Bn_compute_blocks=0, residual_diff_threshold=0.24,
                         max_warmup_steps=4, max_continuous_cached_steps=3, enable_taylorseer=True,
                         taylorseer_order=1, steps_mask="none"),
}


@dataclasses.dataclass(frozen=True)
class RunPlan:
    """The concrete cache configuration for one run of ``steps`` steps."""

    steps: int
    preset: str                      # the preset that applied ("turbo", "raw" or "custom")
    settings: CacheSettings          # effective settings after the preset
    mask: tuple[int, ...] | None     # 1 = compute the step, 0 = serve it from the cache
    warnings: tuple[str, ...] = ()

    def db_cache_kwargs(self, start_step: int, separate_cfg: bool) -> dict:
        """``DBCacheConfig`` arguments for a cache context that starts at ``start_step``.

        A context normally covers the whole run (``start_step == 0``). When the
        call layout changes mid-run the pack starts a fresh context at that step,
        with the rest of the mask; its first step always computes because a
        fresh context holds no residual to serve.
        """
        s = self.settings
        kwargs = dict(
            Fn_compute_blocks=s.Fn_compute_blocks,
            Bn_compute_blocks=s.Bn_compute_blocks,
            residual_diff_threshold=s.residual_diff_threshold,
            max_warmup_steps=s.max_warmup_steps,
            warmup_interval=s.warmup_interval,
            max_cached_steps=s.max_cached_steps,
            max_continuous_cached_steps=s.max_continuous_cached_steps,
            enable_separate_cfg=separate_cfg,
            num_inference_steps=self.steps - start_step,
        )
        if self.mask is not None:
            rest = list(self.mask[start_step:]) or [1]
            rest[0] = 1
            # "static": a masked step is served from the cache, whatever the
            # threshold says, so the speedup is predictable.
            kwargs.update(steps_computation_mask=rest, steps_computation_policy="static")
        return kwargs


def build_step_mask(policy: str, steps: int) -> list[int]:
    """cache-dit's predefined step mask for ``steps`` steps (1 = compute, 0 = cache).

    cache-dit only defines its masks for 4, 6 and 8 or more steps; anything else
    raises ``ValueError`` with a message a user can act on.
    """
    import cache_dit

    if steps >= 8 or steps in (4, 6):
        return list(cache_dit.steps_mask(total_steps=steps, mask_policy=policy))
    raise ValueError(f"steps_mask '{policy}' needs 4, 6 or at least 8 sampling steps; this run has {steps}.")


def check_compute_blocks(settings: CacheSettings, num_blocks: int) -> None:
    """cache-dit needs Fn + Bn to fit in the model; say so here rather than in its assertion."""
    if settings.Fn_compute_blocks + settings.Bn_compute_blocks > num_blocks:
        raise ValueError(
            f"Fn_compute_blocks ({settings.Fn_compute_blocks}) + Bn_compute_blocks "
            f"({settings.Bn_compute_blocks}) must not exceed the model's {num_blocks} transformer blocks; "
            f"lower them on the Krea-2 Cache-DiT node.")


def plan_run(settings: CacheSettings, steps: int, num_blocks: int) -> RunPlan:
    """Resolve presets and the step mask for a run of ``steps`` steps on ``num_blocks`` blocks."""
    if steps < 1:
        raise ValueError("a sampling run needs at least one step")
    preset, effective = settings.effective(steps)
    check_compute_blocks(effective, num_blocks)
    warnings: list[str] = []
    mask = None
    if effective.steps_mask != "none":
        try:
            mask = tuple(build_step_mask(effective.steps_mask, steps))
        except ValueError as error:
            # Documented fallback: run without a mask (threshold only) and say so.
            warnings.append(f"{error} Running without a step mask (threshold only).")
    return RunPlan(steps=steps, preset=preset, settings=effective, mask=mask, warnings=tuple(warnings))
