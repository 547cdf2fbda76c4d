"""The node's extra peak memory at Krea-2's real size (1024x1024, width 6144), CPU RSS, side by side.

Runs the real-shape tier's model (``devkit/realshape.py``: the real architecture with
two blocks, bf16 weights, ComfyUI computing in float32 on the CPU) through the real server: the
graph without the node and the node with caching off (which traces every call), each after
resetting the server process's peak RSS (``/proc/PID/clear_refs``). Prints each run's peak RSS
and its excess over the uncached run, beside what the diagnostics should hold: one Fn residual
per stream (1 x 4112 x 6144 float32 = 101 MB) plus 64 KiB of samples per step and stream, and
what the Cache-DiT Forecast node's history holds per stream and preset at this shape (``history_bytes``,
the bound ``tests/realshape/test_realshape_forecast_memory.py`` checks at 128 text tokens).
On a GPU the GPU check reports the same as CUDA peak memory (``dev.py gpu-check``).

    python -m benchmarks.realshape_memory
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from devkit.comfy_harness import find_comfyui, load_pack


def peak_rss_bytes(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM in /proc status")


def reset_peak_rss(pid: int):
    Path(f"/proc/{pid}/clear_refs").write_text("5")   # 5: reset the peak RSS to the current RSS


def main():
    load_pack()
    from devkit.realshape import FN_RESIDUAL_VALUES, realshape_prompt, start_realshape_server

    comfy_root = find_comfyui()
    if comfy_root is None:
        raise SystemExit("No ComfyUI found (set COMFYUI_PATH).")
    server = start_realshape_server(comfy_root, Path(tempfile.mkdtemp(prefix="krea2_realshape_memory_")))
    cases = {"uncached (no node)": None, "caching off": {"residual_diff_threshold": 0.0, "max_warmup_steps": 1}}
    try:
        server.run(realshape_prompt(None, seed=99))   # load the model: every measured run starts from it
        rows = {}
        for name, cache in cases.items():
            reset_peak_rss(server.process.pid)
            before = peak_rss_bytes(server.process.pid)
            started = time.perf_counter()
            entry = server.run(realshape_prompt(cache), timeout=3600)
            rows[name] = (peak_rss_bytes(server.process.pid), before, time.perf_counter() - started,
                          entry["status"]["status_str"])
    finally:
        server.stop()
    base = rows["uncached (no node)"][0]
    print("\nPeak RSS of the ComfyUI process, 1024x1024, width 6144, 2 blocks, 2 steps, CPU float32:")
    print(f"{'case':<22}{'peak RSS':>12}{'over uncached':>15}{'RSS before':>12}{'wall s':>9}  status")
    for name, (peak, before, seconds, status) in rows.items():
        print(f"{name:<22}{peak / 2**20:>9.0f} MiB{(peak - base) / 2**20:>+11.0f} MiB{before / 2**20:>8.0f} MiB"
              f"{seconds:>9.1f}  {status}")
    print(f"one Fn residual: {FN_RESIDUAL_VALUES * 4 / 2**20:.0f} MiB in float32 (the diagnostics hold one per stream)")
    print_forecast_histories(FN_RESIDUAL_VALUES)


def print_forecast_histories(feature_values: int):
    """The Forecast node's history per stream and preset for a feature of ``feature_values`` values."""
    import importlib

    import torch

    pack = load_pack().__name__
    history_bytes = importlib.import_module(f"{pack}.adapters.forecast.feature_forecast").history_bytes
    presets = importlib.import_module(f"{pack}.adapters.forecast.forecast_settings").PRESETS
    print("Forecast node, history per stream (split CFG: two streams):")
    for name, preset in presets.items():
        sizes = [history_bytes(preset.forecast, (feature_values,), dtype) / 2**20
                 for dtype in (torch.bfloat16, torch.float32)]
        print(f"  {name:<22}{sizes[0]:>8.0f} MiB bf16{sizes[1]:>8.0f} MiB float32")


if __name__ == "__main__":
    main()
