"""The threshold advisor: which thresholds would have cached which steps of a finished run.

Each stream's decisions change only where the threshold crosses a change the replay compared,
so the thresholds fall into intervals that decide alike, found by one replay of cache-dit's
rules (``decision_rules``) each, on the changes between any two of the stream's steps
(``PairChanges``: exact where cache-dit compared, else estimated from the traced samples).
"""

from __future__ import annotations

import bisect
import dataclasses
import math

import numpy
import torch

from .decision_rules import NO_REFERENCE, THRESHOLD, DecisionRules
from .residual_trace import StreamTrace


def pair_changes(trace: StreamTrace) -> "PairChanges":
    """The change between any two of ``trace``'s steps (what the advisor replays)."""
    measured = trace.measured_diffs()
    exact = {(trace.diffs[t][0], t): value for t, value in measured.items() if value is not None}
    return PairChanges(_host_arrays(trace.samples), exact)


def _host_arrays(samples: dict[int, torch.Tensor]) -> dict[int, "numpy.ndarray"]:
    """The samples as numpy arrays: the advisor reduces many small vectors one at a time, where
    torch's thread pool costs more than the arithmetic. From a GPU in one transfer."""
    steps = sorted(samples)
    if steps and samples[steps[0]].device.type != "cpu":
        stacked = torch.stack([samples[s] for s in steps]).float().cpu().numpy()
        return {s: stacked[i] for i, s in enumerate(steps)}
    return {s: samples[s].float().numpy() for s in steps}


class PairChanges:
    """The relative change from step k's residual to step t's, for any pair, computed when asked.

    A pair cache-dit compared (``exact``: t's reference was k) has the value cache-dit decided
    on; any other pair is estimated from the two steps' samples. Only the pairs a replay asks
    for are computed: with cache-dit's limits a step's reference is a few steps back, so a
    long run needs a few per step, not all n**2.
    """

    def __init__(self, samples: dict[int, "numpy.ndarray"], exact: dict[tuple[int, int], float]):
        self.steps = sorted(samples)
        self._samples = samples
        self._values: dict[tuple[int, int], float | None] = dict(exact)
        self._scales: dict[int, float] = {}

    ROW_CHUNK = 8   # pairs estimated at once: (k, t) and the next steps after t, in one array operation

    def __call__(self, k: int, t: int) -> float | None:
        key = (k, t)
        if key not in self._values:
            self._estimate_from(k, t)
        return self._values.get(key)

    def _estimate_from(self, k: int, t: int) -> None:
        self._values[(k, t)] = None
        if k not in self._samples or t not in self._samples:
            return
        later = self.steps.index(t)
        targets = [s for s in self.steps[later:later + self.ROW_CHUNK] if (k, s) not in self._values or s == t]
        reference = self._samples[k]
        targets = [s for s in targets if self._samples[s].shape == reference.shape]
        if not targets:
            return
        if k not in self._scales:
            self._scales[k] = float(numpy.abs(reference).mean())
        block = numpy.stack([self._samples[s] for s in targets])
        with numpy.errstate(divide="ignore", invalid="ignore"):
            values = numpy.abs(block - reference).mean(axis=1) / self._scales[k]
        for s, value in zip(targets, values.tolist()):
            self._values[(k, s)] = value if math.isfinite(value) else None



def suggest_thresholds(streams: list[tuple[StreamTrace, DecisionRules]], limit: int = 8) -> list[dict]:
    """For each reachable count k >= 1 of cached steps, a threshold that caches k steps, and which.

    Each stream's decisions change only where the threshold crosses a change the replay
    compared, so the thresholds fall into intervals that decide alike (``threshold_intervals``),
    found by one replay each; the streams' intervals are merged. A step counts as cached when
    every stream of its context cached it (as in ``cached_steps``). For each k the widest
    interval (in log scale) wins and its geometric middle is suggested: the trajectory moves
    once other steps are cached, and the middle of a wide interval keeps the most room for that
    before a decision flips.
    """
    partitions = [(trace.context, threshold_intervals(rules, pair_changes(trace))) for trace, rules in streams]
    bounds = sorted({low for _, intervals in partitions for low, _, _ in intervals if low > 0})
    if not bounds:
        return []  # nothing was compared: the threshold decides nothing in these runs
    best: dict[int, tuple[float, float, float, list[int]]] = {}
    # Above the last bound one nominal interval stands for "everything the limits allow".
    for low, high in zip(bounds, bounds[1:] + [bounds[-1] * 2.25]):
        cached = _cached_steps_in(partitions, low)
        if not cached:
            continue
        width = math.log(high / low)
        if len(cached) not in best or width > best[len(cached)][0]:
            best[len(cached)] = (width, low, high, cached)
    suggestions = [{"threshold": _round_inside(low, high), "range": [round(low, 6), round(high, 6)],
                    "cached_steps": cached} for _, low, high, cached in best.values()]
    suggestions.sort(key=lambda s: (s["threshold"], len(s["cached_steps"])))
    return suggestions[:limit] if len(suggestions) <= limit else _spread(suggestions, limit)


def threshold_intervals(rules: DecisionRules, change: PairChanges) -> list[tuple[float, float, frozenset[int]]]:
    """The thresholds as intervals ``(low, high]`` that each make the same decisions, with the steps cached.

    A replay just above ``low`` compares some changes; the smallest of them above ``low`` is
    where the next decision flips, so one replay per interval (not one per pair of steps), and
    each replay resumes at the first step that flips: the steps before it decide as before.
    """
    steps = change.steps
    position = {step: i for i, step in enumerate(steps)}
    # Any threshold above 0 lets the rules reach the threshold; ``by_threshold`` says how it decides.
    gated = rules if rules.threshold > 0 else dataclasses.replace(rules, threshold=1.0)
    intervals: list[tuple[float, float, frozenset[int]]] = []
    decisions: dict[int, tuple[bool, str]] = {}
    compared: dict[int, float] = {}          # position -> the change compared there
    states: list = []
    low, start = 0.0, 0

    def by_threshold(step: int, reference: int | None) -> tuple[bool, str]:
        value = None if reference is None else change(reference, step)
        if value is None:
            return False, NO_REFERENCE
        compared[position[step]] = value
        # Just above ``low``; cache-dit caches without comparing from a threshold of 1 on.
        return low >= 1.0 or value <= low, THRESHOLD

    while True:
        resume_state = states[start] if start < len(states) else (None, 0, 0, False)
        del states[start:]
        for later in [p for p in compared if p >= start]:
            del compared[later]
        decisions.update(gated.walk(steps, by_threshold, start=start, state=resume_state, states=states))
        cached = frozenset(step for step, (was_cached, _) in decisions.items() if was_cached)
        above = [value for value in compared.values() if value > low] if low < 1.0 else []
        high = min(above) if above else math.inf
        if high >= 1.0 and above:
            high = 1.0      # from 1 on every compared step caches
        intervals.append((low, high, cached))
        if high == math.inf:
            return intervals
        # The first step that decides otherwise above the new low: its change is that low (or, at
        # 1, the first one compared at 1 or more).
        start = min(p for p, value in compared.items() if value >= high)
        low = high


def _cached_steps_in(partitions, low: float) -> list[int]:
    """Steps every stream of their context caches at thresholds just above ``low``, over all contexts."""
    by_context: dict[int, list[frozenset[int]]] = {}
    for context, intervals in partitions:
        lows = [start for start, _, _ in intervals]
        by_context.setdefault(context, []).append(intervals[bisect.bisect_right(lows, low) - 1][2])
    cached: set[int] = set()
    for per_stream in by_context.values():
        cached |= frozenset.intersection(*per_stream)
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
