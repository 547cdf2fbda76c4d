"""The host-time benchmark (benchmarks/host_time.py): where the node's added time per call goes.

Its figures are the benchmark's to report; here it must time every part of a real sampling run
(ComfyUI's sampler, the node, cache-dit) on a tiny Krea-2, and leave nothing patched behind.
"""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from devkit.comfy_harness import REPO_ROOT, comfyui_python
from devkit.krea2_synthetic import save_native_checkpoint

from benchmarks import host_time


class Plain:
    def work(self, value):
        return value + 1


def test_timers_count_each_call_and_put_the_original_back():
    original = Plain.__dict__["work"]
    timers = host_time.Timers()
    timers.wrap(Plain, "work", "work")
    assert Plain().work(1) == 2 and Plain().work(2) == 3
    assert timers.calls["work"] == 2 and timers.ns["work"] > 0
    timers.remove()
    assert Plain.__dict__["work"] is original


def test_the_shares_spread_the_per_run_parts_over_the_calls():
    result = {"call_us": 1000.0, "calls_per_run": 10, "pack": {"a": 10.0, "b": 10.0}, "cache-dit": {"c": 30.0},
              "per_run_us": {"open": 500.0, "close": 500.0}}
    assert host_time.shares(result) == pytest.approx({"pack": 0.02, "cache-dit": 0.03, "per run": 0.1})


def test_every_part_of_a_real_run_is_timed(comfy_root, tiny_shape, tmp_path):
    checkpoint = save_native_checkpoint(tmp_path / "krea2_tiny.safetensors", tiny_shape, seed=0)
    out = tmp_path / "host_time.json"
    subprocess.run([comfyui_python(comfy_root), "-m", "benchmarks.host_time", "--checkpoint",
                    checkpoint, "--steps", "3", "--cfg", "1", "--runs", "2", "--json", str(out)],
                   check=True, timeout=600, cwd=REPO_ROOT, env={**os.environ, "COMFYUI_PATH": str(comfy_root)})
    results = json.loads(out.read_text())
    assert [(r["setting"], r["steps"], r["calls_per_run"]) for r in results] == [
        ("caching off", 3, 3), ("defaults", 3, 3)]
    for result in results:
        parts = {**result["pack"], **result["cache-dit"]}
        assert set(parts) == {"call wrapper and routing", "block hooks", "Fn hook and diagnostics",
                              "forward patch", "block wrapper"}
        assert all(us > 0 for us in parts.values()), parts
        assert sum(parts.values()) < result["call_us"], "the parts are part of the call"
        assert all(us > 0 for us in result["per_run_us"].values()), result["per_run_us"]
        assert 0 < result["shares"]["pack"] < 1 and 0 < result["shares"]["cache-dit"] < 1
