"""Why a run cached what it did, against real cache-dit and a small seeded diffusers Krea-2.

The pack measures each step's Fn residual change itself and replays cache-dit's
rules; these tests hold the advisor's replay (its threshold intervals) to what
cache-dit actually decided in the same run, and its suggestions to what a re-run
with them does.
"""

from __future__ import annotations

import math

import pytest
import torch

from cache_runs import (COND, SHAPE, SIGMAS, STEPS, UNCOND, Stream, cache_dit_change, forward, held_residuals, open_run,
                        record_of, run_single, run_split)
from krea2_cachedit.adapters.dbcache.decision_rules import DecisionRules
from krea2_cachedit.adapters.dbcache.residual_trace import StreamTrace
from krea2_cachedit.adapters.dbcache.threshold_advisor import pair_changes, threshold_intervals
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings
from devkit.krea2_synthetic import diffusers_transformer


def replay_of(run) -> set[int]:
    """The steps the advisor's replay says cache-dit caches at the run's own threshold, from the run's
    own measured changes: the cached steps of the threshold interval that holds it."""
    cached = None
    for trace, rules in run.stream_traces():
        intervals = threshold_intervals(rules, pair_changes(trace))
        [steps] = [set(cached) for low, high, cached in intervals if low < rules.threshold <= high]
        cached = steps if cached is None else cached & steps
    return cached


@pytest.fixture(scope="module")
def measured(transformer):
    """A run with caching off: the residual changes of the reference trajectory."""
    return record_of(run_single(transformer, DBCacheSettings(residual_diff_threshold=0.0), Stream(COND, 1)))


def test_changes_are_measured_on_every_step_even_with_caching_off(measured):
    assert measured.cached_steps == []
    assert measured.residual_diffs[0] is None, "step 0 has nothing to compare with"
    assert all(d is not None and d > 0 for d in measured.residual_diffs[1:])
    assert measured.step_reasons == ["warmup"] * 4 + ["threshold_off"] * 4


def test_a_change_is_measured_against_the_last_computed_step_not_the_previous_one():
    trace = StreamTrace((0,), context=0, start_step=0)
    residuals = [torch.full((2, 3), v) for v in (1.0, 1.1, 1.3)]
    trace.observe(0, residuals[0])
    trace.finish(0, cached=False)
    trace.observe(1, residuals[1])
    trace.finish(1, cached=True)        # cached: cache-dit keeps step 0's residual as its reference
    trace.observe(2, residuals[2])
    trace.finish(2, cached=False)
    diffs = trace.measured_diffs()
    assert diffs[1] == pytest.approx(0.1) and diffs[2] == pytest.approx(0.3)
    assert float(cache_dit_change(residuals[1], residuals[2])) == pytest.approx(0.2 / 1.1)


@pytest.mark.parametrize("overrides", [
    {},
    {"max_continuous_cached_steps": 1},
    {"max_continuous_cached_steps": -1, "max_cached_steps": 2},
    {"max_warmup_steps": 2, "warmup_interval": 2},
    {"steps_mask": "medium"},
], ids=["reference_limits", "one_in_a_row", "at_most_two", "warmup_interval", "mask"])
def test_replay_matches_what_cache_dit_decided(transformer, measured, overrides):
    # Thresholds that do cache on these random weights: halfway between changes measured above
    # (a threshold equal to a change would test float rounding, not the rules).
    changes = sorted(d for d in measured.residual_diffs if d is not None)
    middles = [(a + b) / 2 for a, b in zip(changes, changes[1:])]
    for threshold in (middles[0], middles[len(middles) // 2], changes[-1] * 1.05):
        settings = DBCacheSettings(**{"residual_diff_threshold": threshold, "max_warmup_steps": 2, **overrides})
        run = run_single(transformer, settings, Stream(COND, 1))
        assert replay_of(run) == set(record_of(run).cached_steps), f"threshold {threshold} {overrides}"
    assert record_of(run).cached_steps, "the last threshold must cache something, or the check says little"


def test_replay_matches_cache_dit_for_split_cond_and_uncond(transformer):
    settings = DBCacheSettings(residual_diff_threshold=0.9, max_warmup_steps=2, max_continuous_cached_steps=2)
    run, _ = run_split(transformer, settings, (UNCOND, COND))
    record = record_of(run)
    assert record.has_separate_cfg and len(record.streams) == 2
    assert replay_of(run) == set(record.cached_steps)
    per_stream = [s["residual_diffs"] for s in record.streams]
    # The step's change is the larger of the two streams'.
    for step in range(1, STEPS):
        values = [diffs[step] for diffs in per_stream]
        assert record.residual_diffs[step] == pytest.approx(max(values))


def test_reasons_follow_the_rules(transformer):
    settings = DBCacheSettings(residual_diff_threshold=1.9, max_warmup_steps=2, max_continuous_cached_steps=2)
    record = record_of(run_single(transformer, settings, Stream(COND, 1)))
    # A threshold that always passes: warmup, then two cached, one computed for the limit, two cached...
    assert record.step_reasons == ["warmup", "warmup", "threshold", "threshold", "max_continuous",
                                   "threshold", "threshold", "max_continuous"]
    assert record.cached_steps == [2, 3, 5, 6]
    masked = record_of(run_single(transformer, DBCacheSettings(steps_mask="fast"), Stream(COND, 1)))
    assert masked.step_reasons == ["warmup"] * 3 + ["mask"] * 5 and masked.cached_steps == [3, 5, 6]


def test_suggested_thresholds_cache_what_they_promise_give_or_take_one(transformer, measured):
    suggestions = measured.threshold_suggestions
    assert suggestions, "a run with measured changes suggests thresholds"
    assert [s["threshold"] for s in suggestions] == sorted(s["threshold"] for s in suggestions)
    counts = [len(s["cached_steps"]) for s in suggestions]
    assert counts == sorted(set(counts)) and counts[0] >= 1
    # What each would cost in plain steps: fewer with every step more it caches, never more than the run's.
    costs = [s["equal_cost_steps"] for s in suggestions]
    assert costs == sorted(costs, reverse=True) and costs[0] <= len(measured.step_reasons), costs
    rerun_costs = []
    for suggestion in suggestions:
        low, high = suggestion["range"]
        assert low < suggestion["threshold"] < high or suggestion["threshold"] == 1.0
        rerun = record_of(run_single(transformer, DBCacheSettings(residual_diff_threshold=suggestion["threshold"]),
                           Stream(COND, 1)))
        assert abs(len(rerun.cached_steps) - len(suggestion["cached_steps"])) <= 1, (suggestion, rerun.cached_steps)
        if len(rerun.cached_steps) == len(suggestion["cached_steps"]):
            rerun_costs.append((suggestion["equal_cost_steps"], rerun.equal_cost_steps))
    assert rerun_costs and all(said == ran for said, ran in rerun_costs), rerun_costs


def test_time_estimate_adds_what_the_cached_calls_saved(transformer, measured):
    assert measured.estimated_uncached_s == pytest.approx(measured.duration_s)
    record = record_of(run_single(transformer, DBCacheSettings(steps_mask="ultra"), Stream(COND, 1)))
    assert record.cached_steps and record.estimated_uncached_s > record.duration_s
    assert record.as_dict()["estimated_speedup"] > 1.0


def test_decision_rules_of_a_fresh_context_mid_run():
    settings = DBCacheSettings(steps_mask="fast", max_warmup_steps=4)
    # cache-dit gets the rest of the mask from step 3 on, with its first step computing.
    rules = DecisionRules.for_context(settings, [1, 1, 0, 0, 1], start_step=3)
    assert rules.warmup_steps == frozenset({3, 4})
    reasons = rules.explain([3, 4, 5, 6, 7], {3: False, 4: False, 5: True, 6: True, 7: False})
    assert reasons == {3: "fresh_context", 4: "warmup", 5: "mask", 6: "mask", 7: "mask"}


# --- the numbers cache-dit decides on -----------------------------------------------------------

def run_in_bf16(transformer, settings: DBCacheSettings):
    """One stream on a bf16 model (as Krea-2 runs on a GPU); also what cache-dit itself compared."""
    import cache_dit

    stream = Stream(COND, 1)
    with open_run(transformer, settings, conds_per_step=1) as run:
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [COND], [stream.x.shape]):
                out = forward_bf16(transformer, stream.x, stream.context, SIGMAS[i])
            stream.advance(out.float(), float(SIGMAS[i]), float(SIGMAS[i + 1]))
        compared = {}
        for stats in cache_dit.summary(transformer, logging=False):
            compared.update(stats.residual_diffs)
    # cache-dit's own record of the changes it compared (negative values mark "not compared").
    return run, {int(step): value for step, value in compared.items() if value > 0}


def forward_bf16(transformer, x, context, sigma):
    ids = torch.zeros(context.shape[1] + x.shape[1], 3)
    ids[context.shape[1]:, 1] = torch.arange(x.shape[1]) // 4
    ids[context.shape[1]:, 2] = torch.arange(x.shape[1]) % 4
    timestep = torch.full((x.shape[0],), float(sigma), dtype=torch.bfloat16)
    bf16 = torch.bfloat16
    return transformer(x.to(bf16), context.to(bf16), timestep, ids.to(bf16)).sample


@pytest.fixture(scope="module")
def bf16_transformer():
    return diffusers_transformer(SHAPE, seed=3, dtype=torch.bfloat16)


def test_in_bf16_at_the_threshold_chart_reasons_and_replay_are_what_cache_dit_decided(bf16_transformer):
    measure = DBCacheSettings(residual_diff_threshold=0.0, max_warmup_steps=2)
    change = record_of(run_in_bf16(bf16_transformer, measure)[0]).residual_diffs[2]   # the first step compared
    outcomes = {}
    # cache-dit caches when change < threshold: at the change itself it computes, one float above it caches.
    for threshold in (change, math.nextafter(change, math.inf)):
        run, compared = run_in_bf16(bf16_transformer, DBCacheSettings(
            residual_diff_threshold=threshold, max_warmup_steps=2, max_continuous_cached_steps=-1))
        record = record_of(run)
        assert compared and all(record.residual_diffs[step] == value for step, value in compared.items()), \
            (compared, record.residual_diffs)
        for step, reason in enumerate(record.step_reasons):
            if reason == "threshold":   # the chart: below the threshold line <=> cached
                assert (record.residual_diffs[step] < threshold) == (step in record.cached_steps), step
        assert replay_of(run) == set(record.cached_steps)
        outcomes[threshold] = 2 in record.cached_steps
    assert list(outcomes.values()) == [False, True]


def test_a_stream_holds_one_full_residual_through_the_middle_blocks(transformer):
    held = []
    run_box = []

    def count(module, args):
        if run_box:
            held.append(max((held_residuals(trace) for trace, _ in run_box[0].stream_traces()), default=0))

    # Block 2 is a middle block (Fn=1, Bn=0): it runs only in computed calls, at the activation peak.
    hook = transformer.transformer_blocks[2].register_forward_pre_hook(count)
    try:
        streams = {COND: Stream(COND, 1, tokens=5), UNCOND: Stream(UNCOND, 2, tokens=7)}
        settings = DBCacheSettings(residual_diff_threshold=0.0, max_warmup_steps=2)
        with open_run(transformer, settings, conds_per_step=2) as run:
            run_box.append(run)
            for i in range(STEPS):
                for branch in (COND, UNCOND):
                    s = streams[branch]
                    with run.model_call(SIGMAS[i], [branch], [s.x.shape, s.context.shape]):
                        out = forward(transformer, s.x, s.context, SIGMAS[i])
                    s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    finally:
        hook.remove()
    assert len(held) == 2 * STEPS and max(held) == 1
    assert all(held_residuals(trace) == 0 for trace, _ in run.stream_traces()), "released at the end"
