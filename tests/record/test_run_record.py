"""One function builds the record of a run on one device and on several.

Two copies of a small seeded diffusers Krea-2 sample cond and uncond side by side, each on its
own thread as ComfyUI's multi-GPU pool runs them (device labels stand for the GPUs); the same
cond and uncond split over one copy are the one-device case. ``run_record.build`` makes both
records from the runs' observations.
"""

from __future__ import annotations

import dataclasses

from cache_runs import (NODE, COND, FAST, FAST_MASK_CACHED, STEPS, UNCOND, run_on_two_devices, run_split,
                        seeded_transformer)
from krea2_cachedit.adapters.record import run_record
from krea2_cachedit.adapters.record.run_record import RunMeta
from krea2_cachedit.adapters.sampling.step_clock import StepClock

META = RunMeta(node_name=NODE, node_id="5", prompt_id="p", cfg=3.5, guidance={"cfg": 3.5})


def record_of(run, clock: StepClock) -> run_record.RunRecord:
    return run_record.build(run.outcome(), META)


def test_one_and_two_devices_are_recorded_by_the_same_build():
    one, _ = run_split(seeded_transformer(), FAST, (COND, UNCOND))
    single = record_of(one, one.clock)
    double = record_of(*run_on_two_devices())
    for record in (single, double):
        assert (record.status, record.cfg_mode, record.cached_steps) == ("ok", "split", FAST_MASK_CACHED)
        assert (record.node_id, record.prompt_id, record.cfg, record.calls) == ("5", "p", 3.5, 2 * STEPS)
        assert record.step_states == ["cached" if s in FAST_MASK_CACHED else "computed" for s in range(STEPS)]
        assert record.threshold_suggestions == [] and all(d is not None for d in record.residual_diffs[1:])
    # One device: both streams in one module, cache-dit told the calls alternate.
    assert single.has_separate_cfg and (single.devices, single.parallel_block_evals) == ([], None)
    assert [s.get("device") for s in single.streams] == [None, None]
    # Two devices: one stream each, so each cache-dit sees one call per step; the wall time follows
    # the busier device of each step.
    assert not double.has_separate_cfg and double.device_count == 2
    assert [(d["device"], d["cfg_mode"], d["calls"], d["cached_steps"]) for d in double.devices] == [
        ("cuda:0", "none", STEPS, FAST_MASK_CACHED), ("cuda:1", "none", STEPS, FAST_MASK_CACHED)]
    assert [d["threads"] for d in double.devices] == [["device-0"], ["device-1"]]
    blocks = single.block_evals_uncached // (2 * STEPS)
    assert double.parallel_block_evals == [5 * blocks + 3, STEPS * blocks]
    assert double.ideal_speedup == single.ideal_speedup
    assert [s["device"] for s in double.streams] == ["cuda:0", "cuda:1"]
    assert [(c[0], c[1]) for c in double.call_log] == [(s, [b]) for s in range(STEPS) for b in (COND, UNCOND)]
    # Both estimates rest on the same per-step rule: a cached call would have cost its stream's median.
    for record in (single, double):
        assert record.estimated_uncached_s > record.duration_s > 0


def test_the_estimate_takes_each_steps_slowest_device():
    """On one device the saved time adds up per call; on two, per step the slower device counts."""
    one, _ = run_split(seeded_transformer(), FAST, (COND, UNCOND))
    [observation] = one.observations
    seconds = [[0.1 if call.skipped else 1.0 for call in observation.calls]]
    # Six cached calls, each 0.9 s short of its stream's computed median.
    assert abs(run_record.estimate_uncached_seconds(10.0, [observation], seconds) - (10.0 + 6 * 0.9)) < 1e-9
    halves = [observation.calls[0::2], observation.calls[1::2]]   # cond, uncond
    split = [dataclasses.replace(observation, calls=tuple(calls)) for calls in halves]
    per_device = [[0.1 if call.skipped else 1.0 for call in calls] for calls in halves]
    per_device[1] = [2 * t for t in per_device[1]]   # the uncond device is twice as slow
    # Per cached step the slower device saves 1.8 s; the faster one's 0.9 s is hidden behind it.
    assert abs(run_record.estimate_uncached_seconds(10.0, split, per_device) - (10.0 + 3 * 1.8)) < 1e-9
