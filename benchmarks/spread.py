"""How sure a side-by-side timing is: per-repeat ratios, their spread, and verdicts the spread supports.

Stdlib only (the core test tier checks it with plain numbers). The benchmarks time every case once
per repeat, alternating the order, so a case's time is paired with the uncached time of the same
repeat: the ratio of the pair cancels drift (background load, thermal) that hits both alike. A row
reports the median of those per-repeat ratios +- the distance to the farther of their quartiles, so
the printed range holds the middle half of the repeats even when one outlier pulls one quartile
away; a verdict against a margin, or a flag, is given only when that printed range lies wholly on
one side of the margin.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

MIN_REPEATS = 3          # never fewer, whatever the spread
TARGET_SPREAD = 0.03     # repeat until every row's spread is within +-3% of its median (or the budget is spent)


@dataclasses.dataclass(frozen=True)
class Spread:
    median: float
    low: float               # first quartile of the per-repeat values
    high: float              # third quartile

    @property
    def half_range(self) -> float:
        """The distance from the median to the farther quartile (in the values' own units)."""
        return max(self.median - self.low, self.high - self.median)

    @property
    def half_width(self) -> float:
        """``half_range`` relative to the median (0.03 = +-3%): the spread as printed."""
        return self.half_range / abs(self.median) if self.median else float("inf")

    @property
    def bounds(self) -> tuple[float, float]:
        """The printed range, median +- half_range: it holds both quartiles."""
        return self.median - self.half_range, self.median + self.half_range

    def scaled(self, factor: float) -> "Spread":
        return Spread(self.median * factor, self.low * factor, self.high * factor)

    def shifted(self, offset: float) -> "Spread":
        return Spread(self.median + offset, self.low + offset, self.high + offset)


def spread(values: list[float]) -> Spread:
    """Median and interquartile range of per-repeat values (one value: no spread known, zero width)."""
    values = sorted(values)
    if len(values) == 1:
        return Spread(values[0], values[0], values[0])
    low, median, high = statistics.quantiles(values, n=4, method="inclusive")
    return Spread(median, low, high)


CONFIDENCE = 0.95


def median_interval(values: list[float], confidence: float = CONFIDENCE) -> Spread:
    """The median of many per-repeat values and a distribution-free confidence interval for it.

    The interquartile range says how much one repeat varies; a small fixed cost (a 1% margin) hides
    inside it however many repeats run. How sure the *median* of many is narrows with their number:
    its interval is the pair of order statistics (the j-th smallest and the j-th largest) holding the
    true median with at least ``confidence``, whatever the noise's shape (the median of any
    distribution lies below each value with probability 1/2, so the count below it is binomial).
    """
    values = sorted(values)
    n = len(values)
    tail = (1.0 - confidence) / 2
    below, j = 0.0, -1
    while below + math.comb(n, j + 1) / 2 ** n <= tail:
        j += 1
        below += math.comb(n, j) / 2 ** n
    if j < 0:
        raise ValueError(f"{n} values cannot bound a median with {confidence:.0%} confidence; take more")
    return Spread(statistics.median(values), values[j], values[n - 1 - j])


def interval_at_least(interval: Spread, floor: float) -> str:
    """``ok`` / ``BELOW`` when a confidence interval (``median_interval``) lies wholly on one side of
    the floor, else ``undecided``. Unlike ``at_least`` on an interquartile range, a narrow margin is
    decided by a narrow interval, however many repeats that took."""
    if interval.low >= floor:
        return "ok"
    if interval.high < floor:
        return "BELOW"
    return "undecided"


def paired_ratios(numerators: list[float], denominators: list[float]) -> list[float]:
    """Per-repeat ratios of two cases timed in the same repeats (index i = repeat i)."""
    if len(numerators) != len(denominators):
        raise ValueError(f"unpaired repeats: {len(numerators)} against {len(denominators)}")
    return [n / d for n, d in zip(numerators, denominators)]


def caching_efficiency(times: list[float], baseline_times: list[float], ideal: float, summary=spread) -> Spread:
    """What caching returns of the blocks it skips: the speedup over the baseline, per repeat, over the
    ideal. The baseline is the same graph with caching off (it carries the node's own per-call cost and
    its text-path reuse as well), timed in the same repeats. The demo and the peer benchmark both judge
    their caching rows with it: the demo by the spread of its repeats (``spread``), the peer benchmark,
    with a fixed number of repeats, by the median's confidence interval (``median_interval``)."""
    return summary(paired_ratios(baseline_times, times)).scaled(1 / ideal)


def stable(spreads: list[Spread], target: float = TARGET_SPREAD) -> bool:
    return all(s.half_width <= target for s in spreads)


def keep_repeating(repeats: int, spreads: list[Spread], elapsed_s: float, budget_s: float,
                   min_repeats: int = MIN_REPEATS, target: float = TARGET_SPREAD) -> bool:
    """Another repeat: until the minimum is run, then while some row is unstable and time is left."""
    if repeats < min_repeats:
        return True
    return not stable(spreads, target) and elapsed_s < budget_s


def at_least(value: Spread, floor: float) -> str:
    """``ok`` / ``BELOW`` when the whole printed range is on one side of the floor, else ``undecided``;
    also ``undecided`` when the range is wider than the margin judged (a floor of 0.90: +-10%)."""
    if value.half_width > 1.0 - floor:
        return "undecided"
    low, high = value.bounds
    if low >= floor:
        return "ok"
    if high < floor:
        return "BELOW"
    return "undecided"


def within(value: Spread, tolerance: float) -> str:
    """``ok`` / ``OVER`` when the whole printed range is inside +-tolerance, or wholly outside it, else
    ``undecided``; also ``undecided`` when the range is wider than the tolerance."""
    if value.half_range > tolerance:
        return "undecided"
    low, high = value.bounds
    if -tolerance <= low and high <= tolerance:
        return "ok"
    if high < -tolerance or low > tolerance:
        return "OVER"
    return "undecided"


def above_ideal(efficiency: Spread) -> bool:
    """Wall speedup beyond its ideal even at the low end of its printed range: a measurement problem, not
    a result (the ideal counts only block evaluations saved; the cache never saves more than that)."""
    return efficiency.bounds[0] > 1.0


def show(verdict: str, value: Spread, points: bool = False) -> str:
    """A verdict as printed: an undecided one says how wide the range was."""
    if verdict != "undecided":
        return verdict
    width = value.half_range if points else value.half_width
    return f"undecided (spread +-{width:.1%})"
