"""Node settings and step masks, resolved for one sampling run.

The node stores exactly what the user set (``DBCacheSettings``): no value is
replaced at run time. Only what depends on the run itself is decided per run,
by ``plan_run``, and reported in the stats: the step mask is built for the
run's actual step count.

Where the defaults come from: the only measurements of cache-dit on real
Krea-2 weights are sglang's, with threshold-driven DBCache F1B0
(``Fn_compute_blocks=1``, ``Bn_compute_blocks=0``), ``max_warmup_steps=4``,
``residual_diff_threshold=0.24``, ``max_continuous_cached_steps=3``, no step
mask and no calibrator (their figures: ``SGLANG_KREA2`` in ``adapters/figures.py``).
The node's defaults are those settings; masks and calibrators are one click away.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

from ..record.run_record import steps_costing_as_much
from .calibrators import calibrator_summary, check_calibrator
from .decision_rules import THRESHOLD, DecisionRules
from .threshold_advisor import suggest_thresholds

STEP_MASKS = ("none", "slow", "medium", "fast", "ultra")


@dataclasses.dataclass(frozen=True)
class DBCacheSettings:
    """Everything the Cache-DiT nodes let a user set; the defaults are the reference settings."""

    Fn_compute_blocks: int = 1
    Bn_compute_blocks: int = 0
    residual_diff_threshold: float = 0.24
    max_warmup_steps: int = 4
    warmup_interval: int = 1
    max_cached_steps: int = -1
    max_continuous_cached_steps: int = 3
    calibrator: str = "none"          # see calibrators.py
    taylorseer_order: int = 1         # read by calibrator "taylorseer" only
    dmd_history: int = 6              # read by calibrator "dmd" only (cache-dit's default)
    steps_mask: str = "none"

    def __post_init__(self):
        if not math.isfinite(self.residual_diff_threshold):
            # ComfyUI's min/max check lets NaN through (every comparison with it is false).
            raise ValueError(f"residual_diff_threshold must be a finite number, got {self.residual_diff_threshold}; "
                             "set a number from 0 (threshold caching off) to 2 on the Cache-DiT node.")
        if self.steps_mask not in STEP_MASKS:
            raise ValueError(f"steps_mask must be one of {STEP_MASKS}, got {self.steps_mask!r}")
        if self.Fn_compute_blocks < 1 or self.Bn_compute_blocks < 0:
            raise ValueError("Fn_compute_blocks must be at least 1 and Bn_compute_blocks at least 0 "
                             "(cache-dit measures the change between steps on the first Fn blocks).")
        if self.warmup_interval < 1:
            raise ValueError("warmup_interval must be at least 1")
        if self.max_warmup_steps < 0 or self.residual_diff_threshold < 0:
            raise ValueError("max_warmup_steps and residual_diff_threshold must not be negative")
        check_calibrator(self.calibrator, self.taylorseer_order, self.dmd_history)


@dataclasses.dataclass(frozen=True)
class DBCachePlan:
    """The concrete cache configuration for one run of ``steps`` steps."""

    steps: int
    settings: DBCacheSettings          # exactly the node's settings
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
        mask = self.mask_from(start_step)
        if mask is not None:
            # "static": a masked step is served from the cache, whatever the
            # threshold says, so the speedup is predictable.
            kwargs.update(steps_computation_mask=mask, steps_computation_policy="static")
        return kwargs

    @property
    def mask_name(self) -> str:
        """The mask's name in the record: the node's step mask policy."""
        return self.settings.steps_mask

    skipped_state = "cached"   # what the record calls a step whose middle blocks were skipped
    measures_residuals = True  # the threshold decides on each step's residual change

    def method_summary(self) -> dict:
        """The method as the record shows it (its settings are the record's ``settings``)."""
        return {"name": "dbcache"}

    def record_parts(self, observations, streams: list[dict]) -> dict:
        """DBCache's own parts of the record: the thresholds that would have cached other steps, and the
        calibrator that ran with the parameters it read."""
        advisor_input = [s.advisor_input for o in observations for s in o.streams if s.advisor_input is not None]
        suggestions = suggest_thresholds(advisor_input)
        if observations:
            # What each suggestion would cost in plain steps: a threshold that caches k steps may still lose to
            # that many uncached steps (the record cannot know the image; the compare templates show it).
            blocks = [n for _, n in observations[0].block_lists] or [observations[0].num_blocks]
            for suggestion in suggestions:
                suggestion["equal_cost_steps"] = self.steps_costing(len(suggestion["cached_steps"]), blocks)
        return {"threshold_suggestions": suggestions,
                "calibrator": calibrator_summary(dataclasses.asdict(self.settings), streams)}

    def method_text(self, parts: dict) -> str:
        """The log line's words for what ran besides the counts: the calibrator and the parameters it read."""
        calibrator = parts.get("calibrator")
        if not calibrator:
            return "calibrator none"
        parameters = [f"{key}={value}" for key, value in calibrator.items() if key != "name"]
        return "calibrator " + calibrator["name"] + (f" ({', '.join(parameters)})" if parameters else "")

    @property
    def fixes_its_steps(self) -> bool:
        """Whether the steps it caches are known before the run: a step mask alone decides them, threshold 0
        caches none. Otherwise the threshold decides, on the run's own residual changes."""
        return self.mask is not None or self.settings.residual_diff_threshold <= 0

    def most_cached_steps(self) -> list[int]:
        """The steps a stream of this plan caches at most, by cache-dit's rules: with a step mask (or threshold 0)
        exactly those it caches; else every step the warmup and the limits leave the threshold to decide."""
        rules = DecisionRules.for_context(self.settings, self.mask_from(0), 0)
        decisions = rules.walk(list(range(self.steps)), lambda step, reference: (reference is not None, THRESHOLD))
        return [step for step, (cached, _) in decisions.items() if cached]

    def equal_cost_steps(self, blocks: Sequence[int]) -> int:
        """The record's ``equal_cost_steps`` before the run, on a model with ``blocks`` per block list: exact where
        the plan fixes its steps, else the fewest these settings allow (the run caches ``most_cached_steps`` or
        fewer, and costs as much or more).

        Each block list is its own cache context: a cached call still runs its first Fn and last Bn blocks in
        each. Every stream caches the same steps, so one stream's count is the run's.
        """
        return self.steps_costing(len(self.most_cached_steps()), blocks)

    def steps_costing(self, cached: int, blocks: Sequence[int]) -> int:
        """The step count whose uncached run costs as much as this plan's run with ``cached`` steps cached."""
        per_call, per_cached_call = sum(blocks), len(blocks) * (self.settings.Fn_compute_blocks
                                                                + self.settings.Bn_compute_blocks)
        block_evals = (self.steps - cached) * per_call + cached * per_cached_call
        return steps_costing_as_much(self.steps, block_evals, self.steps * per_call)

    def mask_from(self, start_step: int) -> list[int] | None:
        """The rest of the mask for a context starting at ``start_step``; its first step computes."""
        if self.mask is None:
            return None
        rest = list(self.mask[start_step:]) or [1]
        rest[0] = 1
        return rest


def build_step_mask(policy: str, steps: int) -> list[int]:
    """cache-dit's predefined step mask for ``steps`` steps (1 = compute, 0 = cache).

    cache-dit only defines its masks for 4, 6 and 8 or more steps; anything else
    raises ``ValueError`` with a message a user can act on.
    """
    import cache_dit

    if steps >= 8 or steps in (4, 6):
        return list(cache_dit.steps_mask(total_steps=steps, mask_policy=policy))
    raise ValueError(f"steps_mask '{policy}' needs 4, 6 or at least 8 sampling steps; this run has {steps}.")


def check_compute_blocks(settings: DBCacheSettings, num_blocks: int, node_name: str) -> None:
    """Fn + Bn must leave blocks to cache; say so here rather than in cache-dit's assertion.

    With ``Fn + Bn == num_blocks`` no block is left between them: a step cache-dit counts
    as cached would still run every block, so nothing could be saved.
    """
    if settings.Fn_compute_blocks + settings.Bn_compute_blocks >= num_blocks:
        raise ValueError(
            f"Fn_compute_blocks ({settings.Fn_compute_blocks}) + Bn_compute_blocks "
            f"({settings.Bn_compute_blocks}) must be less than the model's {num_blocks} transformer blocks, "
            f"so that blocks are left to cache; lower them on the {node_name} node "
            f"(at most {num_blocks - 1} together).")


def plan_run(settings: DBCacheSettings, steps: int, num_blocks: int, node_name: str) -> DBCachePlan:
    """The step mask for a run of ``steps`` steps on ``num_blocks`` blocks, and any fallback taken.

    ``node_name``: the node that was placed, which a refusal names.
    """
    if steps < 1:
        raise ValueError("a sampling run needs at least one step")
    check_compute_blocks(settings, num_blocks, node_name)
    warnings: list[str] = []
    mask = None
    if settings.steps_mask != "none":
        try:
            mask = tuple(build_step_mask(settings.steps_mask, steps))
        except ValueError as error:
            # Documented fallback: run without a mask (threshold only) and say so.
            warnings.append(f"{error} Running without a step mask (threshold only).")
    return DBCachePlan(steps=steps, settings=settings, mask=mask, warnings=tuple(warnings))
