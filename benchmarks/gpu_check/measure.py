"""Measuring a GPU-check case through the ComfyUI server: its warm-up, and its timed runs with their
latents, stats records, CUDA peak and the graphs torch.compile compiled meanwhile."""

from __future__ import annotations

import dataclasses
import time

from benchmarks.speedup import Case, case_prompt, run_prompt
from devkit.comfy_harness import COMPILE_ROUTE, MEMORY_ROUTE, ComfyServer
from .budget import Budget, BudgetExceeded
from .cases import TWO_GPUS, Scale
from .rows import Measured

WARMUP_SEED = 10_000


class Measurer:
    """Runs a row's prompts through the server, none past the budget's deadline, into the row."""

    def __init__(self, server: ComfyServer, scale: Scale, budget: Budget, model_name: str, features: int):
        self.server, self.scale, self.budget = server, scale, budget
        self.model_name, self.features = model_name, features

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


def on_two_devices(prompt: dict, scale: Scale):
    """The model through ComfyUI's MultiGPU CFG Split (two GPUs); in the CPU smoke run through the test
    node that makes the same split onto a second CPU device key."""
    prompt["20"] = ({"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}} if scale.cpu else
                    {"class_type": "MultiGPU_WorkUnits", "inputs": {"model": ["1", 0], "max_gpus": 2}})
    prompt["5" if "5" in prompt else "6"]["inputs"]["model"] = ["20", 0]
