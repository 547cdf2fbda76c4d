"""The GPU check (``dev.py gpu-check``): its pieces, and its CPU smoke run end to end.

The smoke run is the GPU check's own code path (prepare, offline install into a fresh
environment that has only the GPU machine's packages, generate, sample through ComfyUI, report)
at a small size on the CPU, so that the first GPU run is not the first run of this code.
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import torch

from devkit.comfy_harness import REPO_ROOT, comfyui_python

from benchmarks.gpu_check import budget as gpu_check_budget
from benchmarks.gpu_check import cases as gpu_check_cases
from benchmarks.gpu_check import phases as gpu_check_phases
from benchmarks.gpu_check import rows as gpu_check_rows
from benchmarks.gpu_check import setup as gpu_check_setup
from benchmarks.gpu_check import table as gpu_check_table
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings
from devkit.krea2_synthetic import (
    FULL_SIZE, Krea2Shape, native_shapes, native_state_dict, write_native_checkpoint)
from benchmarks.speedup import Case


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_streamed_checkpoint_holds_the_seeded_state_dict(tmp_path, dtype):
    from safetensors.torch import load_file

    path = tmp_path / "streamed.safetensors"
    nbytes = write_native_checkpoint(path, Krea2Shape(), seed=3, dtype=dtype)
    assert nbytes == path.stat().st_size
    written, expected = load_file(str(path)), native_state_dict(Krea2Shape(), seed=3, dtype=dtype)
    assert written.keys() == expected.keys()
    assert all(written[k].dtype == dtype and torch.equal(written[k], expected[k]) for k in expected)


_DETECT = """
import json, sys
shapes = json.loads(sys.stdin.read())
sys.argv = ["detect", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import torch, comfy.model_detection
state_dict = {name: torch.empty(size, device="meta") for name, size in shapes.items()}
print(json.dumps(comfy.model_detection.detect_unet_config(state_dict, "")))
"""


def test_full_size_is_the_krea2_comfyui_detects(comfy_root):
    shapes = json.dumps(native_shapes(FULL_SIZE))
    result = subprocess.run([comfyui_python(comfy_root), "-c", _DETECT], input=shapes, cwd=comfy_root,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads(result.stdout.strip().splitlines()[-1])
    assert config["image_model"] == "krea2"
    expected = {"features": 6144, "layers": 28, "heads": 48, "kvheads": 12, "txtdim": 2560, "txtlayers": 12,
                "channels": 16}
    assert {key: config[key] for key in expected} == expected
    assert gpu_check_cases.FULL.full_size and not gpu_check_cases.SMOKE.full_size


def test_plan_raw_keeps_full_length_and_drops_repeats_first():
    step_s, cases = 0.5, 4                      # one repeat of 52 steps: 104 s
    assert gpu_check_budget.plan_raw(250, step_s, cases, most_repeats=2) == (52, 2)
    assert gpu_check_budget.plan_raw(150, step_s, cases, most_repeats=2) == (52, 1)
    assert gpu_check_budget.plan_raw(52, step_s, cases, most_repeats=2) == (26, 1)
    assert gpu_check_budget.plan_raw(10, step_s, cases, most_repeats=2) is None
    assert gpu_check_budget.repeats_that_fit(100, 2.0, 4, most=5) == 5
    assert gpu_check_budget.repeats_that_fit(20, 2.0, 4, most=5) == 2


def test_raw_cuts_its_repeats_then_its_forecast_rows_then_its_length():
    step_s, cases, forecasts = 0.5, 4, 1      # one repeat of 52 steps: 104 s, 130 s with the forecast row
    plan = gpu_check_budget.plan_raw_with_forecast
    assert plan(270, step_s, cases, forecasts, most_repeats=2) == ((52, 2), True)
    assert plan(220, step_s, cases, forecasts, most_repeats=2) == ((52, 1), True), "a repeat goes first"
    assert plan(120, step_s, cases, forecasts, most_repeats=2) == ((52, 1), False), "then the forecast row"
    assert plan(52, step_s, cases, forecasts, most_repeats=2) == ((26, 1), False), "then Raw's length"
    assert plan(10, step_s, cases, forecasts, most_repeats=2) == (None, False)
    assert plan(220, step_s, cases, 0, most_repeats=2) == ((52, 2), False)


def test_forecast_rows_send_their_preset_to_the_forecast_node():
    [turbo_5, turbo_4] = [gpu_check_rows.new_row(gpu_check_cases.TURBO, v, False)
                          for v in gpu_check_cases.forecast_variants(gpu_check_cases.TURBO)]
    [raw] = [gpu_check_rows.new_row(gpu_check_cases.RAW, v, False, steps=12)
             for v in gpu_check_cases.forecast_variants(gpu_check_cases.RAW)]
    assert (turbo_5.case.name, turbo_5.case.forecast, turbo_5.case.steps) == (
        "turbo forecast turbo_5_of_8", {"preset": "turbo_5_of_8"}, 8)
    assert turbo_4.case.forecast == {"preset": "turbo_4_of_8"} and turbo_4.case.cfg == 1.0
    assert (raw.case.name, raw.case.forecast, raw.case.steps, raw.case.cfg) == (
        "raw forecast raw_1_in_4", {"preset": "raw_1_in_4"}, 12, 3.5)
    assert gpu_check_rows.new_row(gpu_check_cases.TURBO, "defaults", False).case.forecast is None


def test_report_gives_the_estimates_error_and_the_nodes_extra_peak_per_case(capsys):
    def row(variant, peak, records):
        measured = gpu_check_rows.Measured(Case(f"turbo {variant}", 8, 1.0, None), "turbo", variant, False, None,
                                           times=[2.0], records=records, peak_allocated=peak)
        return ("turbo", False, variant), measured

    gib = 2 ** 30
    rows = dict([row("uncached", 10 * gib, []),
                 row("caching off", 10 * gib + 100 * 2 ** 20, [{"duration_s": 2.0, "estimated_uncached_s": 2.0}] * 3),
                 row("defaults", 10 * gib + 52 * 2 ** 20, [{"duration_s": 1.5, "estimated_uncached_s": v}
                                                           for v in (2.1, 2.2, 2.6)])])
    table = {r["variant"]: r for r in gpu_check_rows.summarize(rows)}
    assert table["defaults"]["estimate_error"] == pytest.approx(0.1)     # median 2.2 against 2.0 measured
    assert table["defaults"]["extra_vram_mib"] == pytest.approx(52)
    assert table["caching off"]["estimate_error"] is None and table["caching off"]["extra_vram_mib"] == 100
    assert table["uncached"]["estimate_error"] is None and table["uncached"]["extra_vram_mib"] is None
    report = {"device": "test", "model": {"description": "m"}, "settings": {"size": 1024}, "cases": list(table.values()),
              "caching_off_overhead": {}, "budget": {"cuts": []}, "errors": [], "timings": {}, "smoke": False}
    gpu_check_table.print_table(report)
    printed = capsys.readouterr().out
    assert "+52 MiB" in printed and "+10.0%" in printed


def _fake_wheel(path: Path, files: dict[str, bytes]) -> Path:
    record = "".join(f"{name},sha256=x,{len(data)}\n" for name, data in files.items())
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as wheel:
        for name, data in files.items():
            wheel.writestr(name, data)
        wheel.writestr("pkg-1.0.dist-info/RECORD", record + "pkg-1.0.dist-info/RECORD,,\n")
    return path


def test_trimmed_wheel_loses_only_the_named_files(tmp_path):
    wheel = _fake_wheel(tmp_path / "pkg-1.0-cp312-abi3-manylinux_2_28_x86_64.whl",
                        {"pkg/__init__.py": b"x = 1\n", "pkg/backends/cuda/_C.abi3.so": b"\0" * 1000})
    (tmp_path / "out").mkdir()
    trimmed = gpu_check_setup.trim_wheel(wheel, ("pkg/backends/cuda/_C.*.so",), tmp_path / "out")
    assert trimmed.name == f"pkg-1.0-{gpu_check_setup.TRIM_BUILD_TAG}-cp312-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(trimmed) as z:
        assert sorted(z.namelist()) == ["pkg-1.0.dist-info/RECORD", "pkg/__init__.py"]
        assert "_C.abi3.so" not in z.read("pkg-1.0.dist-info/RECORD").decode()
    with pytest.raises(SystemExit, match="no file matching"):
        gpu_check_setup.trim_wheel(wheel, ("pkg/backends/hip/_C.*.so",), tmp_path / "elsewhere")


def test_compressed_wheel_unpacks_to_the_same_files(tmp_path):
    import lzma

    files = {"pkg/__init__.py": b"x = 1\n" * 100, "pkg/data.bin": bytes(range(256)) * 50}
    wheel = _fake_wheel(tmp_path / "pkg-1.0-py3-none-any.whl", files)
    packed = gpu_check_setup.compress_wheel(wheel, tmp_path / "xz")
    restored = tmp_path / "restored.whl"
    restored.write_bytes(lzma.decompress(packed.read_bytes()))
    with zipfile.ZipFile(wheel) as original, zipfile.ZipFile(restored) as copy:
        assert copy.namelist() == original.namelist()
        assert all(copy.read(name) == original.read(name) for name in original.namelist())


def test_every_comfyui_requirement_is_carried_preinstalled_or_left_out(comfy_root, tmp_path):
    gpu_check_setup.check_requirements_decided(comfy_root)
    (tmp_path / "requirements.txt").write_text((comfy_root / "requirements.txt").read_text() + "\nnew-dep>=1\n")
    with pytest.raises(SystemExit, match="new-dep"):
        gpu_check_setup.check_requirements_decided(tmp_path)


def test_the_entry_runs_as_a_module():
    # As gpu_check.setup runs it after the install: python -m from the repository root.
    result = subprocess.run([sys.executable, "-m", "benchmarks.gpu_check", "--help"], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "--smoke" in result.stdout and "--manifest" in result.stdout


@pytest.mark.skipif(torch.cuda.is_available(), reason="here a GPU check would run")
def test_without_cuda_it_stops_before_installing(tmp_path):
    result = subprocess.run([sys.executable, str(REPO_ROOT / "dev.py"), "gpu-check", "--from", str(tmp_path)],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert "no CUDA device" in result.stderr and "--smoke" in result.stderr
    assert not any(tmp_path.iterdir())


def test_install_refuses_a_folder_prepared_for_another_python(tmp_path):
    (tmp_path / "manifest.json").write_text(json.dumps({"python": "2.7"}))
    with pytest.raises(SystemExit, match="prepared for Python 2.7"):
        gpu_check_setup.install(tmp_path, tmp_path / "work")


# --- the smoke run ---------------------------------------------------------------------

VARIANTS = ("uncached", "defaults", "steps_mask fast", "caching off")
FORECASTS = {"turbo": ("turbo_5_of_8", "turbo_4_of_8"), "raw": ("raw_1_in_4",)}
EXPECTED_CASES = ([f"{w} {v}" for w in ("turbo", "raw") for v in (*VARIANTS, *(f"forecast {p}" for p in FORECASTS[w]))]
                  + [f"raw 2 gpus {v}" for v in gpu_check_cases.TWO_GPU_VARIANTS]
                  + [f"{w} compiled {v}" for w in ("turbo", "raw") for v in gpu_check_cases.COMPILED_VARIANTS])


@pytest.mark.skipif(torch.cuda.device_count() >= 2, reason="here the two-GPU case would run")
def test_the_two_gpu_case_says_skipped_with_fewer_than_two_gpus(capsys):
    import time

    check = gpu_check_phases.Check(server=None, scale=gpu_check_cases.FULL,
                                   budget=gpu_check_budget.Budget(time.time(), 480), model_name="unused", features=0)
    check.two_gpus()
    assert check.two_gpu == "skipped: one GPU"
    assert "[two GPUs] skipped: one GPU" in capsys.readouterr().out
    assert check.rows == {} and check.budget.cuts == []


@pytest.fixture(scope="module")
def smoke_report(comfy_root, tmp_path_factory):
    report_path = tmp_path_factory.mktemp("gpu_check") / "smoke.json"
    # The first run on a machine also compiles inductor's CPU kernels (kept for later runs).
    result = subprocess.run([sys.executable, str(REPO_ROOT / "dev.py"), "gpu-check", "--smoke", "--json",
                             str(report_path)], cwd=REPO_ROOT, capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-3000:]
    return json.loads(report_path.read_text()), result.stdout


def test_smoke_runs_every_case_through_comfyui(smoke_report):
    report, stdout = smoke_report
    assert report["errors"] == [] and report["smoke"] is True
    assert [row["case"] for row in report["cases"]] == EXPECTED_CASES
    assert all(f"\n{case} " in stdout for case in EXPECTED_CASES), "every case is in the printed table"
    for key in ("date", "device", "versions", "settings", "model", "budget", "timings"):
        assert report[key], key
    assert report["versions"]["cache-dit"] and report["versions"]["diffusers"] and report["versions"]["torch"]
    assert report["model"]["shape"] == dataclasses.asdict(Krea2Shape())
    assert all(row["repeats"] >= 1 and row["seconds"] > 0 for row in report["cases"])


def test_smoke_cached_counts_and_references(smoke_report):
    rows = {row["case"]: row for row in smoke_report[0]["cases"]}
    raw_steps = smoke_report[0]["budget"]["raw_steps"]
    for prefix in ("turbo", "turbo compiled", "raw", "raw compiled"):
        uncached, fast = rows[f"{prefix} uncached"], rows[f"{prefix} steps_mask fast"]
        steps = 8 if prefix.startswith("turbo") else raw_steps
        assert uncached["cached"] is None and uncached["ideal"] == 1.0
        cached, total = map(int, fast["cached"].split("/"))
        assert total == steps and 0 < cached < steps and fast["ideal"] > 1.0
        assert fast["deviation"] > 0 and fast["deviation_reference"] == f"{prefix} uncached"
    assert rows["turbo steps_mask fast"]["cached_steps"] == [3, 5, 6]   # cache-dit's 8-step "fast" mask
    assert rows["turbo compiled uncached"]["deviation_reference"] == "turbo uncached"
    assert rows["turbo compiled uncached"]["graphs_compiled_in_warmup"] > 0


def test_smoke_two_device_case_runs_the_split_with_a_cache_per_device(smoke_report):
    report, stdout = smoke_report
    assert report["two_gpu"] == "ran on two CPU device keys (smoke)"
    assert "two GPUs: ran on two CPU device keys (smoke)" in stdout
    rows = {row["case"]: row for row in report["cases"]}
    assert rows["raw 2 gpus uncached"]["devices"] is None and rows["raw 2 gpus uncached"]["vs_one_gpu"] > 0
    fast = rows["raw 2 gpus steps_mask fast"]
    assert fast["devices"] == 2 and fast["cfg_mode"] == "split" and fast["ideal"] > 1.0
    assert fast["cached_steps"] == rows["raw steps_mask fast"]["cached_steps"]
    assert fast["deviation_reference"] == "raw 2 gpus uncached" and fast["deviation"] > 0


def test_smoke_caching_off_is_bit_identical(smoke_report):
    report = smoke_report[0]
    for workload in ("turbo", "raw"):
        row = next(r for r in report["cases"] if r["case"] == f"{workload} caching off")
        assert row["cached"].startswith("0/") and row["deviation"] == 0.0
        assert report["caching_off_overhead"][workload]["bit_identical"] is True


def test_smoke_forecast_rows_forecast_at_their_presets_schedule(smoke_report):
    report, stdout = smoke_report
    rows = {row["case"]: row for row in report["cases"]}
    for workload, steps in (("turbo", 8), ("raw", report["budget"]["raw_steps"])):
        for preset in FORECASTS[workload]:
            row = rows[f"{workload} forecast {preset}"]
            computed = ForecastSettings.from_preset(preset).schedule.computed(steps)
            expected = [step for step, compute in enumerate(computed) if not compute]
            assert row["method"] == "forecast" and row["node_inputs"] == {"preset": preset}
            assert row["forecast_steps"] == expected and row["cached_steps"] == expected
            assert row["cached"] == f"{len(expected)}/{steps}"
            # A forecast step runs no block: the ideal is the steps over the computed ones.
            assert row["ideal"] == pytest.approx(steps / sum(computed), abs=1e-4)
            assert row["deviation"] > 0 and row["deviation_reference"] == f"{workload} uncached"
            assert row["peak_vram_gib"] is None or row["peak_vram_gib"] > 0
            assert row["speedup"] > 0 and row["wall_over_ideal"] == pytest.approx(row["speedup"] / row["ideal"])
            assert f"\n{workload} forecast {preset} " in stdout
    assert rows["turbo defaults"]["method"] == "dbcache" and rows["turbo uncached"]["method"] is None
