"""Krea-2 at its real size through the real ComfyUI server: width 6144, 48 heads / 12 KV heads,
text 12 x 2560, a 1024x1024 image (4096 image tokens), only the block count cut to 2.

One Fn residual of such a call holds 1 x 4112 x 6144 = 25M values, above 2**24 (where float32
index arithmetic breaks) and the size every per-call piece of the pack works at on a real run.
A width-6144 block costs some tens of seconds per call on a 2-core CPU, so the tier keeps to three
two-step prompts (about 11 block evaluations): the graph without the node, the node with caching
off (bit-identical to it), and a run whose threshold lies just above the measured change, so that
cache-dit caches step 1 by comparing the real-size residuals; and, through the GPU check's own prompt
and report code, a one-step DBCache prompt and a four-step Cache-DiT Forecast prompt that forecasts
one step from real-size features, so that the check's first run on a GPU cannot fail on shapes. The model,
its prompt and its server (``devkit/realshape.py``) are what the memory benchmark
(``benchmarks/realshape_memory.py``) runs too.
"""

from __future__ import annotations

import pytest
import torch

from devkit.realshape import (FN_RESIDUAL_VALUES, REALSHAPE, REALSHAPE_MODEL, REALSHAPE_SIZE, REALSHAPE_TOKENS,
                              realshape_prompt, start_realshape_server)

pytestmark = pytest.mark.tier("realshape")


@pytest.fixture(scope="module")
def realshape_server(comfy_root, tmp_path_factory):
    server = start_realshape_server(comfy_root, tmp_path_factory.mktemp("realshape"))
    yield server
    server.stop()


@pytest.fixture(scope="module")
def plain_and_off(realshape_server):
    """The graph without the node, and with the node and caching off (same seed)."""
    plain = realshape_server.run(realshape_prompt(None))
    entry, [record] = realshape_server.run_with_stats(
        realshape_prompt({"residual_diff_threshold": 0.0, "max_warmup_steps": 1}), timeout=1800)
    return realshape_server.saved_latent(plain, "7"), realshape_server.saved_latent(entry, "7"), record


def test_the_real_size_is_above_float32_index_range():
    assert REALSHAPE.features == 6144 and (REALSHAPE.heads, REALSHAPE.kvheads) == (48, 12)
    assert REALSHAPE.context_features == 12 * 2560
    assert FN_RESIDUAL_VALUES > 2 ** 24


def test_caching_off_at_real_size_is_bit_identical_to_no_node(plain_and_off):
    plain, off, record = plain_and_off
    assert record["status"] == "ok" and record["cached_steps"] == []
    assert torch.equal(plain, off)
    # The change at step 1 was measured on the full-size residual (the diagnostics ran every call).
    assert record["residual_diffs"][0] is None and record["residual_diffs"][1] > 0
    assert record["step_reasons"] == ["warmup", "threshold_off"]


def test_a_threshold_just_above_the_change_caches_step_1_at_real_size(realshape_server, plain_and_off):
    _, _, off = plain_and_off
    change = off["residual_diffs"][1]
    _, [record] = realshape_server.run_with_stats(
        realshape_prompt({"residual_diff_threshold": min(change * 1.02, 0.99), "max_warmup_steps": 1}), timeout=1800)
    assert record["status"] == "ok"
    # Step 0 computes the same in both runs, so step 1 has the same change; cache-dit found it
    # below the threshold and skipped block 1: 2 + 1 block evaluations.
    assert record["residual_diffs"][1] == change
    assert record["cached_steps"] == [1] and record["step_reasons"] == ["warmup", "threshold"]
    assert (record["block_evals"], record["block_evals_uncached"]) == (3, 4)


def test_the_gpu_checks_prompt_and_report_run_at_real_size(realshape_server):
    from benchmarks.gpu_check import cases as gpu_check_cases
    from benchmarks.gpu_check import rows as gpu_check_rows
    from benchmarks.speedup import Case, case_prompt, run_prompt

    case = Case("turbo defaults", 1, 1.0, gpu_check_cases.VARIANTS["defaults"])
    prompt = case_prompt(case, REALSHAPE_MODEL, REALSHAPE.context_features, seed=0, size=REALSHAPE_SIZE,
                         tokens=REALSHAPE_TOKENS)
    result = run_prompt(realshape_server, prompt, timeout=1800)
    assert tuple(result.latent.shape[-2:]) == (REALSHAPE_SIZE // 8, REALSHAPE_SIZE // 8)
    row = gpu_check_rows.Measured(case, "turbo", "defaults", False, case.cache, times=[result.seconds],
                                  stats=result.stats, records=[result.stats])
    [summary] = gpu_check_rows.summarize({("turbo", False, "defaults"): row})
    assert summary["cached"] == "0/1" and summary["effective_settings"]["residual_diff_threshold"] == 0.24
    assert result.stats["status"] == "ok" and result.stats["duration_s"] > 0


def test_the_gpu_checks_forecast_row_runs_at_real_size(realshape_server):
    from benchmarks.gpu_check import cases as gpu_check_cases
    from benchmarks.gpu_check import rows as gpu_check_rows
    from benchmarks.speedup import case_prompt, run_prompt

    # turbo_5_of_8's schedule on 4 steps: 0 and 1 warmup, 2 forecast from their real-size features, 3 computed.
    row = gpu_check_rows.new_row(gpu_check_cases.TURBO, "forecast turbo_5_of_8", False, steps=4)
    prompt = case_prompt(row.case, REALSHAPE_MODEL, REALSHAPE.context_features, seed=0, size=REALSHAPE_SIZE,
                         tokens=REALSHAPE_TOKENS)
    result = run_prompt(realshape_server, prompt, timeout=1800)
    assert result.stats["status"] == "ok" and result.stats["step_reasons"] == ["warmup", "warmup", "forecast", "final_steps"]
    row.times, row.stats, row.records = [result.seconds], result.stats, [result.stats]
    [summary] = gpu_check_rows.summarize({row.key: row})
    assert summary["method"] == "forecast" and summary["node_inputs"] == {"preset": "turbo_5_of_8"}
    assert summary["forecast_steps"] == [2] and summary["cached"] == "1/4"
    assert summary["ideal"] == pytest.approx(8 / 6, abs=1e-4), "2 blocks in 3 computed calls, none in the forecast one"
    assert torch.isfinite(result.latent).all()
