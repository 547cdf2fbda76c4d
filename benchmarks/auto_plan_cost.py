"""What the Forecast node's ``auto`` planner costs when a run opens, beside one model call of Krea-2 at its real size.

``auto`` lays its plan out on the run's own sigmas when the run opens (``plan_forecast_run``: which steps to
compute, each forecast step's share), once per run. This times that call, on the host, at the step counts
users run and the speedups the node offers, and sets its median against a real-size model call: the fast end
of a Krea-2 Turbo step at 1024x1024 on a current GPU, the projection's ``GPU_CALL_S`` (an assumption, see
projection.py; a slower call only lowers the ratio). The target: below 1% of one call.

    python -m benchmarks.auto_plan_cost           # prints the table, writes results/auto_plan_cost.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from benchmarks.projection import GPU_CALL_S
from devkit.comfy_harness import load_pack

load_pack()
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run  # noqa: E402

STEPS = (8, 20, 28, 40, 52, 100)
SPEEDUPS = (2.0, 4.0, 6.0)
TARGET = 0.01   # of one model call
RESULTS = Path(__file__).resolve().parent / "results" / "auto_plan_cost.json"


def shifted_sigmas(steps: int, shift: float = 3.16) -> list[float]:
    """A flow schedule's sigmas (time-shifted, as ComfyUI's ``simple`` gives Krea-2 and Flux): what a run hands the planner."""
    ts = [1.0 - step / steps for step in range(steps + 1)]
    return [shift * t / (1 + (shift - 1) * t) for t in ts]


def plan_seconds(steps: int, speedup: float, repeats: int) -> float:
    """The median time of one run-open plan (settings from the node's inputs, then the plan on the run's sigmas)."""
    sigmas = shifted_sigmas(steps)
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        plan_forecast_run(ForecastSettings.auto(speedup), steps, sigmas)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.auto_plan_cost", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = [{"steps": steps, "speedup": speedup, "plan_s": plan_seconds(steps, speedup, args.repeats)}
            for steps in STEPS for speedup in SPEEDUPS]
    for row in rows:
        row["of_one_call"] = row["plan_s"] / GPU_CALL_S
    print(f"| steps | speedup | plan at run open | of one real-size call ({GPU_CALL_S * 1000:.0f} ms) |")
    print("|---|---|---|---|")
    for row in rows:
        print(f"| {row['steps']} | {row['speedup']:g} | {row['plan_s'] * 1e6:.0f} us | {row['of_one_call']:.3%} |")
    worst = max(row["of_one_call"] for row in rows)
    print(f"check: the planner's cost at run open below {TARGET:.0%} of one model call: "
          f"{'met' if worst < TARGET else 'NOT met'} (at most {worst:.3%})")
    args.out.write_text(json.dumps({"call_s": GPU_CALL_S, "repeats": args.repeats, "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
