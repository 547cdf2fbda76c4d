"""Checks of a run's record (the stats a cache or Forecast node publishes in the real server) and probes of what
ran, shared by the test groups that sample through a family's graph (sampling, forecast, families).
"""

from __future__ import annotations

import json

import pytest

from devkit.family_prompts import FAMILIES
from helpers import FAST_8_CACHED

STEPS = 8
FORECAST_STEPS = [2, 4, 6]
REASONS = ["warmup", "warmup", "forecast", "schedule", "forecast", "schedule", "forecast", "final_steps"]
# The Forecast node's custom inputs that forecast nothing: every step computed.
FORECAST_NOTHING = {"forecast": "linear", "warmup_steps": 0, "window_size": 1.0, "window_growth": 0.0}


def check_attribution(record: dict, streams: int = 1):
    """Each step's served calls are its first evaluation at sigma[i]; its other calls lie within the step."""
    sigmas = record["sigmas"]
    served: dict[int, list] = {}
    for step, branches, was_served, _, sigma in record["call_log"]:
        if was_served:
            served.setdefault(step, []).append(branches)
            # (exp_heun_2_x0 and kin reach sigma[i] through a log-SNR round trip: 3e-5 off in float32)
            assert sigma == pytest.approx(sigmas[step], rel=1e-4), f"step {step} served a call at sigma {sigma}"
        else:
            # Further evaluations of step i lie between sigma[i] and (heunpp2's look-ahead) sigma[i+2].
            lowest = sigmas[min(step + 2, len(sigmas) - 1)]
            assert lowest - 1e-6 <= sigma <= sigmas[step] + 1e-6, f"step {step} has an extra call at {sigma}"
    assert sorted(served) == list(range(record["steps"])), "every step has its served call"
    assert all(len(calls) == streams for calls in served.values()), served
    assert record["cache_contexts"] == 1


def expected_calls(branches_per_call: list[list[int]], steps: int) -> list[tuple[int, list[int], bool]]:
    """(step, branches, served) of a two-evaluation sampler: each step's first evaluation served, its
    second computed beside the cache; the last step integrates down to sigma 0 with one evaluation."""
    calls = []
    for step in range(steps):
        calls += [(step, branches, True) for branches in branches_per_call]
        if step < steps - 1:
            calls += [(step, branches, False) for branches in branches_per_call]
    return calls


def check_two_evaluation_record(record: dict, family: str, branches_per_call: list[list[int]], mode: str,
                                steps: int = STEPS, cached_steps: list[int] = FAST_8_CACHED):
    assert record["status"] == "ok" and record["model"] == family_name(family) and record["steps"] == steps
    assert record["cfg_mode"] == mode and record["has_separate_cfg"] == (mode == "split")
    check_attribution(record, streams=len(branches_per_call))
    assert [(s, b, served) for s, b, served, _, _ in record["call_log"]] == expected_calls(branches_per_call, steps)
    evaluations = len(branches_per_call) * (2 * steps - 1)
    assert record["calls"] == evaluations and record["extra_calls"] == evaluations - len(branches_per_call) * steps
    assert record["cached_steps"] == cached_steps


def family_name(family: str) -> str:
    return FAMILIES[family].name


def check_forecast(record: dict, family: str, calls_per_step: int):
    spec = FAMILIES[family]
    assert record["status"] == "ok" and record["model"] == spec.name and record["node_id"] == "5"
    assert record["method"]["name"] == "forecast" and record["method"]["preset"] == "turbo_5_of_8"
    assert record["forecast_steps"] == FORECAST_STEPS and record["step_reasons"] == REASONS
    assert record["calls"] == 8 * calls_per_step
    # 5 of 8 steps computed in full cost 5 steps, whatever the CFG layout: a forecast call runs no block.
    assert (record["full_calls"], record["equal_cost_steps"]) == (5 * calls_per_step, 5), record
    # A forecast call runs no block; a computed one every block.
    assert [call[3] for call in record["call_log"]] == [
        0 if call[0] in FORECAST_STEPS else spec.blocks for call in record["call_log"]]


def check_forecast_layout(record: dict, family: str, layout: str):
    """``check_forecast`` for a run in a CFG layout ("none", "batched", "split"): one history for a batched call,
    one per stream apart, each with the preset's steps."""
    check_forecast(record, family, calls_per_step=2 if layout == "split" else 1)
    assert (record["cfg_mode"], record["has_separate_cfg"]) == (layout, layout == "split")
    streams = record["streams"]
    if layout == "none":
        assert len(streams) == 1
    elif layout == "batched":
        assert [s["branches"] for s in streams] == [[1, 0]], "one history for the batch"
    else:
        assert sorted(s["branches"] for s in streams) == [[0], [1]], "a history per stream"
        assert all(s["forecast_steps"] == FORECAST_STEPS for s in streams)


def with_probe(prompt: dict, log_path) -> dict:
    """Krea2TestAttentionOverrideProbe right after the loader."""
    prompt["20"] = {"class_type": "Krea2TestAttentionOverrideProbe",
                    "inputs": {"model": ["1", 0], "log_path": str(log_path)}}
    consumer = "5" if "5" in prompt else "6"
    prompt[consumer]["inputs"]["model"] = ["20", 0]
    return prompt


def blocks_seen(log_path) -> list[list[tuple[int, int]]]:
    """Per model call (a new sigma), the (block_type, block_index, total_blocks) of each block's attention,
    in order."""
    calls: list[list] = []
    last_sigma = None
    for line in log_path.read_text().splitlines():
        event = json.loads(line)
        if event["block_index"] is None:
            continue  # Z-Image's refiners run before the block loop, outside the cached stack
        seen = (event["block_type"], event["block_index"], event["total_blocks"])
        if event["sigma"] != last_sigma:
            calls.append([])
            last_sigma = event["sigma"]
        if not calls[-1] or calls[-1][-1] != seen:  # Wan's blocks attend twice (self, cross)
            calls[-1].append(seen)
    return calls
