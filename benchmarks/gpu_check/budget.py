"""The GPU check's time budget: the deadline, what was cut to keep it, and how many runs fit before it."""

from __future__ import annotations

import time

from .cases import COMPILED_VARIANTS, RAW_FULL_STEPS, Scale

FINISH_RESERVE_S = 25                           # stopping the server, the report
RAW_MIN_STEPS = 8


class BudgetExceeded(Exception):
    pass


class Budget:
    """Seconds left until the deadline, and what was cut to stay inside it."""

    def __init__(self, started: float, seconds: float):
        self.seconds = seconds
        self.deadline = started + seconds - FINISH_RESERVE_S
        self.cuts: list[str] = []

    def left(self) -> float:
        return self.deadline - time.time()

    def cut(self, what: str):
        print(f"[budget] {what}", flush=True)
        self.cuts.append(what)


def repeats_that_fit(seconds: float, run_s: float, runs_per_repeat: int, most: int) -> int:
    return max(0, min(most, int(seconds // (run_s * runs_per_repeat))))


def plan_raw(seconds: float, step_s: float, cases: int, most_repeats: int,
             full_steps: int = RAW_FULL_STEPS, min_steps: int = RAW_MIN_STEPS) -> tuple[int, int] | None:
    """(steps, repeats) for the Raw cases within ``seconds``: full length with as many repeats as fit,
    else one repeat of fewer steps, else None (not even ``min_steps`` fit)."""
    for repeats in range(most_repeats, 0, -1):
        if cases * repeats * full_steps * step_s <= seconds:
            return full_steps, repeats
    steps = int(seconds / (cases * step_s))
    return (steps, 1) if steps >= min_steps else None


def plan_raw_with_forecast(seconds: float, step_s: float, cases: int, forecast_cases: int, most_repeats: int,
                           full_steps: int = RAW_FULL_STEPS) -> tuple[tuple[int, int] | None, bool]:
    """``plan_raw`` for Raw's DBCache cases and its Forecast rows, and whether the Forecast rows stay.

    The order of the cuts: Raw's repeats first (the Forecast rows stay while one repeat of every case fits
    at full length), then the Forecast rows, then Raw's length. A Forecast preset is a schedule for Raw's
    full 52 steps, and a shortened Raw changes what every row means; the DBCache rows are the older figures.
    Every case is estimated at an uncached run's cost: a forecast run's host and final-layer time on a GPU
    was never measured, and over-estimating it only cuts sooner."""
    if forecast_cases:
        plan = plan_raw(seconds, step_s, cases + forecast_cases, most_repeats, full_steps)
        if plan is not None and plan[0] == full_steps:
            return plan, True
    return plan_raw(seconds, step_s, cases, most_repeats, full_steps), False


def compiled_turbo_reserve(scale: Scale, turbo_s: float) -> float:
    """What the compiled Turbo cases will likely take: a first compile, two cheaper ones, the runs."""
    return 2 * scale.compile_guess_s + len(COMPILED_VARIANTS) * scale.turbo_repeats * turbo_s


def raw_share(left: float, reserve: float, one_repeat_s: float) -> float:
    """Seconds for the eager Raw cases: what the compiled Turbo cases' ``reserve`` leaves, or half of what
    is left when that would not hold one repeat (Raw then shares with compile)."""
    seconds = left - reserve
    return max(seconds, 0.5 * left) if seconds < one_repeat_s else seconds
