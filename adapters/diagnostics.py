"""Why a run cached what it did: residual changes, per-step reasons, threshold suggestions.

cache-dit decides per stream and step (``CachedContextManager.can_cache``): never
in warmup; with a step mask the mask alone decides; then the limits
(``max_cached_steps``, ``max_continuous_cached_steps``); then the threshold:
the step is cached when the relative change of the Fn blocks' residual,
``mean|r_k - r_t| / mean|r_k|``, is below it, where ``k`` is the last *computed*
step of that stream (cache-dit keeps no residual of a cached step).

cache-dit measures that change only when the threshold can decide, and keeps
it to itself. The pack measures it for every step, the same way, from the Fn
residual its block hooks see (``StreamTrace``), and replays cache-dit's rules
(``DecisionRules``) to say why each step went the way it did and which
thresholds would have cached what (``suggest_thresholds``).

The advisor needs the change between *any* two steps, since a different
threshold computes different steps: each step's residual is kept as a fixed
subsample of at most ``SAMPLE_SIZE`` values (a few hundred KiB per step), which
estimates the mean absolute values of a full-size residual to well under 1%.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import torch

SAMPLE_SIZE = 1 << 16

# Reasons, as reported per step.
WARMUP, FRESH_CONTEXT, MASK, MAX_CACHED, MAX_CONTINUOUS = "warmup", "fresh_context", "mask", "max_cached", "max_continuous"
THRESHOLD, THRESHOLD_OFF, NO_REFERENCE = "threshold", "threshold_off", "no_reference"


def relative_change(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """cache-dit's residual change ``mean|ref - cur| / mean|ref|`` as a 0-d float32 tensor (no sync)."""
    reference, current = reference.float(), current.float()
    return (reference - current).abs().mean() / reference.abs().mean()


def _sample_index(numel: int, device) -> torch.Tensor | None:
    if numel <= SAMPLE_SIZE:
        return None
    return torch.linspace(0, numel - 1, SAMPLE_SIZE, device=device).round().long()


class StreamTrace:
    """One stream cache-dit keeps a residual for (cond, uncond, or one call per step) in one context."""

    def __init__(self, branches: tuple[int, ...], context: int, start_step: int):
        self.branches = branches
        self.context = context
        self.start_step = start_step
        self.diffs: dict[int, torch.Tensor | None] = {}
        self.samples: dict[int, torch.Tensor] = {}
        self.cached: dict[int, bool] = {}
        self._reference: torch.Tensor | None = None   # Fn residual of the last computed step
        self._pending: tuple[int, torch.Tensor] | None = None
        self._index: torch.Tensor | None = None

    @torch.no_grad()
    def observe(self, step: int, residual: torch.Tensor) -> None:
        """The Fn residual of this stream's call at ``step`` (before cache-dit decides)."""
        residual = residual.detach()
        comparable = self._reference is not None and self._reference.shape == residual.shape
        self.diffs[step] = relative_change(self._reference, residual) if comparable else None
        flat = residual.reshape(-1)
        if self._index is None or self._index.device != flat.device:
            self._index = _sample_index(flat.numel(), flat.device)
        self.samples[step] = (flat if self._index is None else flat[self._index]).float().clone()
        self._pending = (step, residual)

    def finish(self, step: int, cached: bool) -> None:
        """What the call at ``step`` turned out to be; a computed step becomes the next reference."""
        self.cached[step] = cached
        if self._pending is not None and self._pending[0] == step and not cached:
            self._reference = self._pending[1]
        self._pending = None

    def release(self) -> None:
        self._reference, self._pending = None, None

    def measured_diffs(self) -> dict[int, float | None]:
        return {step: (None if d is None else float(d)) for step, d in self.diffs.items()}

    def pair_changes(self) -> tuple[list[int], torch.Tensor]:
        """Steps seen and the matrix C[i, j] = relative change from step i's residual to step j's."""
        steps = sorted(self.samples)
        if not steps:
            return steps, torch.zeros(0, 0)
        lengths = {self.samples[s].numel() for s in steps}
        if len(lengths) > 1:
            return steps, torch.full((len(steps), len(steps)), math.inf)
        stacked = torch.stack([self.samples[s] for s in steps])           # [n, k]
        scale = stacked.abs().mean(dim=1, keepdim=True)                     # mean|r_i|
        changes = torch.cdist(stacked, stacked, p=1) / stacked.shape[1] / scale
        return steps, changes.cpu()


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

    def replay(self, steps: list[int], change: Callable[[int, int], float | None],
               threshold: float | None = None) -> dict[int, tuple[bool, str]]:
        """What cache-dit decides at each of ``steps`` when the change from step k to t is ``change(k, t)``."""
        threshold = self.threshold if threshold is None else threshold
        rules = self if threshold == self.threshold else dataclasses.replace(self, threshold=threshold)

        def by_threshold(step: int, reference: int | None) -> tuple[bool, str]:
            value = None if reference is None else change(reference, step)
            if value is None:
                return False, NO_REFERENCE
            # cache-dit: change < threshold, and a threshold of 1 or more caches without comparing.
            return threshold >= 1.0 or value < threshold, THRESHOLD

        return rules._walk(steps, by_threshold)

    def explain(self, steps: list[int], cached: dict[int, bool]) -> dict[int, str]:
        """The reason for each step's actual outcome (the same rules, following what really happened)."""
        def as_it_happened(step: int, reference: int | None) -> tuple[bool, str]:
            return cached.get(step, False), (THRESHOLD if reference is not None else NO_REFERENCE)

        decisions = self._walk(steps, as_it_happened, follow=cached)
        return {step: reason for step, (_, reason) in decisions.items()}

    def _walk(self, steps: list[int], by_threshold, follow: dict[int, bool] | None = None):
        """cache-dit's per-step state (reference step, cached count, streak) through ``steps``.

        The rules force what they can; ``by_threshold(step, reference)`` decides the rest.
        ``follow`` gives the outcomes to carry the state with instead (what really happened).
        """
        decisions: dict[int, tuple[bool, str]] = {}
        reference, cached_count, continuous, previous_cached = None, 0, 0, False
        for step in steps:
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


# --- the threshold advisor -----------------------------------------------------------------

def suggest_thresholds(streams: list[tuple[StreamTrace, DecisionRules]], limit: int = 8) -> list[dict]:
    """For each reachable count k >= 1 of cached steps, a threshold that caches k steps, and which.

    Every threshold between two neighbouring measured changes makes the same
    decisions, so each such interval is replayed once. A step counts as cached
    when every stream cached it (as in ``cached_steps``). For each k the widest
    interval (in log scale) wins and its geometric middle is suggested: the
    trajectory moves once other steps are cached, and the middle of a wide
    interval keeps the most room for that before a decision flips.
    """
    prepared = []
    candidates: set[float] = set()
    for trace, rules in streams:
        order, matrix = trace.pair_changes()
        # Plain floats: the replays below read the matrix thousands of times for a long run.
        rows = matrix.tolist()
        position = {s: i for i, s in enumerate(order)}

        def change(k, t, rows=rows, position=position):
            if k not in position or t not in position:
                return None
            value = rows[position[k]][position[t]]
            return value if math.isfinite(value) else None

        prepared.append((trace.context, order, rules, change))
        for i, row in enumerate(rows):
            candidates.update(value for value in row[i + 1:] if math.isfinite(value) and value > 0)
    if not candidates:
        return []
    if max(candidates) >= 1.0:
        candidates.add(1.0)  # cache-dit caches without comparing from a threshold of 1 on
    points = sorted(candidates)
    # Every threshold inside an interval between neighbouring changes decides alike; above them
    # all, one nominal interval stands for "everything the limits allow".
    bounds = list(zip(points, points[1:] + [points[-1] * 2.25]))
    best: dict[int, tuple[float, float, float, list[int]]] = {}
    for low, high in bounds:
        cached = _cached_steps_at(prepared, math.sqrt(low * high))
        if not cached:
            continue
        width = math.log(high / low) if high > low else 0.0
        if len(cached) not in best or width > best[len(cached)][0]:
            best[len(cached)] = (width, low, high, cached)
    suggestions = [{"threshold": _round_inside(low, high), "range": [round(low, 6), round(high, 6)],
                    "cached_steps": cached} for _, low, high, cached in best.values()]
    suggestions.sort(key=lambda s: (s["threshold"], len(s["cached_steps"])))
    return suggestions[:limit] if len(suggestions) <= limit else _spread(suggestions, limit)


def _cached_steps_at(prepared, threshold: float) -> list[int]:
    """Steps every stream of their context caches at ``threshold``, over all contexts."""
    by_context: dict[int, list[set[int]]] = {}
    for context, order, rules, change in prepared:
        decisions = rules.replay(order, change, threshold)
        by_context.setdefault(context, []).append({s for s, (cached, _) in decisions.items() if cached})
    cached: set[int] = set()
    for per_stream in by_context.values():
        cached |= set.intersection(*per_stream)
    return sorted(cached)


def _round_inside(low: float, high: float) -> float:
    """The geometric middle of (low, high), with as few decimals as stay inside it."""
    if low >= 1.0:
        return 1.0  # every threshold of 1 or more caches alike
    middle = math.sqrt(low * high) if low > 0 else high / 2
    for digits in range(2, 7):
        value = round(middle, digits)
        if low < value < high:
            return value
    return round(middle, 6)


def _spread(suggestions: list[dict], limit: int) -> list[dict]:
    """At most ``limit`` suggestions, spread over the counts (always keeping the smallest and largest)."""
    picks = sorted({round(i * (len(suggestions) - 1) / (limit - 1)) for i in range(limit)})
    return [suggestions[i] for i in picks]


# --- time saved ----------------------------------------------------------------------------

def estimate_uncached_seconds(duration_s: float, calls: list[tuple[object, bool, bool, float]]) -> float:
    """The run's time had no call been cached, from its own timings.

    ``calls``: per model call (stream key, served by cache-dit, cached, seconds).
    A cached call would have cost what a computed call of the same stream costs
    (its median, which ignores a slow first call); everything else in the run
    (sampler, text tokens, extra calls) is measured as it was.
    """
    full: dict[object, list[float]] = {}
    for key, served, cached, seconds in calls:
        if served and not cached:
            full.setdefault(key, []).append(seconds)
    estimate = duration_s
    for key, served, cached, seconds in calls:
        if served and cached and full.get(key):
            estimate += max(_median(full[key]) - seconds, 0.0)
    return estimate


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
