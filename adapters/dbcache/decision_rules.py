"""cache-dit's caching rules for one cache context, replayed to say why each step went as it did.

cache-dit decides per stream and step (``CachedContextManager.can_cache``): never in warmup; with
a step mask the mask alone decides; then the limits (``max_cached_steps``,
``max_continuous_cached_steps``); then the threshold, on the Fn residual's change against the
stream's last computed step (``residual_trace``). ``DecisionRules`` replays those rules over a
stream's steps: following what really happened (each step's reason), or deciding by a threshold
(what the threshold advisor asks).
"""

from __future__ import annotations

import dataclasses

from ..sampling.stream_report import StreamReport
from .residual_trace import StreamTrace

# Reasons, as reported per step.
WARMUP, FRESH_CONTEXT, MASK, MAX_CACHED, MAX_CONTINUOUS = "warmup", "fresh_context", "mask", "max_cached", "max_continuous"
THRESHOLD, THRESHOLD_OFF, NO_REFERENCE = "threshold", "threshold_off", "no_reference"


@dataclasses.dataclass(frozen=True)
class DecisionRules:
    """cache-dit's caching rules for one context, in steps counted from the run's start."""

    start_step: int
    threshold: float
    warmup_steps: frozenset[int]           # absolute steps
    mask: dict[int, int] | None            # absolute step -> 1 compute / 0 cache
    max_cached: int
    max_continuous: int

    @classmethod
    def for_context(cls, settings, mask_rest: list[int] | None, start_step: int) -> "DecisionRules":
        """``mask_rest`` is the mask cache-dit got for this context (from ``start_step`` on)."""
        warmup_limit = settings.max_warmup_steps
        if mask_rest is not None:
            leading = next((i for i, m in enumerate(mask_rest) if m != 1), len(mask_rest))
            warmup_limit = min(warmup_limit, leading)
        warmup = frozenset(start_step + t for t in range(0, warmup_limit, settings.warmup_interval))
        mask = None if mask_rest is None else {start_step + t: m for t, m in enumerate(mask_rest)}
        return cls(start_step, settings.residual_diff_threshold, warmup, mask,
                   settings.max_cached_steps, settings.max_continuous_cached_steps)

    def gate(self, step: int, cached_so_far: int, continuous: int) -> tuple[bool, str] | None:
        """A decision the rules force at ``step`` before the threshold is looked at, or None."""
        if step in self.warmup_steps:
            return False, (FRESH_CONTEXT if step == self.start_step and step > 0 else WARMUP)
        if self.mask is not None and step in self.mask:
            return self.mask[step] == 0, MASK  # static policy: the mask alone decides
        if 0 <= self.max_cached <= cached_so_far:
            return False, MAX_CACHED
        if 0 <= self.max_continuous <= continuous:
            return False, MAX_CONTINUOUS
        if self.threshold <= 0:
            return False, THRESHOLD_OFF
        return None

    def explain(self, steps: list[int], cached: dict[int, bool]) -> dict[int, str]:
        """The reason for each step's actual outcome (the same rules, following what really happened)."""
        def as_it_happened(step: int, reference: int | None) -> tuple[bool, str]:
            return cached.get(step, False), (THRESHOLD if reference is not None else NO_REFERENCE)

        decisions = self.walk(steps, as_it_happened, follow=cached)
        return {step: reason for step, (_, reason) in decisions.items()}

    def walk(self, steps: list[int], by_threshold, follow: dict[int, bool] | None = None,
              start: int = 0, state: tuple = (None, 0, 0, False), states: list | None = None):
        """cache-dit's per-step state (reference step, cached count, streak) through ``steps``.

        The rules force what they can; ``by_threshold(step, reference)`` decides the rest.
        ``follow`` gives the outcomes to carry the state with instead (what really happened).
        A walk can resume at ``steps[start]`` from the ``state`` it had there; ``states`` gets
        the state before each step walked (what a resume needs).
        """
        decisions: dict[int, tuple[bool, str]] = {}
        reference, cached_count, continuous, previous_cached = state
        for step in steps[start:]:
            if states is not None:
                states.append((reference, cached_count, continuous, previous_cached))
            if not previous_cached:
                continuous = 0
            decision = self.gate(step, cached_count, continuous) or by_threshold(step, reference)
            decisions[step] = decision
            cached = decision[0] if follow is None else follow.get(step, False)
            if cached:
                cached_count, continuous = cached_count + 1, continuous + 1
            else:
                reference = step
            previous_cached = cached
        return decisions


@dataclasses.dataclass(frozen=True)
class TracedStream:
    """A DBCache stream's account: its residual trace with the rules of its context."""

    trace: StreamTrace
    rules: DecisionRules

    @property
    def advisor_input(self) -> tuple[StreamTrace, DecisionRules]:
        return self.trace, self.rules

    def report(self) -> StreamReport:
        measured = self.trace.measured_diffs()   # one device read for the whole stream
        order = sorted(self.trace.cached)
        why = self.rules.explain(order, self.trace.cached)
        # The changes keep every digit: rounded, one just below the threshold could show on it.
        return StreamReport(self.trace.branches, self.trace.context, self.trace.start_step, order,
                            [s for s in order if self.trace.cached[s]], [why[s] for s in order],
                            [measured.get(s) for s in order], self.trace.blocks)
