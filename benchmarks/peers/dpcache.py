"""A DPCache-style step planner as a peer: which steps to compute, chosen offline from calibration runs.

DPCache (arXiv 2602.22654; sglang serves it per model from a JSON plan) records, on calibration runs of a
model, what the model returns at every step; prices each way of reaching one computed step from the ones
before it by the error the steps between them make; and picks by dynamic programming the ``calls`` steps whose
whole path costs least. Written here from that description, for the benchmarks only: a per-run plan the
Forecast node can be measured against (``benchmarks/forecast_auto.py``).

What a step between two computed ones is given decides the cost:

- ``hold``: the last computed output is reused, DPCache's own reuse. Skipping steps ``j+1 .. k-1`` after a
  computed step ``j`` costs, per skipped step ``t``, how far the held output is from the one the model
  returns there. The cost depends on the pair ``(j, k)`` only, so the program keeps one best path per
  (calls so far, last computed step).
- ``auto``: the Forecast node's ``auto`` forecast on the chosen steps: the trend of the last two computed
  outputs, followed the share of the way ``adapters/forecast/auto_schedule.py`` gives the gap. The forecast
  at ``t`` reads the two latest computed steps ``i < j`` and the gap's end ``k`` (its share), so the cost
  is a triple's and the program keeps one best path per (calls so far, last two computed steps); the first
  gap, with one computed step, holds as the node's does.

Both price a skipped step by the mean absolute difference of the final layer's outputs (one call's: cond and
uncond together at CFG above 1), averaged over the calibration images, and sum a gap's steps as they come, as
the paper sums its per-step cost along the path. (Weighing each step by the sigma its Euler step spans, which
is how far a wrong output moves the latent, was run too: closer in 3 of 7 cells of 20 and 8 steps, farther in
4; the paper's plain sum stays.)

The first step is always computed (nothing before it to reuse). Ties keep the earlier steps, so a plan is
deterministic.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Sequence

import torch

from benchmarks.forecast_error import PACK

auto_schedule = importlib.import_module(f"{PACK}.adapters.forecast.auto_schedule")
HOLD, AUTO = "hold", "auto"


def _mean_abs(a: torch.Tensor, b: torch.Tensor) -> float:
    return (a.float() - b.float()).abs().mean().item()


def hold_costs(runs: Sequence[Sequence[torch.Tensor]]) -> list[list[float]]:
    """``C[j][k]`` (``j < k <= steps``): the cost of computing ``j`` and next ``k`` (``steps``: none again),
    holding ``j``'s output over the steps between; ``runs``: per calibration image, the output at every step."""
    steps = len(runs[0])
    costs = [[math.inf] * (steps + 1) for _ in range(steps)]
    for j in range(steps):
        running = 0.0
        costs[j][j + 1] = 0.0
        for k in range(j + 2, steps + 1):
            t = k - 1
            running += sum(_mean_abs(run[j], run[t]) for run in runs) / len(runs)
            costs[j][k] = running
    return costs


def auto_costs(runs: Sequence[Sequence[torch.Tensor]], sigmas: Sequence[float], guided: bool = True) -> dict:
    """``C[(i, j, k)]`` (``i < j < k <= steps``, ``i`` -1 for the first gap): the cost of the gap after ``j``
    when ``i`` was computed before it and ``k`` is computed next, each step between forecast as ``auto`` does
    (``sigmas``: the run's, which set each gap's share, with the ramp of a ``guided`` run or not)."""
    steps = len(runs[0])
    run_range = abs(float(sigmas[0]) - float(sigmas[steps])) or 1.0
    ramp = auto_schedule.share_ramp(guided)
    share = {(j, k): auto_schedule.gap_share(abs(float(sigmas[j]) - float(sigmas[k])) / run_range, ramp)
             for j in range(steps) for k in range(j + 1, steps + 1)}
    holds = hold_costs(runs)
    costs: dict[tuple[int, int, int], float] = {}
    for j in range(steps):
        for k in range(j + 1, steps + 1):
            costs[(-1, j, k)] = holds[j][k]
    stacked = [torch.stack([o.float().flatten() for o in run]) for run in runs]   # per image: (steps, n)
    for j in range(steps):
        ends = list(range(j + 1, steps + 1))
        levels = sorted({share[(j, k)] for k in ends})
        after = torch.arange(j + 1, steps)
        for i in range(j):
            # Per image and step t past j: the forecast's error |(o_j - o_t) + s (t - j) / (j - i) (o_j - o_i)|,
            # at each share s a gap end k may give; then summed over a gap's steps.
            reach = ((after - j) / (j - i)).float()
            error = torch.zeros(len(levels), len(after), dtype=torch.float64)
            for run in stacked:
                offset, trend = run[j] - run[after], run[j] - run[i]
                for n, s in enumerate(levels):
                    error[n] += (offset + s * reach[:, None] * trend).abs().mean(dim=1).double()
            running = torch.cat([torch.zeros(len(levels), 1, dtype=torch.float64), (error / len(stacked)).cumsum(dim=1)],
                                dim=1)
            for k in ends:
                costs[(i, j, k)] = running[levels.index(share[(j, k)]), k - j - 1].item()
    return costs


def plan_hold(costs: list[list[float]], calls: int) -> tuple[list[int], float]:
    """The ``calls`` computed steps (step 0 among them) whose held path costs least, and its cost."""
    steps = len(costs)
    if not 1 <= calls <= steps:
        raise ValueError(f"calls must be from 1 to the run's {steps} steps, got {calls}")
    best = {0: (0.0, (0,))}   # last computed step -> (cost so far, the computed steps)
    for _ in range(calls - 1):
        level: dict[int, tuple[float, tuple[int, ...]]] = {}
        for j, (cost, path) in sorted(best.items()):
            for k in range(j + 1, steps):
                value = cost + costs[j][k]
                if k not in level or value < level[k][0]:
                    level[k] = (value, path + (k,))
        best = level
    total, path = min(((cost + costs[j][steps], path) for j, (cost, path) in best.items()), key=lambda e: e[0])
    return list(path), total


def plan_auto(costs: dict, steps: int, calls: int) -> tuple[list[int], float]:
    """The ``calls`` computed steps (step 0 among them) whose path costs least under ``auto``'s forecast."""
    if not 1 <= calls <= steps:
        raise ValueError(f"calls must be from 1 to the run's {steps} steps, got {calls}")
    best = {(-1, 0): (0.0, (0,))}   # (the computed step before the last, the last) -> (cost, steps)
    for _ in range(calls - 1):
        level: dict[tuple[int, int], tuple[float, tuple[int, ...]]] = {}
        for (i, j), (cost, path) in sorted(best.items()):
            for k in range(j + 1, steps):
                value = cost + costs[(i, j, k)]
                if (j, k) not in level or value < level[(j, k)][0]:
                    level[(j, k)] = (value, path + (k,))
        best = level
    total, path = min(((cost + costs[(i, j, steps)], path) for (i, j), (cost, path) in sorted(best.items())),
                      key=lambda e: e[0])
    return list(path), total


def path_cost_hold(costs: list[list[float]], computed: Sequence[int]) -> float:
    """The calibrated cost of any held plan (a plan laid out otherwise, priced the same way)."""
    keys = [*computed, len(costs)]
    return sum(costs[a][b] for a, b in zip(keys, keys[1:]))


@dataclasses.dataclass(frozen=True)
class PlannedSchedule(auto_schedule.AutoSchedule):
    """A Forecast run on chosen steps: ``hold`` reuses the last computed output between them (the DPCache-style
    peer), ``auto`` forecasts as the node's ``auto`` does (its shares from the run's sigmas)."""

    chosen: tuple[int, ...] = (0,)
    between: str = HOLD

    def computed(self, steps: int) -> list[bool]:
        if self.chosen[-1] >= steps or self.chosen[0] != 0:
            raise ValueError(f"a plan of steps {list(self.chosen)} does not fit a run of {steps} steps")
        return [step in self.chosen for step in range(steps)]

    def shares(self, steps: int, sigmas=None, guided: bool = True) -> list[float]:
        return [0.0] * steps if self.between == HOLD else super().shares(steps, sigmas, guided)


def planned_schedule(chosen: Sequence[int], steps: int, between: str) -> PlannedSchedule:
    return PlannedSchedule(speedup=steps / len(chosen), chosen=tuple(chosen), between=between)
