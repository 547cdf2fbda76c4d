"""cache-dit's calibrators as the node offers them: a name and the parameters that matter for it.

Without a calibrator, a cached step serves the residual of the last computed
step as it was. A calibrator forecasts that residual for the current step from
the computed steps before it instead; cache-dit's fusion is otherwise the same
(the first Fn blocks are still computed every step, and its threshold, warmup
and limits decide which steps are cached exactly as without one). From
cache-dit 1.5.3's own descriptions:

- ``taylorseer``: a Taylor expansion around the last computed step, with
  derivatives from finite differences of the computed steps (order 1 or 2
  recommended; higher orders cost more and diverge faster over long gaps).
- ``foca``: FoCa, an ODE predictor-corrector (a BDF2 forecast, corrected with
  Heun's rule against the last computed step); no parameters.
- ``dmd``: Dynamic Mode Decomposition (Prony), an exponential-basis forecast fitted
  on the last ``dmd_history`` computed steps. It needs at least 4 evenly spaced
  computed steps; before that it serves cache-dit's first-order Taylor forecast.

None of them has been measured on real Krea-2 weights, so the node's default is
``none`` (the reference settings measured on real weights use no calibrator).
"""

from __future__ import annotations

CALIBRATORS = ("none", "taylorseer", "foca", "dmd")
# The node inputs each calibrator reads; the others are kept as set but do nothing.
PARAMETERS = {"none": (), "taylorseer": ("taylorseer_order",), "foca": (), "dmd": ("dmd_history",)}
TAYLORSEER_ORDERS = (1, 4)
# cache-dit's DMD fits one complex pole (two real degrees of freedom) from 3 snapshot
# pairs, so it needs 4 snapshots; a window that can never hold 4 would never fit. Its
# docs call 5-6 the sweet spot: the dynamics drift over the steps, and each snapshot
# is a full residual tensor kept per stream.
DMD_MIN_SNAPSHOTS = 4
DMD_HISTORY = (DMD_MIN_SNAPSHOTS, 16)


def check_calibrator(calibrator: str, taylorseer_order: int, dmd_history: int) -> None:
    """A clear ``ValueError`` naming the input when a calibrator setting is out of range."""
    if calibrator not in CALIBRATORS:
        raise ValueError(f"calibrator must be one of {CALIBRATORS}, got {calibrator!r}")
    low, high = TAYLORSEER_ORDERS
    if not low <= taylorseer_order <= high:
        raise ValueError(f"taylorseer_order must be between {low} and {high}, got {taylorseer_order}")
    low, high = DMD_HISTORY
    if not low <= dmd_history <= high:
        raise ValueError(
            f"dmd_history must be between {low} and {high}, got {dmd_history}: cache-dit's DMD needs "
            f"{DMD_MIN_SNAPSHOTS} computed steps in its window before it forecasts at all.")


def calibrator_config(settings):
    """cache-dit's own config for the settings' calibrator, or None for ``none``."""
    import cache_dit

    if settings.calibrator == "taylorseer":
        return cache_dit.TaylorSeerCalibratorConfig(taylorseer_order=settings.taylorseer_order)
    if settings.calibrator == "foca":
        return cache_dit.FoCaCalibratorConfig()
    if settings.calibrator == "dmd":
        return cache_dit.DMDCalibratorConfig(dmd_history=settings.dmd_history)
    return None


def calibrator_summary(settings: dict, streams: list[dict]) -> dict | None:
    """What ran, for the stats: the calibrator's name and only the parameters it reads.

    ``settings`` and ``streams`` are a record's; None when the run had no settings
    (left uncached). For DMD, also the cached steps it forecast with its fit (the
    others got its Taylor fallback): on short schedules that may be none.
    """
    name = settings.get("calibrator")
    if name is None:
        return None
    summary = {"name": name, **{key: settings[key] for key in PARAMETERS.get(name, ())}}
    if name == "dmd":
        summary["forecast_steps"] = dmd_forecast_steps(streams, settings["dmd_history"])
    return summary


def dmd_forecast_steps(streams: list[dict], dmd_history: int) -> list[int]:
    """Cached steps where cache-dit's DMD had its 4 evenly spaced computed steps to fit on.

    Mirrors cache-dit's rule: each stream of each cache context has its own DMD
    state, holding that stream's last ``dmd_history`` computed steps; a cached
    step is forecast by DMD when the evenly spaced tail of those steps is at
    least 4 long, and by the first-order Taylor fallback otherwise. A step counts
    when every stream that cached it had the fit. (A degenerate fit, which cache-dit
    answers by reusing the last residual, is not visible from here.)
    """
    fitted: dict[int, bool] = {}
    for stream in streams:
        cached = set(stream["cached_steps"])
        window: list[int] = []
        for step in stream["steps"]:
            if step not in cached:
                window = (window + [step])[-dmd_history:]
                continue
            fitted[step] = fitted.get(step, True) and _even_tail(window) >= DMD_MIN_SNAPSHOTS
    return sorted(step for step, ok in fitted.items() if ok)


def _even_tail(steps: list[int]) -> int:
    """Length of the longest evenly spaced run of computed steps that ends with the newest."""
    if len(steps) < 2:
        return len(steps)
    spacing, length = steps[-1] - steps[-2], 2
    while length < len(steps) and steps[-length] - steps[-length - 1] == spacing:
        length += 1
    return length
