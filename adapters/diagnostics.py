"""Why a run cached what it did: residual changes, per-step reasons, threshold suggestions.

cache-dit decides per stream and step (``CachedContextManager.can_cache``): never
in warmup; with a step mask the mask alone decides; then the limits
(``max_cached_steps``, ``max_continuous_cached_steps``); then the threshold:
the step is cached when the relative change of the Fn blocks' residual,
``mean|r_k - r_t| / mean|r_k|``, is below it, where ``k`` is the last *computed*
step of that stream (cache-dit keeps no residual of a cached step).

cache-dit measures that change only when the threshold can decide, and keeps
it to itself. The pack measures it for every step, the same way (the same
formula in the residual's own dtype, so the very value cache-dit compares), from
the Fn residual its block hooks see (``StreamTrace``), and replays cache-dit's
rules (``DecisionRules``) to say why each step went the way it did and which
thresholds would have cached what (``suggest_thresholds``).

The advisor needs the change between other pairs of steps too, since a different
threshold computes different steps: each step's residual is kept as a fixed
subsample of at most ``SAMPLE_SIZE`` values (at most 64 KiB per step and stream), which
estimates the mean absolute values of a full-size residual to about half a
percent; the pairs cache-dit compared keep their exact value.
"""

from __future__ import annotations

import bisect
import dataclasses
import math

import numpy
import torch

SAMPLE_SIZE = 1 << 14

# Reasons, as reported per step.
WARMUP, FRESH_CONTEXT, MASK, MAX_CACHED, MAX_CONTINUOUS = "warmup", "fresh_context", "mask", "max_cached", "max_continuous"
THRESHOLD, THRESHOLD_OFF, NO_REFERENCE = "threshold", "threshold_off", "no_reference"


def relative_change(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """cache-dit's residual change, as a 0-d tensor (no sync): the very value it compares.

    cache-dit (``CachedContextManager.similarity``) computes ``mean|ref - cur| / mean|ref|`` in
    the residual's own dtype (bf16 on a bf16 model): so does this, with the same operations in
    the same order, so that a value shown below the threshold is one cache-dit cached.
    ``StreamTrace`` takes the same two means apart (see ``observe``); the quotient is the same.
    """
    return change_numerator(reference, current) / change_scale(reference)


def change_numerator(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    return (reference - current).abs().mean()


def change_scale(reference: torch.Tensor) -> torch.Tensor:
    return reference.abs().mean()


def sample_index(numel: int, device=None) -> torch.Tensor | None:
    """``SAMPLE_SIZE`` evenly spread positions in ``range(numel)`` (None: take every element).

    Integer arithmetic: a float32 ``linspace`` rounds above 2**24 elements (one 1024x1024 Krea-2
    image's Fn residual is 26M) and its last index would be ``numel``, out of bounds.
    """
    if numel <= SAMPLE_SIZE:
        return None
    return torch.arange(SAMPLE_SIZE, dtype=torch.int64, device=device) * (numel - 1) // (SAMPLE_SIZE - 1)


class StreamTrace:
    """One stream cache-dit keeps a residual for (cond, uncond, or one call per step) in one context.

    It holds one full-size Fn residual, the last computed step's (cache-dit's reference): the
    current call's residual replaces it as soon as the call is known to compute (``computing``),
    before the middle blocks allocate their activations.
    """

    def __init__(self, branches: tuple[int, ...], context: int, start_step: int, blocks: str | None = None):
        self.branches = branches
        self.blocks = blocks   # the block list whose Fn residual this is, when the model has several
        self.context = context
        self.start_step = start_step
        # step -> (reference step, mean|ref - cur|, mean|ref|) as 0-d tensors, None where there was no
        # reference. Divided once, after the run: the same quotient, one device op less per call.
        self.diffs: dict[int, tuple[int, torch.Tensor, torch.Tensor] | None] = {}
        self.samples: dict[int, torch.Tensor] = {}   # in the residual's dtype; made float after the run
        self.cached: dict[int, bool] = {}
        self._reference: tuple[int, torch.Tensor] | None = None   # (step, Fn residual) of the last computed step
        # mean|ref| of the reference, computed when first compared: every step cached against the same
        # reference shares it.
        self._reference_scale: torch.Tensor | None = None
        self._pending: tuple[int, torch.Tensor] | None = None
        self._index: torch.Tensor | None = None
        self._index_for: tuple[int, torch.device] | None = None   # (numel, device) ``_index`` was made for

    @torch.no_grad()
    def observe(self, step: int, residual: torch.Tensor) -> None:
        """The Fn residual of this stream's call at ``step`` (before cache-dit decides)."""
        residual = residual.detach()
        reference = self._reference
        if reference is not None and reference[1].shape == residual.shape:
            if self._reference_scale is None:
                self._reference_scale = change_scale(reference[1])
            self.diffs[step] = (reference[0], change_numerator(reference[1], residual), self._reference_scale)
        else:
            self.diffs[step] = None
        flat = residual.reshape(-1)
        if self._index_for != (flat.numel(), flat.device):
            self._index, self._index_for = sample_index(flat.numel(), flat.device), (flat.numel(), flat.device)
        # A small residual is its own sample (a view: it is no larger than a sample). ``index_select``:
        # the same values as ``flat[index]``, without advanced indexing's setup (about 50 us a call on a CPU).
        self.samples[step] = flat if self._index is None else flat.index_select(0, self._index)
        self._pending = (step, residual)

    def computing(self, step: int) -> None:
        """The call at ``step`` computes in full: its residual becomes the reference now."""
        if self._pending is not None and self._pending[0] == step:
            self._reference, self._pending = self._pending, None
            self._reference_scale = None

    def finish(self, step: int, cached: bool) -> None:
        """What the call at ``step`` turned out to be; a computed step becomes the next reference."""
        self.cached[step] = cached
        if not cached:
            self.computing(step)
        self._pending = None

    def release(self) -> None:
        self._reference, self._reference_scale, self._pending = None, None, None

    def held_residuals(self) -> int:
        """Full-size Fn residuals held now: between calls and through the middle blocks, one."""
        return sum(held is not None for held in (self._reference, self._pending))

    def measured_diffs(self) -> dict[int, float | None]:
        """Each step's change against its reference, as cache-dit computed it (one device read for all)."""
        steps = [s for s, d in self.diffs.items() if d is not None]
        values = []
        if steps:
            numerators, scales = (torch.stack([self.diffs[s][i] for s in steps]) for i in (1, 2))
            values = (numerators / scales).float().tolist()   # elementwise: each the quotient cache-dit forms
        measured = dict(zip(steps, values))
        return {step: measured.get(step) for step in self.diffs}

    def pair_changes(self) -> "PairChanges":
        """The change between any two of this stream's steps (what the advisor replays)."""
        measured = self.measured_diffs()
        exact = {(self.diffs[t][0], t): value for t, value in measured.items() if value is not None}
        return PairChanges(_host_arrays(self.samples), exact)


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

        decisions = self._walk(steps, as_it_happened, follow=cached)
        return {step: reason for step, (_, reason) in decisions.items()}

    def _walk(self, steps: list[int], by_threshold, follow: dict[int, bool] | None = None,
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


# --- the threshold advisor -----------------------------------------------------------------

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
    partitions = [(trace.context, threshold_intervals(rules, trace.pair_changes())) for trace, rules in streams]
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
        decisions.update(gated._walk(steps, by_threshold, start=start, state=resume_state, states=states))
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
