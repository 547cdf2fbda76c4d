"""The Forecast node's ``auto`` plan: the speed a user asks for, laid out on the run's own steps and sigmas.

A run of ``steps`` steps at ``speedup`` computes ``calls`` of them, the most that still reach the speedup
(``steps // speedup``, at least one), from the first step at a steady spacing, except at the two ends: the first
gap is ``FIRST_GAP`` of the spacing and the steps left after the last computed one ``LAST_GAP`` of it. The first
gap holds step 0's output (one computed step gives no trend), so it is an Euler step of a held prediction, the
least accurate gap: kept short, the trend starts early. The last steps are where the sigmas fall fastest and a
held or extrapolated output moves the latent most: kept short too. Between computed steps the model's output is
forecast from the last two, a share of the way their trend points; at share 0 a forecast step reuses the last
computed output, an Euler step of a held prediction is linear in sigma, and the run is a shorter run on the
computed steps' sigmas. So the plan's space holds fewer steps, and the layout and shares are what it adds.

The share is set per gap from the sigma the gap spans (a share of the run's whole sigma range): a short gap
follows its trend in full, a long one holds, and the ones between go part of the way (``SHARE_RAMP``). A
trend fitted on two steps far apart in sigma points nowhere near where the model goes next. A run whose
prediction is the model's own (one conditioning per step: CFG 1, as distilled models run) follows it further
(``UNGUIDED_SHARE_RAMP``): its outputs move straighter than a guided combination of two, which CFG's scale
pulls apart.

Chosen on the trained and Turbo test models on tuning images none of the benchmarks measure ((label, seed)
(5, 51), (1, 52), (6, 54), (3, 55)): the evenly spread layout with the ramp (0.25, 0.5) lost to fewer steps at
3 calls of 20 steps and 5 of 8 (extrapolating 3 calls of 20 at all lost to holding); the shorter ends with the
ramp (0.2, 0.4) beat it in all 19 cells of the grid on both pairs of images (docs/benchmarks.md, "Forecast auto").
The CFG 1 ramp was chosen on the same tuning images (``benchmarks/auto_ramps.py``): closer than the guided one at
CFG 1 on the Turbo and the trained test models, far farther at CFG 3.5 where gaps are long (docs/benchmarks.md,
"At CFG 1, the trend followed further").
"""

from __future__ import annotations

import dataclasses
import math

AUTO = "auto"
DEFAULT_SPEEDUP = 2.0
MAX_SPEEDUP = 50.0
# (full, hold): a gap spanning at most ``full`` of the run's sigma range is forecast in full, one spanning
# ``hold`` or more holds the last computed output, linearly between.
SHARE_RAMP = (0.2, 0.4)
# The same at one conditioning per step (CFG 1): the model's own prediction, no guided combination.
UNGUIDED_SHARE_RAMP = (0.4, 0.8)
# The first gap and the steps after the last computed one, as shares of the spacing between computed steps.
FIRST_GAP, LAST_GAP = 0.85, 0.7


def auto_calls(steps: int, speedup: float) -> int:
    """The model calls a run of ``steps`` computes at ``speedup``: the most whose speedup reaches it."""
    return max(1, min(steps, math.floor(steps / speedup + 1e-9)))


def computed_steps(steps: int, calls: int) -> list[int]:
    """The ``calls`` steps a run of ``steps`` computes: step 0, then one every ``spacing`` from ``FIRST_GAP`` of it,
    leaving ``LAST_GAP`` of it after the last (rounded to steps, each after the one before, all inside the run)."""
    if calls <= 1:
        return [0]
    spacing = steps / (FIRST_GAP + calls - 2 + LAST_GAP)
    chosen = [0]
    for call in range(1, calls):
        at = round(spacing * (FIRST_GAP + call - 1))
        chosen.append(max(chosen[-1] + 1, min(steps - (calls - call), at)))
    return chosen


def share_ramp(guided: bool) -> tuple[float, float]:
    """The ramp of a run that combines more than one conditioning per step (``guided``: CFG above 1) or not."""
    return SHARE_RAMP if guided else UNGUIDED_SHARE_RAMP


def gap_share(span: float, ramp: tuple[float, float] = SHARE_RAMP) -> float:
    """How far a gap spanning ``span`` of the run's sigma range follows its trend (1 in full, 0 holds)."""
    full, hold = ramp
    return min(1.0, max(0.0, (hold - span) / (hold - full)))


@dataclasses.dataclass(frozen=True)
class AutoSchedule:
    """What ``ForecastRun`` asks of a schedule (the computed steps; no warmup or final steps of its own), and
    the share of each forecast step, from the run's sigmas."""

    speedup: float = DEFAULT_SPEEDUP

    def __post_init__(self):
        if not (math.isfinite(self.speedup) and 1.0 <= self.speedup <= MAX_SPEEDUP):
            raise ValueError(f"speedup must be from 1 (every step computed) to {MAX_SPEEDUP:g}, got {self.speedup}")

    warmup_steps = 0            # every computed step is the plan's own, the first among them
    final_computed_steps = 0

    def computed(self, steps: int) -> list[bool]:
        chosen = set(computed_steps(steps, auto_calls(steps, self.speedup)))
        return [step in chosen for step in range(steps)]

    def shares(self, steps: int, sigmas=None, guided: bool = True) -> list[float]:
        """Per step, the share its forecast goes (a computed step's is never read). The first gap holds: one
        computed step gives no trend. Without the run's sigmas (a plan asked outside a run) they are taken
        as evenly spaced; ``guided``: the run combines more than one conditioning per step (CFG above 1)."""
        if sigmas is None or len(sigmas) <= steps:
            sigmas = [1.0 - step / steps for step in range(steps + 1)]
        sigmas = [float(s) for s in sigmas]
        run_range = abs(sigmas[0] - sigmas[steps]) or 1.0
        ramp = share_ramp(guided)
        starts = [step for step, computed in enumerate(self.computed(steps)) if computed] + [steps]
        shares = [0.0] * steps
        for gap, (start, end) in enumerate(zip(starts, starts[1:])):
            share = gap_share(abs(sigmas[start] - sigmas[end]) / run_range, ramp) if gap else 0.0
            shares[start + 1:end] = [share] * (end - start - 1)
        return shares
