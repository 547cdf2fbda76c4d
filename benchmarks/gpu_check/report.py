"""The GPU check's JSON report: the conditions of the run, the table so far, and where it is written."""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import sys
from pathlib import Path

from devkit.comfy_harness import ComfyServer
from .budget import Budget
from .cases import Scale
from .measure import WARMUP_SEED
from .phases import Check
from .rows import caching_off_overheads, summarize

RESULTS = Path(__file__).resolve().parents[1] / "results"


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


def run_settings(server: ComfyServer, scale: Scale, manifest: dict | None) -> dict:
    system_stats = server.get("/system_stats")
    return {"device": system_stats["devices"][0]["name"], "versions": versions(system_stats, manifest),
            "settings": {"size": scale.size, "tokens": scale.tokens, "sampler": "euler", "scheduler": "simple",
                         "timed_seeds": "0..repeats-1", "warmup_seed": WARMUP_SEED,
                         "conditioning": "Krea2TestConditioning (seeded, cond and uncond alike)",
                         "server_args": server.extra_args, "cpu": scale.cpu},
            "prepared": manifest}


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
