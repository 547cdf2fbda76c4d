"""The GPU check's table: what each case measured, and its row against its reference.

A row's speedup and deviation are against the uncached run of the same workload and compile mode
(compiled uncached: against eager uncached); caching off is flagged when it costs 1% or more.
DBCache rows and Forecast rows alike: the node's record says which steps it skipped (cached or
forecast) and how many block evaluations ran.
"""

from __future__ import annotations

import dataclasses
import statistics

from benchmarks.speedup import Case, relative_l2
from .cases import TWO_GPUS, VARIANTS, Workload, forecast_preset

OVERHEAD_LIMIT = 0.01                           # caching off vs no node


@dataclasses.dataclass
class Measured:
    case: Case
    workload: str
    variant: str
    compiled: bool
    inputs: dict | None                       # what the node was sent (the Forecast node: its preset)
    times: list[float] = dataclasses.field(default_factory=list)
    latents: dict[int, object] = dataclasses.field(default_factory=dict)   # seed -> final latent
    stats: dict | None = None
    records: list[dict] = dataclasses.field(default_factory=list)       # the node's record of each timed run
    peak_allocated: int | None = None
    warmup_s: float | None = None
    graphs_in_warmup: int = 0                 # graphs torch.compile compiled during the warm-up
    graphs_in_timed_runs: int = 0             # ... and during the timed runs (then their times include it)

    @property
    def seconds(self) -> float:
        return statistics.median(self.times)

    @property
    def key(self) -> tuple[str, bool, str]:
        """Where the row stands in a table of rows."""
        return self.workload, self.compiled, self.variant


def new_row(workload: Workload, variant: str, compiled: bool, steps: int | None = None) -> Measured:
    """A row not measured yet: ``variant`` of ``workload`` (a DBCache variant, or "forecast <preset>" for
    the Forecast node), behind TorchCompileModel when ``compiled``."""
    name = f"{workload.name}{' compiled' if compiled else ''} {variant}"
    backend, steps = "inductor" if compiled else None, steps or workload.steps
    preset = forecast_preset(variant)
    if preset is not None:
        forecast = {"preset": preset}
        return Measured(Case(name, steps, workload.cfg, {}, backend, forecast=forecast), workload.name, variant,
                        compiled, forecast)
    inputs = VARIANTS[variant]
    return Measured(Case(name, steps, workload.cfg, inputs, backend), workload.name, variant, compiled, inputs)


def reference_of(row: Measured, rows: dict[tuple, Measured]) -> Measured | None:
    """What a row's speedup and deviation are measured against: the uncached run of the same
    workload and compile mode; for compiled uncached, eager uncached."""
    if row.variant == "uncached":
        return rows.get((row.workload, False, "uncached")) if row.compiled else None
    return rows.get((row.workload, row.compiled, "uncached"))


def estimate_error(row: Measured, rows: dict[tuple, Measured]) -> float | None:
    """How far a cached row's estimate of its uncached time is from the uncached time measured.

    The node estimates what its run would have taken uncached (``estimated_uncached_s``); the same
    graph with caching off measures that over the same span (its ``duration_s``). Medians of the
    timed runs; eager only (the compiled cases have no caching-off row).
    """
    off = rows.get((row.workload, row.compiled, "caching off"))
    if row.variant in ("uncached", "caching off") or off is None or not row.records or not off.records:
        return None
    estimated = statistics.median(r["estimated_uncached_s"] for r in row.records)
    return estimated / statistics.median(r["duration_s"] for r in off.records) - 1.0


def extra_peak(row: Measured, rows: dict[tuple, Measured]) -> int | None:
    """The node's extra CUDA peak over the graph without it (same workload and compile mode)."""
    uncached = rows.get((row.workload, row.compiled, "uncached"))
    if row.variant == "uncached" or uncached is None or row.peak_allocated is None \
            or uncached.peak_allocated is None:
        return None
    return row.peak_allocated - uncached.peak_allocated


def summarize_row(row: Measured, rows: dict[tuple, Measured]) -> dict:
    reference = reference_of(row, rows)
    eager = rows.get((row.workload, False, "uncached"))
    stats = row.stats or {}
    # Block evaluations without the node over those with it, from the record: a cached step counts the
    # blocks cache-dit still computes (Fn, Bn), a forecast step none (its call runs no block, only the
    # model's embedding and final layer), so the ideal of either node reads the same way.
    ideal = stats.get("ideal_speedup", 1.0)
    speedup = reference.seconds / row.seconds if reference and reference.times and row.variant != "uncached" else 1.0
    seeds = sorted(set(row.latents) & set(reference.latents)) if reference else []
    extra = extra_peak(row, rows)
    return {
        "case": row.case.name, "workload": row.workload, "variant": row.variant, "compiled": row.compiled,
        "steps": row.case.steps, "cfg": row.case.cfg, "cfg_mode": stats.get("cfg_mode"),
        "method": stats.get("method", {}).get("name"),
        # The steps whose blocks the node skipped: DBCache's cached steps, the Forecast node's forecast ones.
        "cached": f"{len(stats['skipped_steps'])}/{stats['steps']}" if stats else None,
        "cached_steps": stats.get("skipped_steps"), "forecast_steps": stats.get("forecast_steps"),
        "seconds": row.seconds, "times": row.times, "repeats": len(row.times), "warmup_s": row.warmup_s,
        "ideal": ideal, "speedup": speedup, "wall_over_ideal": speedup / ideal,
        "vs_eager": eager.seconds / row.seconds if eager and eager.times else None,
        "peak_vram_gib": row.peak_allocated / 2**30 if row.peak_allocated is not None else None,
        "extra_vram_mib": extra / 2**20 if extra is not None else None,
        "estimate_error": estimate_error(row, rows),
        "deviation": max((relative_l2(row.latents[s], reference.latents[s]) for s in seeds), default=None),
        "deviation_reference": reference.case.name if reference else None,
        "graphs_compiled_in_warmup": row.graphs_in_warmup if row.compiled else None,
        "graphs_compiled_in_timed_runs": row.graphs_in_timed_runs if row.compiled else None,
        "node_inputs": row.inputs, "compile_backend": row.case.compile_backend,
        "effective_settings": stats.get("settings"), "steps_mask": stats.get("steps_mask"),
        "devices": stats.get("device_count", 1 if stats else None),
        "vs_one_gpu": vs_one_gpu(row, rows),
    }


def vs_one_gpu(row: Measured, rows: dict[tuple, Measured]) -> float | None:
    """A two-GPU row against Raw uncached on one GPU (same steps): what the second GPU and the cache give."""
    one = rows.get(("raw", False, "uncached"))
    if row.workload != TWO_GPUS.name or not (one and one.times and row.times) or one.case.steps != row.case.steps:
        return None
    return one.seconds / row.seconds


def summarize(rows: dict[tuple, Measured]) -> list[dict]:
    return [summarize_row(row, rows) for row in rows.values() if row.times]


def caching_off_overheads(table: list[dict]) -> dict:
    out = {}
    for row in table:
        if row["variant"] == "caching off":
            overhead = 1 / row["speedup"] - 1
            out[row["workload"]] = {"overhead": overhead, "ok": overhead < OVERHEAD_LIMIT,
                                    "bit_identical": row["deviation"] == 0.0, "repeats": row["repeats"]}
    return out
