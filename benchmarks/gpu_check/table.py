"""The GPU check's report as printed: one table of the cases, then caching off's overhead, the two-GPU
runs, what the budget cut, the errors and the timings."""

from __future__ import annotations

from .rows import OVERHEAD_LIMIT


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def print_table(report: dict):
    print(f"\nKrea-2 Cache-DiT GPU check: {report['device']}, {report['model']['description']}, "
          f"{report['settings']['size']}x{report['settings']['size']}; medians of side-by-side runs")
    header = (f"{'case':<32}{'steps':>6}{'skipped':>8}{'wall s':>9}{'ideal':>7}{'speedup':>9}{'vs eager':>9}"
              f"{'wall/ideal':>11}{'peak VRAM':>11}{'+VRAM':>10}{'est. error':>11}{'deviation':>11}")
    print(header)
    print("-" * len(header))
    for r in report["cases"]:
        print(f"{r['case']:<32}{r['steps']:>6}{_fmt(r['cached'], 's'):>8}{r['seconds']:>9.3f}{r['ideal']:>6.2f}x"
              f"{r['speedup']:>8.2f}x{_fmt(r['vs_eager'], '.2f', 'x'):>9}{r['wall_over_ideal']:>11.0%}"
              f"{_fmt(r['peak_vram_gib'], '.1f', ' GiB'):>11}{_fmt(r.get('extra_vram_mib'), '+.0f', ' MiB'):>10}"
              f"{_fmt(r.get('estimate_error'), '+.1%'):>11}{_fmt(r['deviation'], '.4f'):>11}")
    print("skipped = steps whose blocks the node skipped (DBCache: cached; Forecast: forecast); ideal = block "
          "evaluations without the node / with it (a forecast step runs none); speedup = uncached time / time (same compile "
          "mode); vs eager = eager uncached time / time; +VRAM = CUDA peak over the uncached case's (same "
          "compile mode); est. error = the node's estimated uncached time against the caching-off case's "
          "measured duration_s (medians); deviation = relative L2 of the final latent from "
          "the uncached one (compiled uncached: from eager uncached), same seed.")
    for workload, o in report["caching_off_overhead"].items():
        flag = "ok" if o["ok"] else f"FLAG: {OVERHEAD_LIMIT:.0%} or more"
        print(f"caching off, {workload}: overhead {o['overhead']:+.2%} vs no node over {o['repeats']} repeats "
              f"({flag}{'; smoke run timings say nothing' if report['smoke'] else ''}), "
              f"{'bit-identical' if o['bit_identical'] else 'NOT bit-identical'}")
    print(f"two GPUs: {report.get('two_gpu', 'not run')}")
    for r in report["cases"]:
        if r["vs_one_gpu"] is not None:
            print(f"  {r['case']}: {r['vs_one_gpu']:.2f}x vs Raw uncached on one GPU, {r['devices']} devices "
                  f"in its stats")
    for cut in report["budget"]["cuts"]:
        print(f"cut: {cut}")
    for error in report["errors"]:
        print(f"ERROR: {error}")
    print("timings: " + ", ".join(f"{k} {v:.1f} s" for k, v in report["timings"].items()))
