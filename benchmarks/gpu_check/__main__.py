"""GPU check: Krea-2 Turbo and Raw at full size through ComfyUI, with and without Cache-DiT and torch.compile.

Run as ``python -m benchmarks.gpu_check`` by ``python3 dev.py gpu-check`` after it installed ComfyUI and
the wheels (``setup.py`` beside this file; the check's other parts are here too). It generates a
seeded-random Krea-2 with the real architecture (12.8B parameters, bf16, native format), starts
the real ComfyUI server on the GPU and samples,
side by side in one run, through ComfyUI's own execution (UNETLoader, KSampler, ...):

- Turbo (8 steps, CFG 1) and Raw (52 steps, CFG 3.5) at 1024x1024: without the node, with the
  node's defaults, with ``steps_mask`` fast, and with caching off (its overhead must stay under 1%);
  beside them the Cache-DiT Forecast node's presets for the regime (Turbo: turbo_5_of_8, turbo_4_of_8;
  Raw: raw_1_in_4);
- the DBCache ones (without caching off) behind ComfyUI's TorchCompileModel (inductor);
- Raw on two GPUs (ComfyUI's ``MultiGPU CFG Split``: cond on one, uncond on the other), without
  the node, with its defaults and with ``steps_mask`` fast, when the machine has two or more GPUs
  ("skipped: one GPU" otherwise; the smoke run takes a second device key on the CPU instead).

It keeps to a time budget (8 minutes, install included): it times the first runs and compile
warm-ups, extrapolates, and cuts repeats, shortens Raw (fewer steps, ratio noted) or drops the
compiled cases rather than run over, and says what it cut (Raw's Forecast row goes before Raw is
shortened, ``gpu_check/budget.py``). The table goes to stdout, the JSON
to ``$OUT`` when set, else ``benchmarks/results/``. ``--smoke``: the same on the CPU at a small size.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from pathlib import Path

from devkit.comfy_harness import find_comfyui, load_pack
# The parts are the package gpu_check/ beside this script (benchmarks/gpu_check/): run by path, this
# script is __main__, and the name gpu_check is the package's (gpu_check/__init__.py says why).
from benchmarks.gpu_check.budget import Budget
from benchmarks.gpu_check.cases import FULL, SMOKE, Scale
from benchmarks.gpu_check.checkpoint import generate_checkpoint, krea2_shape
from benchmarks.gpu_check.phases import Check
from benchmarks.gpu_check.report import report_progress, run_settings, write_report
from benchmarks.gpu_check.server import keep_server_log, start_server
from benchmarks.gpu_check.table import print_table

def measure(args, report: dict, scale: Scale, budget: Budget, checkpoint: Path, manifest: dict | None,
            timings: dict):
    """The phases through a server started for them, the report written after each; the server is
    stopped and its log kept however the phases end."""
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
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
