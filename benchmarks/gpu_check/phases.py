"""The GPU check's phases, most important first, each sized to what the budget leaves: eager Turbo,
eager Raw (shortened rather than dropped), Raw on two GPUs, then Turbo and Raw behind TorchCompileModel.
The eager phases carry the Cache-DiT Forecast node's rows beside the DBCache ones, in the same
alternation: Turbo's always (a forecast run costs at most an uncached one; the repeats shrink for every
row alike), Raw's while Raw keeps its full length (``plan_raw_with_forecast`` says the order of the cuts).

A phase decides which cases run and how many times; the ``Measurer`` runs them, the ``Budget`` says
what is left and records what was cut.
"""

from __future__ import annotations

from devkit.comfy_harness import ComfyServer
from .budget import (RAW_MIN_STEPS, Budget, BudgetExceeded, compiled_turbo_reserve, plan_raw_with_forecast,
                     raw_share, repeats_that_fit)
from .cases import (COMPILED_VARIANTS, RAW, TURBO, TWO_GPU_VARIANTS, TWO_GPUS, VARIANTS, Scale, Workload,
                    forecast_variants)
from .measure import Measurer
from .rows import Measured, new_row


class Check:
    def __init__(self, server: ComfyServer, scale: Scale, budget: Budget, model_name: str, features: int):
        self.server, self.scale, self.budget = server, scale, budget
        self.measurer = Measurer(server, scale, budget, model_name, features)
        self.rows: dict[tuple, Measured] = {}
        self.timings: dict[str, float] = {}
        self.errors: list[str] = []
        self.raw_steps = scale.raw_steps
        self.compile_estimate_s = scale.compile_guess_s
        self.two_gpu = "not run"

    def add(self, row: Measured) -> Measured:
        self.rows[row.key] = row
        return row

    def eager_turbo(self):
        rows = [self.add(new_row(TURBO, v, False)) for v in (*VARIANTS, *forecast_variants(TURBO))]
        self.timings["first run (model load)"] = self.measurer.warm_up(rows[0])
        for row in rows[1:]:
            self.measurer.warm_up(row)
        run_s = max(r.warmup_s for r in rows[1:])
        repeats = max(1, repeats_that_fit(0.25 * self.budget.left(), run_s, len(rows), self.scale.turbo_repeats))
        if repeats < self.scale.turbo_repeats:
            self.budget.cut(f"turbo repeats {repeats} instead of {self.scale.turbo_repeats}")
        self.measurer.repeat(rows, repeats)

    def eager_raw(self):
        probe = self.add(new_row(RAW, "uncached", False))
        # cond and uncond run as one batch of 2: a new shape, warmed up on 8 steps, which also time a step.
        step_s = self.measurer.warm_up(probe, steps=TURBO.steps) / TURBO.steps
        self.timings["raw warm-up (8 steps)"] = probe.warmup_s
        reserve = compiled_turbo_reserve(self.scale, self.rows[("turbo", False, "uncached")].seconds)
        forecasts = forecast_variants(RAW)
        seconds = raw_share(self.budget.left(), reserve,
                            one_repeat_s=(len(VARIANTS) + len(forecasts)) * self.scale.raw_steps * step_s)
        plan, keep_forecasts = plan_raw_with_forecast(seconds, step_s, len(VARIANTS), len(forecasts),
                                                      self.scale.raw_repeats, full_steps=self.scale.raw_steps)
        if forecasts and not keep_forecasts:
            self.budget.cut(f"raw {', '.join(forecasts)}: cut so that Raw keeps its {self.scale.raw_steps} steps "
                            f"({step_s:.2f} s per step, {seconds:.0f} s available)")
            forecasts = ()
        if plan is None:
            del self.rows[probe.key]
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
        rows = [self.add(new_row(RAW, v, False, self.raw_steps)) for v in (*VARIANTS, *forecasts)]
        self.measurer.repeat(rows, repeats)

    def compiled(self, workload: Workload, steps: int, warmup_steps: int | None, most_repeats: int, share: float):
        """TorchCompileModel before the cache node. Every compile warm-up is estimated by the last one
        (the first by a guess, or by the Turbo one for Raw's new batch shape); a deadline overrun is
        caught by the interrupt in ``Measurer.run``."""
        eager = self.rows.get((workload.name, False, "uncached"))
        run_s = eager.seconds if eager and eager.times else 0.0
        rows = []
        for variant in COMPILED_VARIANTS:
            estimate = self.compile_estimate_s + run_s * (warmup_steps or steps) / steps
            if estimate > self.budget.left():
                self.budget.cut(f"{workload.name} compiled {variant}: its warm-up (~{estimate:.0f} s, compiling) "
                                f"does not fit in the {self.budget.left():.0f} s left")
                continue
            row = self.add(new_row(workload, variant, True, steps))
            self.compile_estimate_s = self.measurer.warm_up(row, warmup_steps)
            self.timings[f"warm-up, {row.case.name}"] = row.warmup_s
            rows.append(row)
        if not rows:
            return
        repeats = repeats_that_fit(share * self.budget.left(), max(run_s, 1e-3), len(rows), most_repeats)
        if repeats < most_repeats:
            self.budget.cut(f"{workload.name} compiled repeats {repeats} instead of {most_repeats}")
        if repeats == 0:
            for row in rows:
                del self.rows[row.key]
            return
        self.measurer.repeat(rows, repeats)

    def two_gpus(self):
        """Raw with cond and uncond on two GPUs; its speedups against its own uncached two-GPU run,
        and that run against Raw uncached on one GPU (``vs_one_gpu``)."""
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
        rows = [self.add(new_row(TWO_GPUS, v, False, steps)) for v in TWO_GPU_VARIANTS]
        self.timings["two GPUs first run (second copy's load)"] = self.measurer.warm_up(rows[0])
        for row in rows[1:]:
            self.measurer.warm_up(row)
        repeats = max(1, repeats_that_fit(0.5 * self.budget.left(), run_s, len(rows), self.scale.raw_repeats))
        self.measurer.repeat(rows, repeats)
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
