"""The threshold advisor's cost after a run: what the record assembly adds on the sampling thread.

A run's record replays cache-dit's rules to explain each step and to suggest thresholds
(``adapters/record/run_record.py`` with ``adapters/dbcache/threshold_advisor.py``); that happens after the last model
call, outside ``duration_s``, before the sampler returns. This times it for long runs with split
CFG (two streams, the most work), on residuals that drift step by step like a sampling trajectory,
with the node's limits and with no limit on continuous cached steps (where a step's reference can
be any earlier step). Targets: at most 50 ms at 52 steps and 0.5 s at 200 steps on a 2-core CPU.

    python -m benchmarks.advisor [--steps 52 100 200] [--repeats 3]
"""

from __future__ import annotations

import argparse
import math
import statistics
import time

from devkit.comfy_harness import load_pack

TARGETS_S = {52: 0.05, 200: 0.5}
SAMPLE_VALUES = 1 << 16   # values per residual; the pack keeps a sample of residual_trace.SAMPLE_SIZE of them


def drifting_traces(steps: int, streams: int = 2, seed: int = 0):
    """Traces of a run with caching off: every step computed, each residual a step on from the last."""
    import torch

    from krea2_cachedit.adapters.dbcache.residual_trace import StreamTrace

    generator = torch.Generator().manual_seed(seed)
    traces = []
    for branch in range(streams):
        start, end = (torch.randn(SAMPLE_VALUES, generator=generator) for _ in range(2))
        trace = StreamTrace((branch,), context=0, start_step=0)
        for step in range(steps):
            angle = step / max(steps - 1, 1) * math.pi / 2
            noise = 0.3 * torch.randn(SAMPLE_VALUES, generator=generator)
            trace.observe(step, (math.cos(angle) * start + math.sin(angle) * end + noise).reshape(1, 16, -1))
            trace.finish(step, cached=False)
        traces.append(trace)
    return traces


def assemble(traces, settings) -> tuple[float, float, list]:
    """What the record assembly does with the traces: each step's change and reason, the suggestions."""
    from krea2_cachedit.adapters.dbcache.decision_rules import DecisionRules
    from krea2_cachedit.adapters.dbcache.threshold_advisor import suggest_thresholds

    rules = DecisionRules.for_context(settings, None, start_step=0)
    started, cpu_started = time.perf_counter(), time.process_time()
    for trace in traces:
        trace.measured_diffs()
        rules.explain(sorted(trace.cached), trace.cached)
    suggestions = suggest_thresholds([(trace, rules) for trace in traces])
    return time.perf_counter() - started, time.process_time() - cpu_started, suggestions


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, nargs="+", default=[52, 100, 200])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    load_pack()
    from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings

    limits = {"node defaults (max 3 in a row)": DBCacheSettings(residual_diff_threshold=0.0),
              "no limit in a row": DBCacheSettings(residual_diff_threshold=0.0, max_continuous_cached_steps=-1)}
    print(f"Threshold advisor, split CFG (2 streams), caching off; median of {args.repeats} runs:")
    print(f"{'limits':<32}{'steps':>6}{'wall s':>9}{'CPU s':>8}{'suggestions':>13}{'target s':>10}  verdict")
    for name, settings in limits.items():
        for steps in args.steps:
            times, cpu_times, suggestions = [], [], []
            for _ in range(args.repeats):
                seconds, cpu_seconds, suggestions = assemble(drifting_traces(steps), settings)
                times.append(seconds)
                cpu_times.append(cpu_seconds)
            median = statistics.median(times)
            target = TARGETS_S.get(steps)
            verdict = "-" if target is None else ("ok" if median <= target else "OVER")
            print(f"{name:<32}{steps:>6}{median:>9.3f}{statistics.median(cpu_times):>8.3f}{len(suggestions):>13}"
                  f"{'-' if target is None else format(target, '.2f'):>10}  {verdict}")
    print("wall s: on this machine now; CPU s: the process's CPU time (the advisor runs on one thread), "
          "what the wall time is on a machine with a core to itself.")


if __name__ == "__main__":
    main()
