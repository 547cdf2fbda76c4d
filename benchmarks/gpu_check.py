"""GPU check: Krea-2 Turbo and Raw at full size through ComfyUI, with and without Cache-DiT and torch.compile.

Run by ``python3 dev.py gpu-check`` after it installed ComfyUI and the wheels (see
``gpu_check_setup.py``). It generates a seeded-random Krea-2 with the real architecture
(12.8B parameters, bf16, native format), starts the real ComfyUI server on the GPU and samples,
side by side in one run, through ComfyUI's own execution (UNETLoader, KSampler, ...):

- Turbo (8 steps, CFG 1) and Raw (52 steps, CFG 3.5) at 1024x1024: without the node, with the
  node's defaults, with ``steps_mask`` fast, and with caching off (its overhead must stay under 1%);
- the same (without caching off) behind ComfyUI's TorchCompileModel (inductor);
- Raw on two GPUs (ComfyUI's ``MultiGPU CFG Split``: cond on one, uncond on the other), without
  the node, with its defaults and with ``steps_mask`` fast, when the machine has two or more GPUs
  ("skipped: one GPU" otherwise; the smoke run takes a second device key on the CPU instead).

It keeps to a time budget (8 minutes, install included): it times the first runs and compile
warm-ups, extrapolates, and cuts repeats, shortens Raw (fewer steps, ratio noted) or drops the
compiled cases rather than run over, and says what it cut. The table goes to stdout, the JSON
to ``$OUT`` when set, else ``benchmarks/results/``. ``--smoke``: the same on the CPU at a small size.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.metadata
import json
import os
import re
import shutil
import statistics
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT / "devkit"))
sys.path.insert(0, str(REPO_ROOT / "benchmarks"))

from comfy_harness import COMPILE_ROUTE, MEMORY_ROUTE, ComfyServer, find_comfyui, load_pack  # noqa: E402
from speedup import Case, case_prompt, relative_l2, run_prompt  # noqa: E402

RESULTS = REPO_ROOT / "benchmarks" / "results"
OVERHEAD_LIMIT = 0.01                           # caching off vs no node
FINISH_RESERVE_S = 25                           # stopping the server, the report
WARMUP_SEED, RAW_FULL_STEPS, RAW_MIN_STEPS = 10_000, 52, 8


@dataclasses.dataclass(frozen=True)
class Workload:
    name: str
    steps: int
    cfg: float


TURBO, RAW = Workload("turbo", 8, 1.0), Workload("raw", RAW_FULL_STEPS, 3.5)

# Node inputs per variant. "defaults" sends none: what the node's defaults run is in the stats record.
VARIANTS = {"uncached": None, "defaults": {}, "steps_mask fast": {"steps_mask": "fast"},
            "caching off": {"residual_diff_threshold": 0.0, "steps_mask": "none"}}
COMPILED_VARIANTS = ("uncached", "defaults", "steps_mask fast")
TWO_GPU_VARIANTS = ("uncached", "defaults", "steps_mask fast")
TWO_GPUS = Workload("raw 2 gpus", RAW_FULL_STEPS, 3.5)


@dataclasses.dataclass(frozen=True)
class Scale:
    """How big the check runs: the real model on a GPU, or a small one for the CPU smoke run."""

    full_size: bool             # synthetic.FULL_SIZE (the real architecture), else the tiny test shape
    size: int                   # image side in pixels
    tokens: int                 # conditioning tokens (cond and uncond alike: CFG runs batched)
    raw_steps: int              # Raw's steps before the budget shortens them
    turbo_repeats: int
    raw_repeats: int
    budget_s: float             # the whole check, install included
    compile_guess_s: float      # a first compile warm-up's cost, before one was measured
    cpu: bool


FULL = Scale(full_size=True, size=1024, tokens=128, raw_steps=RAW_FULL_STEPS, turbo_repeats=5, raw_repeats=2,
             budget_s=480, compile_guess_s=90, cpu=False)
# The smoke run checks the path, not the numbers: small and short, and a budget it never reaches
# (the inductor kernels it compiles on its first run on a machine take minutes on two cores).
SMOKE = Scale(full_size=False, size=64, tokens=8, raw_steps=12, turbo_repeats=2, raw_repeats=1,
              budget_s=900, compile_guess_s=60, cpu=True)


# --- budget ----------------------------------------------------------------------------------

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


# --- results ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Measured:
    case: Case
    workload: str
    variant: str
    compiled: bool
    inputs: dict | None                       # what the cache node was sent
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
    ideal = stats.get("ideal_speedup", 1.0)
    speedup = reference.seconds / row.seconds if reference and reference.times and row.variant != "uncached" else 1.0
    seeds = sorted(set(row.latents) & set(reference.latents)) if reference else []
    return {
        "case": row.case.name, "workload": row.workload, "variant": row.variant, "compiled": row.compiled,
        "steps": row.case.steps, "cfg": row.case.cfg, "cfg_mode": stats.get("cfg_mode"),
        "cached": f"{len(stats['cached_steps'])}/{stats['steps']}" if stats else None,
        "cached_steps": stats.get("cached_steps"),
        "seconds": row.seconds, "times": row.times, "repeats": len(row.times), "warmup_s": row.warmup_s,
        "ideal": ideal, "speedup": speedup, "wall_over_ideal": speedup / ideal,
        "vs_eager": eager.seconds / row.seconds if eager and eager.times else None,
        "peak_vram_gib": row.peak_allocated / 2**30 if row.peak_allocated is not None else None,
        "extra_vram_mib": (lambda extra: None if extra is None else extra / 2**20)(extra_peak(row, rows)),
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


def _fmt(value, spec: str, suffix: str = "") -> str:
    return "-" if value is None else format(value, spec) + suffix


def print_table(report: dict):
    print(f"\nKrea-2 Cache-DiT GPU check: {report['device']}, {report['model']['description']}, "
          f"{report['settings']['size']}x{report['settings']['size']}; medians of side-by-side runs")
    header = (f"{'case':<32}{'steps':>6}{'cached':>8}{'wall s':>9}{'ideal':>7}{'speedup':>9}{'vs eager':>9}"
              f"{'wall/ideal':>11}{'peak VRAM':>11}{'+VRAM':>10}{'est. error':>11}{'deviation':>11}")
    print(header)
    print("-" * len(header))
    for r in report["cases"]:
        print(f"{r['case']:<32}{r['steps']:>6}{_fmt(r['cached'], 's'):>8}{r['seconds']:>9.3f}{r['ideal']:>6.2f}x"
              f"{r['speedup']:>8.2f}x{_fmt(r['vs_eager'], '.2f', 'x'):>9}{r['wall_over_ideal']:>11.0%}"
              f"{_fmt(r['peak_vram_gib'], '.1f', ' GiB'):>11}{_fmt(r.get('extra_vram_mib'), '+.0f', ' MiB'):>10}"
              f"{_fmt(r.get('estimate_error'), '+.1%'):>11}{_fmt(r['deviation'], '.4f'):>11}")
    print("ideal = block evaluations without the cache / with it; speedup = uncached time / time (same compile "
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


# --- the run ---------------------------------------------------------------------------------

class BudgetExceeded(Exception):
    pass


class Check:
    def __init__(self, server: ComfyServer, scale: Scale, budget: Budget, model_name: str, features: int):
        self.server, self.scale, self.budget = server, scale, budget
        self.model_name, self.features = model_name, features
        self.rows: dict[tuple, Measured] = {}
        self.timings: dict[str, float] = {}
        self.errors: list[str] = []
        self.raw_steps = scale.raw_steps
        self.compile_estimate_s = scale.compile_guess_s
        self.two_gpu = "not run"

    # one prompt ----------------------------------------------------------------------------
    def make_case(self, workload: Workload, variant: str, compiled: bool, steps: int | None = None) -> Measured:
        inputs = VARIANTS[variant]
        name = f"{workload.name}{' compiled' if compiled else ''} {variant}"
        case = Case(name, steps or workload.steps, workload.cfg, inputs, "inductor" if compiled else None)
        return Measured(case, workload.name, variant, compiled, inputs)

    def add(self, row: Measured) -> Measured:
        self.rows[(row.workload, row.compiled, row.variant)] = row
        return row

    def run(self, case: Case, seed: int):
        """One prompt; interrupted (and BudgetExceeded) when it is still running at the deadline."""
        prompt = case_prompt(case, self.model_name, self.features, seed, self.scale.size, self.scale.tokens)
        if case.name.startswith(TWO_GPUS.name):
            on_two_devices(prompt, self.scale)
        try:
            return run_prompt(self.server, prompt, timeout=max(self.budget.left(), 1.0))
        except TimeoutError:
            self.server.post("/interrupt", {})
            raise BudgetExceeded(f"{case.name} was still running at the deadline and was interrupted") from None

    def graphs_compiled(self) -> int:
        return self.server.get(COMPILE_ROUTE)["unique_graphs"]

    def warm_up(self, row: Measured, steps: int | None = None) -> float:
        """One untimed run (model load, kernel selection, compilation); its wall time."""
        case = dataclasses.replace(row.case, steps=steps) if steps else row.case
        graphs_before = self.graphs_compiled()
        started = time.perf_counter()
        self.run(case, WARMUP_SEED)
        row.warmup_s = time.perf_counter() - started
        row.graphs_in_warmup = self.graphs_compiled() - graphs_before
        return row.warmup_s

    def timed(self, row: Measured, seed: int):
        self.server.post(MEMORY_ROUTE, {})
        graphs_before = self.graphs_compiled()
        result = self.run(row.case, seed)
        row.times.append(result.seconds)
        row.latents[seed] = result.latent
        row.stats = result.stats or row.stats
        if result.stats:
            row.records.append(result.stats)
        peak = self.server.get(MEMORY_ROUTE)["peak_allocated"]
        row.peak_allocated = max(row.peak_allocated or 0, peak) if peak is not None else None
        row.graphs_in_timed_runs += self.graphs_compiled() - graphs_before

    def repeat(self, rows: list[Measured], repeats: int):
        """Timed runs in alternating order, so drift hits every case alike; the same seeds for every case."""
        for rep in range(repeats):
            for row in (rows if rep % 2 == 0 else list(reversed(rows))):
                self.timed(row, seed=rep)

    # phases, most important first ------------------------------------------------------------
    def eager_turbo(self):
        rows = [self.add(self.make_case(TURBO, v, False)) for v in VARIANTS]
        self.timings["first run (model load)"] = self.warm_up(rows[0])
        for row in rows[1:]:
            self.warm_up(row)
        run_s = max(r.warmup_s for r in rows[1:])
        repeats = max(1, repeats_that_fit(0.25 * self.budget.left(), run_s, len(rows), self.scale.turbo_repeats))
        if repeats < self.scale.turbo_repeats:
            self.budget.cut(f"turbo repeats {repeats} instead of {self.scale.turbo_repeats}")
        self.repeat(rows, repeats)

    def compiled_turbo_reserve(self) -> float:
        """What the compiled Turbo cases will likely take: a first compile, two cheaper ones, the runs."""
        turbo_s = self.rows[("turbo", False, "uncached")].seconds
        return 2 * self.scale.compile_guess_s + len(COMPILED_VARIANTS) * self.scale.turbo_repeats * turbo_s

    def eager_raw(self):
        probe = self.add(self.make_case(RAW, "uncached", False))
        # cond and uncond run as one batch of 2: a new shape, warmed up on 8 steps, which also time a step.
        step_s = self.warm_up(probe, steps=TURBO.steps) / TURBO.steps
        self.timings["raw warm-up (8 steps)"] = probe.warmup_s
        seconds = self.budget.left() - self.compiled_turbo_reserve()
        if seconds < len(VARIANTS) * self.scale.raw_steps * step_s:   # not even one repeat: share with compile
            seconds = max(seconds, 0.5 * self.budget.left())
        plan = plan_raw(seconds, step_s, len(VARIANTS), self.scale.raw_repeats, full_steps=self.scale.raw_steps)
        if plan is None:
            del self.rows[("raw", False, "uncached")]
            self.budget.cut(f"raw: not even {RAW_MIN_STEPS} steps of its {len(VARIANTS)} cases fit "
                            f"({step_s:.2f} s per step, {seconds:.0f} s available)")
            return
        self.raw_steps, repeats = plan
        if self.raw_steps < self.scale.raw_steps:
            self.budget.cut(f"raw shortened to {self.raw_steps} of {self.scale.raw_steps} steps "
                            f"(ratio {self.raw_steps / self.scale.raw_steps:.2f}): its cached counts and "
                            f"speedups are for {self.raw_steps} steps")
        if repeats < self.scale.raw_repeats:
            self.budget.cut(f"raw repeats {repeats} instead of {self.scale.raw_repeats}")
        rows = [self.add(self.make_case(RAW, v, False, self.raw_steps)) for v in VARIANTS]
        self.repeat(rows, repeats)

    def compiled(self, workload: Workload, steps: int, warmup_steps: int | None, most_repeats: int, share: float):
        """TorchCompileModel before the cache node. Every compile warm-up is estimated by the last one
        (the first by a guess, or by the Turbo one for Raw's new batch shape); a deadline overrun is
        caught by the interrupt in ``run``."""
        eager = self.rows.get((workload.name, False, "uncached"))
        run_s = eager.seconds if eager and eager.times else 0.0
        rows = []
        for variant in COMPILED_VARIANTS:
            estimate = self.compile_estimate_s + run_s * (warmup_steps or steps) / steps
            if estimate > self.budget.left():
                self.budget.cut(f"{workload.name} compiled {variant}: its warm-up (~{estimate:.0f} s, compiling) "
                                f"does not fit in the {self.budget.left():.0f} s left")
                continue
            row = self.add(self.make_case(workload, variant, True, steps))
            self.compile_estimate_s = self.warm_up(row, warmup_steps)
            self.timings[f"warm-up, {row.case.name}"] = row.warmup_s
            rows.append(row)
        if not rows:
            return
        repeats = repeats_that_fit(share * self.budget.left(), max(run_s, 1e-3), len(rows), most_repeats)
        if repeats < most_repeats:
            self.budget.cut(f"{workload.name} compiled repeats {repeats} instead of {most_repeats}")
        if repeats == 0:
            for row in rows:
                del self.rows[(row.workload, row.compiled, row.variant)]
            return
        self.repeat(rows, repeats)

    def two_gpus(self):
        """Raw with cond and uncond on two GPUs; its speedups against its own uncached two-GPU run,
        and that run against Raw uncached on one GPU (``vs_eager``)."""
        gpus = gpu_count()
        if not self.scale.cpu and gpus < 2:
            self.two_gpu = "skipped: one GPU"
            print(f"[two GPUs] {self.two_gpu} ({gpus} found)", flush=True)
            return
        one_gpu = self.rows.get(("raw", False, "uncached"))
        if one_gpu is None or not one_gpu.times:
            self.two_gpu = "skipped: no one-GPU Raw run to compare with"
            self.budget.cut(f"two GPUs: {self.two_gpu}")
            return
        steps = self.raw_steps
        # The two GPUs share each step: about half a one-GPU step each, plus the second copy's load.
        run_s = one_gpu.seconds * 0.6
        if 2 * run_s + len(TWO_GPU_VARIANTS) * run_s > 0.5 * self.budget.left():
            self.two_gpu = f"cut: {len(TWO_GPU_VARIANTS)} runs of ~{run_s:.0f} s do not fit"
            self.budget.cut(f"two GPUs: {self.two_gpu}")
            return
        rows = [self.add(self.make_case(TWO_GPUS, v, False, steps)) for v in TWO_GPU_VARIANTS]
        self.timings["two GPUs first run (second copy's load)"] = self.warm_up(rows[0])
        for row in rows[1:]:
            self.warm_up(row)
        repeats = max(1, repeats_that_fit(0.5 * self.budget.left(), run_s, len(rows), self.scale.raw_repeats))
        self.repeat(rows, repeats)
        self.two_gpu = "ran on two CPU device keys (smoke)" if self.scale.cpu else f"ran on 2 of {gpus} GPUs"

    def run_all(self):
        """The phases in order; yields each phase's name when it is done (to write the report so far)."""
        phases = [("eager turbo", self.eager_turbo), ("eager raw", self.eager_raw), ("two gpus", self.two_gpus),
                  ("compiled turbo", lambda: self.compiled(TURBO, TURBO.steps, None, self.scale.turbo_repeats, 0.5)),
                  ("compiled raw", lambda: self.compiled(RAW, self.raw_steps, TURBO.steps, self.scale.raw_repeats,
                                                         0.9))]
        if "TorchCompileModel" not in self.server.get("/object_info"):
            phases = phases[:2]
            self.budget.cut("compiled cases: this ComfyUI has no TorchCompileModel node")
        for name, phase in phases:
            if name == "compiled raw" and ("raw", False, "uncached") not in self.rows:
                continue
            try:
                phase()
            except BudgetExceeded as error:
                self.budget.cut(str(error))
                yield name
                return
            except Exception as error:  # one broken phase must not hide the others' results
                self.errors.append(f"{name}: {type(error).__name__}: {str(error)[:3000]}")
                print(f"ERROR in {name}: {error}", flush=True)
            yield name


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def on_two_devices(prompt: dict, scale: Scale):
    """The model through ComfyUI's MultiGPU CFG Split (two GPUs); in the CPU smoke run through the test
    node that makes the same split onto a second CPU device key."""
    prompt["20"] = ({"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}} if scale.cpu else
                    {"class_type": "MultiGPU_WorkUnits", "inputs": {"model": ["1", 0], "max_gpus": 2}})
    prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["20", 0]


# --- setting up ------------------------------------------------------------------------------

def checkpoint_folder(work: Path, nbytes: int) -> Path:
    """Where the generated checkpoint goes: /dev/shm when it and host memory have room (fast to write
    and to load), else the work folder's disk."""
    shm = Path("/dev/shm")
    ram = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    if shm.is_dir() and shutil.disk_usage(shm).free > 1.5 * nbytes and ram > 4 * nbytes:
        return shm
    if shutil.disk_usage(work).free > 1.1 * nbytes:
        return work
    raise SystemExit(f"No room for the {nbytes / 1e9:.1f} GB checkpoint: {work} has "
                     f"{shutil.disk_usage(work).free / 1e9:.1f} GB free; pass --work on a larger disk.")


def krea2_shape(scale: Scale):
    from krea2_synthetic import FULL_SIZE, Krea2Shape

    return FULL_SIZE if scale.full_size else Krea2Shape()


def generate_checkpoint(work: Path, scale: Scale, timings: dict) -> tuple[Path, dict]:
    import math

    import torch

    from krea2_synthetic import native_shapes, write_native_checkpoint

    shape = krea2_shape(scale)
    params = sum(math.prod(size) for size in native_shapes(shape).values())
    folder = checkpoint_folder(work, 2 * params)
    # Named after the work folder: runs in different folders never share a file, the smoke run's
    # fixed folder always gives the same name (torch.compile's on-disk cache keys can hold it).
    path = Path(folder) / f"krea2_gpu_check_{hashlib.sha1(str(work.resolve()).encode()).hexdigest()[:8]}.safetensors"
    device = "cuda" if torch.cuda.is_available() and not scale.cpu else "cpu"
    print(f"Generating a seeded-random Krea-2 ({params / 1e9:.2f}B parameters, bf16, on the {device}) at {path} ...",
          flush=True)
    started = time.perf_counter()
    nbytes = write_native_checkpoint(path, shape, seed=0, dtype=torch.bfloat16, device=device)
    timings["generate checkpoint"] = time.perf_counter() - started
    print(f"  {nbytes / 1e9:.1f} GB in {timings['generate checkpoint']:.0f} s", flush=True)
    model = {"shape": dataclasses.asdict(shape), "parameters": params, "dtype": "bf16", "bytes": nbytes, "seed": 0,
             "generated_on": device, "description": f"seeded-random Krea-2 {params / 1e9:.2f}B bf16"}
    return path, model


def versions(system_stats: dict, manifest: dict | None) -> dict:
    def version(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    system = system_stats.get("system", {})
    return {"python": sys.version.split()[0], "torch": system.get("pytorch_version"),
            "comfyui": system.get("comfyui_version"),
            "comfyui_commit": (manifest or {}).get("comfyui", {}).get("commit"),
            "cache-dit": version("cache-dit"), "diffusers": version("diffusers")}


def result_path(args, report: dict) -> Path:
    if args.json:
        return Path(args.json)
    if os.environ.get("OUT"):
        return Path(os.environ["OUT"]) / "gpu_check.json"
    if args.smoke:
        return RESULTS / "gpu_check_smoke.json"
    device = re.sub(r"[^A-Za-z0-9]+", "_", report["device"]).strip("_")
    return RESULTS / f"gpu_check_{report['date'][:10]}_{device}.json"


def write_report(args, report: dict) -> Path:
    path = result_path(args, report)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))
    return path


def start_server(comfy_root: Path, work: Path, scale: Scale, checkpoint: Path, manifest: dict | None) -> ComfyServer:
    base = ComfyServer.prepare_base_dir(work / "comfy_base")
    (base / "models" / "diffusion_models" / checkpoint.name).symlink_to(checkpoint)
    no_editor = work / "no_editor"   # the API needs no editor: an empty folder instead of comfyui-frontend-package
    no_editor.mkdir(exist_ok=True)
    # TorchCompileModel's clone leaves dynamic VRAM (it loads a second, classic copy of the model when
    # dynamic VRAM is on): classic loading for every case keeps one model in VRAM, like for like.
    extra = ["--front-end-root", str(no_editor), "--disable-dynamic-vram", *((manifest or {}).get("server_args", []))]
    return ComfyServer(comfy_root, base, extra_args=extra, cpu=scale.cpu).start(timeout=300)


def run_settings(server: ComfyServer, scale: Scale, manifest: dict | None) -> dict:
    system_stats = server.get("/system_stats")
    return {"device": system_stats["devices"][0]["name"], "versions": versions(system_stats, manifest),
            "settings": {"size": scale.size, "tokens": scale.tokens, "sampler": "euler", "scheduler": "simple",
                         "timed_seeds": "0..repeats-1", "warmup_seed": WARMUP_SEED,
                         "conditioning": "Krea2TestConditioning (seeded, cond and uncond alike)",
                         "server_args": server.extra_args, "cpu": scale.cpu},
            "prepared": manifest}


def keep_server_log(server: ComfyServer):
    """ComfyUI's log next to the JSON when the results go to $OUT (the GPU machine sends that folder back)."""
    if os.environ.get("OUT") and server.log_path.exists():
        shutil.copyfile(server.log_path, Path(os.environ["OUT"]) / "comfyui.log")


def measure(args, report: dict, scale: Scale, budget: Budget, checkpoint: Path, manifest: dict | None,
            timings: dict):
    started = time.perf_counter()
    server = start_server(find_comfyui(), args.work, scale, checkpoint, manifest)
    timings["server start"] = time.perf_counter() - started
    try:
        report.update(run_settings(server, scale, manifest))
        check = Check(server, scale, budget, checkpoint.name, krea2_shape(scale).context_features)
        for phase in check.run_all():
            report_progress(args, report, check, budget, timings, phase)
    finally:
        server.stop()
        keep_server_log(server)


def report_progress(args, report: dict, check: Check, budget: Budget, timings: dict, phase: str):
    """The report so far, written after every phase: a run stopped from outside still leaves its results."""
    timings.update(check.timings)
    report["cases"] = summarize(check.rows)
    report["caching_off_overhead"] = caching_off_overheads(report["cases"])
    report["budget"] = {"seconds": budget.seconds, "cuts": budget.cuts, "raw_steps": check.raw_steps,
                        "raw_steps_planned": check.scale.raw_steps, "last_phase": phase}
    report["timings"] = timings
    report["two_gpu"] = check.two_gpu
    report["errors"] = check.errors
    write_report(args, report)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--smoke", action="store_true", help="CPU, small model: the same path, fast")
    parser.add_argument("--work", type=Path, required=True, help="folder for the ComfyUI base dir (and checkpoint)")
    parser.add_argument("--started", type=float, help="when the check started (epoch s): the budget counts from there")
    parser.add_argument("--budget", type=float, help="seconds for the whole check (default: 480 on a GPU)")
    parser.add_argument("--manifest", type=Path, help="the prepared folder's manifest.json")
    parser.add_argument("--json", help="where to write the JSON (default: $OUT/gpu_check.json or benchmarks/results/)")
    args = parser.parse_args(argv)
    scale = SMOKE if args.smoke else FULL
    started = args.started or time.time()
    budget = Budget(started, args.budget or scale.budget_s)
    manifest = json.loads(args.manifest.read_text()) if args.manifest else None
    if find_comfyui() is None:
        raise SystemExit("No ComfyUI found: set COMFYUI_PATH (dev.py gpu-check does).")
    load_pack()
    timings = {"install": time.time() - started}
    checkpoint, model = generate_checkpoint(args.work, scale, timings)
    report = {"date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "smoke": args.smoke, "model": model, "cases": [], "errors": []}
    try:
        measure(args, report, scale, budget, checkpoint, manifest, timings)
    finally:
        checkpoint.unlink(missing_ok=True)
    timings["total"] = time.time() - started
    path = write_report(args, report)
    print_table(report)
    print(f"\nJSON: {path}")
    return 1 if report["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
