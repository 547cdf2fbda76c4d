"""How many calls a run made in full, and the step count whose uncached run costs as much, in every call pattern.

Real runs of a small seeded diffusers Krea-2 (``cache_runs``): DBCache's cached calls still run their first block
(Fn 1), forecast calls run none, CFG makes two calls a step (split) or one (batched), a corrector one more. The
expected step count here is the brief's definition written out: the fewest steps whose uncached run, making as many
calls a step as this one did, evaluates at least as many blocks.
"""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest

from cache_runs import (COND, FAST, FAST_MASK_CACHED, OFF, SHAPE, SIGMAS, STEPS, TURBO, TURBO_FORECAST, UNCOND, Stream,
                        fail_after_one_call, forward, open_run, record_of, run_batched, run_on_two_devices, run_single,
                        run_split, seeded_transformer)
from devkit.comfy_harness import strict_loads
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run
from krea2_cachedit.adapters.record.run_record import RunMeta, skipped_record

BLOCKS = SHAPE.layers
CACHED = len(FAST_MASK_CACHED)


def fewest_steps(block_evals: int, calls_per_step: int) -> int:
    """The smallest n whose uncached run (n steps of ``calls_per_step`` full calls) evaluates ``block_evals``."""
    return next(n for n in itertools.count(1) if n * calls_per_step * BLOCKS >= block_evals)


def test_one_call_per_step():
    record = record_of(run_single(seeded_transformer(), FAST, Stream(COND, 1)))
    assert record.full_calls == STEPS - CACHED
    # A cached call ran its Fn block: the run cost more than its computed steps, so one step more.
    assert record.block_evals == (STEPS - CACHED) * BLOCKS + CACHED
    assert record.equal_cost_steps == fewest_steps(record.block_evals, 1) == STEPS - CACHED + 1
    assert f"{STEPS - CACHED} of {STEPS} calls computed: as many as {STEPS - CACHED + 1} steps" in record.log_line("n")


@pytest.mark.parametrize("layout", ["split", "batched"])
def test_cfg_counts_a_step_as_the_calls_it_made(layout):
    """Split CFG: two calls a step, each counted; batched: one call a step for both conds."""
    transformer = seeded_transformer()
    if layout == "split":
        run, _ = run_split(transformer, FAST, (COND, UNCOND))
    else:
        with open_run(transformer, FAST, conds_per_step=2) as run:
            run_batched(transformer, run, Stream(UNCOND, 2), Stream(COND, 1))
    record = record_of(run, cfg=3.5)
    calls_per_step = 2 if layout == "split" else 1
    assert (record.cfg_mode, record.calls) == (layout, calls_per_step * STEPS)
    assert record.full_calls == calls_per_step * (STEPS - CACHED)
    assert record.equal_cost_steps == fewest_steps(record.block_evals, calls_per_step) == STEPS - CACHED + 1
    assert (f"{calls_per_step * (STEPS - CACHED)} of {calls_per_step * STEPS} calls computed: "
            f"as many as {STEPS - CACHED + 1} steps") in record.log_line("n")


def test_a_correctors_extra_calls_count_in_full():
    """heun-like: a second evaluation each step, computed in full beside the cache."""
    transformer, stream = seeded_transformer(), Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=1) as run:
        for i in range(STEPS):
            for sigma in (SIGMAS[i], (SIGMAS[i] + SIGMAS[i + 1]) / 2):
                with run.model_call(sigma, [COND], [stream.x.shape]):
                    out = forward(transformer, stream.x, stream.context, sigma)
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    record = record_of(run)
    assert (record.calls, record.extra_calls, record.full_calls) == (2 * STEPS, STEPS, 2 * STEPS - CACHED)
    assert record.equal_cost_steps == fewest_steps(record.block_evals, 2)


def test_two_devices_count_as_one():
    """cond and uncond on two devices side by side: the same count as both on one device."""
    one, _ = run_split(seeded_transformer(), FAST, (COND, UNCOND))
    single, double = record_of(one, cfg=3.5), record_of(run_on_two_devices()[0], cfg=3.5)
    assert double.device_count == 2 and double.parallel_block_evals is not None
    assert double.full_calls == single.full_calls == 2 * (STEPS - CACHED)
    assert double.equal_cost_steps == single.equal_cost_steps == STEPS - CACHED + 1


@pytest.mark.parametrize("layout", ["one call", "split"])
def test_a_forecast_call_runs_no_block(layout):
    """The Forecast node's turbo_5_of_8: 5 of 8 steps computed cost exactly 5 steps."""
    transformer = seeded_transformer()
    run = (run_single(transformer, TURBO, Stream(COND, 1)) if layout == "one call"
           else run_split(transformer, TURBO, (COND, UNCOND))[0])
    record = record_of(run)
    calls_per_step = 1 if layout == "one call" else 2
    computed = STEPS - len(TURBO_FORECAST)
    assert record.forecast_steps == TURBO_FORECAST and record.full_calls == calls_per_step * computed
    assert record.equal_cost_steps == computed == fewest_steps(record.block_evals, calls_per_step)
    assert (f"{calls_per_step * computed} of {calls_per_step * STEPS} calls computed: as many as {computed} steps"
            in record.log_line("n"))


def test_a_run_that_caches_nothing_costs_its_own_steps():
    record = record_of(run_single(seeded_transformer(), OFF, Stream(COND, 1)))
    assert (record.full_calls, record.equal_cost_steps) == (STEPS, STEPS)


def test_a_failed_run_counts_its_calls_but_names_no_step_count():
    """No image came out of it: nothing to compare with fewer steps."""
    transformer = seeded_transformer()
    run = open_run(transformer, FAST, conds_per_step=1)
    with pytest.raises(RuntimeError, match="boom"):
        fail_after_one_call(run, transformer)
    record = record_of(run)
    assert (record.status, record.full_calls, record.equal_cost_steps) == ("error", 1, None)
    assert "1 of 1 calls computed, " in record.log_line("n") and "as many as" not in record.log_line("n")


def test_a_run_left_uncached_says_nothing_of_its_calls():
    """The pack left the run to the model: another step cache on it may have skipped steps, or another cache node
    after this one cached them, so neither count nor step count would be honest."""
    record = skipped_record(4, RunMeta(node_name="n", node_id="5", prompt_id="p"), "why")
    assert (record.full_calls, record.equal_cost_steps) == (None, None)
    assert "calls" not in record.log_line("n") and "as many as" not in record.log_line("n")
    assert "block evaluations saved 0/0 (0%), CFG" in record.log_line("n")
    data = record.as_dict()
    assert (data["full_calls"], data["equal_cost_steps"]) == (None, None)
    assert strict_loads(json.dumps(data)) == data


# --- before the run: what a template's fewer-steps branch is set to -----------------------------------------------

def plan_of(settings: DBCacheSettings):
    return plan_run(settings, STEPS, BLOCKS, "n")


@pytest.mark.parametrize("mask", ["slow", "medium", "fast", "ultra"])
def test_a_step_mask_fixes_the_step_count_before_the_run(transformer, mask):
    settings = DBCacheSettings(steps_mask=mask)
    plan = plan_of(settings)
    record = record_of(run_single(transformer, settings, Stream(COND, 1)))
    assert plan.fixes_its_steps and plan.most_cached_steps() == record.cached_steps
    assert plan.equal_cost_steps((BLOCKS,)) == record.equal_cost_steps


def test_a_threshold_caches_at_most_what_the_rules_leave_it(transformer):
    """The loosest threshold caches every step the warmup and the limits allow: the plan's bound. A tighter one
    caches fewer, and the run costs as many steps or more."""
    loose = DBCacheSettings(residual_diff_threshold=2.0, max_warmup_steps=2, max_continuous_cached_steps=2)
    plan = plan_of(loose)
    record = record_of(run_single(transformer, loose, Stream(COND, 1)))
    assert not plan.fixes_its_steps and plan.most_cached_steps() == record.cached_steps == [2, 3, 5, 6]
    assert plan.equal_cost_steps((BLOCKS,)) == record.equal_cost_steps
    tight = dataclasses.replace(loose, residual_diff_threshold=0.5)
    record = record_of(run_single(transformer, tight, Stream(COND, 1)))
    assert set(record.cached_steps) < set(plan.most_cached_steps()), record.residual_diffs
    assert record.equal_cost_steps >= plan_of(tight).equal_cost_steps((BLOCKS,))


def test_threshold_zero_caches_nothing_and_costs_every_step():
    plan = plan_of(DBCacheSettings(residual_diff_threshold=0.0))
    assert plan.fixes_its_steps and plan.most_cached_steps() == [] and plan.equal_cost_steps((BLOCKS,)) == STEPS


def test_each_block_list_runs_its_own_fn_blocks_in_a_cached_call():
    """Flux.1's 19 double and 38 single blocks, 20 steps at the defaults: the 12 steps the rules leave the threshold
    cost 2 blocks each, 24 of a step's 57, so 8 computed steps and one more."""
    plan = plan_run(DBCacheSettings(), 20, 57, "n")
    assert len(plan.most_cached_steps()) == 12 and plan.equal_cost_steps((19, 38)) == 9
    # Where the cached calls' blocks add up to more than a step: 12 cached steps at Fn 3 in both lists cost 72 blocks.
    plan = plan_run(DBCacheSettings(Fn_compute_blocks=3), 20, 57, "n")
    assert plan.equal_cost_steps((19, 38)) == 8 + 2
