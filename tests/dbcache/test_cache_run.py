"""The adapter layer against real cache-dit and a small seeded diffusers Krea-2.

Each test drives a ``CacheRun`` with one of the call patterns ComfyUI produces
(one call per step, cond+uncond batched, split in either order, several calls
per step, a layout change mid-run) and checks which steps were cached and that
a stream's cached result is exactly what that stream alone would get: if cond
and uncond residuals were ever mixed, the outputs would differ.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from cache_runs import (NODE, COND, FAST, FAST_MASK_CACHED, SHAPE, SIGMAS, STEPS, UNCOND, Stream, assert_same_outputs,
                        clean_block_evals, fail_after_one_call, forward, open_run, plain_outputs, record_of, run_alone_from, run_batched,
                        run_single, run_split)
from krea2_cachedit.adapters.families import registry
from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
from krea2_cachedit.adapters.sampling.observation import Call
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, DBCachePlan, plan_run
from krea2_cachedit.adapters.sampling.step_clock import StepClock
from devkit.krea2_synthetic import diffusers_transformer


def test_one_call_per_step_caches_the_masked_steps(transformer):
    run = run_single(transformer, FAST, Stream(COND, 1))
    record = record_of(run)
    assert record.cached_steps == FAST_MASK_CACHED
    assert (record.cfg_mode, record.has_separate_cfg) == ("none", False)
    assert record.block_evals == clean_block_evals(FAST_MASK_CACHED)
    assert not hasattr(transformer, "_is_cached"), "cache-dit must be disabled after the run"


@pytest.mark.parametrize("order", [(COND, UNCOND), (UNCOND, COND)], ids=["cond_first", "uncond_first"])
def test_split_calls_keep_cond_and_uncond_apart(transformer, order):
    run, streams = run_split(transformer, FAST, order)
    assert (record_of(run).cfg_mode, record_of(run).has_separate_cfg) == ("split", True)
    assert record_of(run).cached_steps == FAST_MASK_CACHED
    assert record_of(run).cache_contexts == 1
    for branch, seed, tokens in ((COND, 1, 5), (UNCOND, 2, 7)):
        alone = Stream(branch, seed, tokens=tokens)
        run_single(transformer, FAST, alone)
        for step, (mixed, reference) in enumerate(zip(streams[branch].outputs, alone.outputs)):
            torch.testing.assert_close(mixed, reference, rtol=0, atol=0, msg=f"branch {branch} step {step}")


def test_batched_cond_uncond_is_one_stream(transformer):
    uncond, cond = Stream(UNCOND, 2), Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=2) as run:
        run_batched(transformer, run, uncond, cond)
    assert (record_of(run).cfg_mode, record_of(run).has_separate_cfg) == ("batched", False)
    assert record_of(run).cached_steps == FAST_MASK_CACHED
    # Each half gets what its branch gets alone (up to batch-size rounding): one residual for the
    # batch holds each half's own residual.
    for half, seed in ((cond, 1), (uncond, 2)):
        alone = Stream(half.branch, seed)
        run_single(transformer, FAST, alone)
        assert_same_outputs(half.outputs, alone.outputs, f"branch {half.branch}", tolerance=1e-5)


@pytest.mark.parametrize("separate_cfg", [False, True], ids=["separate_cfg_off", "separate_cfg_on"])
def test_cache_dit_alone_keeps_split_calls_apart_only_with_separate_cfg(transformer, separate_cfg):
    """Control for the split test above: cache-dit alone, configured exactly as a run configures it
    for split calls except ``enable_separate_cfg``. Off, cond and uncond share one residual (and
    every call counts as a step); on, each stream gets exactly what it gets alone. So the split
    test's exact comparison tells a correct setting from a wrong one."""
    import cache_dit

    streams = {COND: Stream(COND, 1), UNCOND: Stream(UNCOND, 2)}  # one shape: a shared residual fits both
    target = registry.resolve(transformer)
    plan = plan_run(FAST, STEPS, target.num_blocks, NODE)
    adapter = cache_dit.BlockAdapter(transformer=transformer, blocks=target.block_modules[0],
                                     forward_pattern=cache_dit.ForwardPattern.Pattern_3, has_separate_cfg=False)
    cache_dit.enable_cache(adapter, cache_config=cache_dit.DBCacheConfig(**plan.db_cache_kwargs(0, separate_cfg)))
    try:
        for i in range(STEPS):
            for branch in (COND, UNCOND):
                s = streams[branch]
                s.advance(forward(transformer, s.x, s.context, SIGMAS[i]), float(SIGMAS[i]), float(SIGMAS[i + 1]))
    finally:
        cache_dit.disable_cache(transformer)
    for branch, seed in ((COND, 1), (UNCOND, 2)):
        alone = Stream(branch, seed)
        run_single(transformer, FAST, alone)
        exact = all(torch.equal(a, b) for a, b in zip(streams[branch].outputs, alone.outputs))
        assert exact == separate_cfg, f"branch {branch}"


def test_several_calls_per_step_count_as_one_step(transformer):
    """heun-like: a second evaluation at the next sigma; dpm-2s-like: one at an intermediate sigma."""
    stream = Stream(COND, 1)
    extra_calls = []
    with open_run(transformer, FAST, conds_per_step=1) as run:
        for i in range(STEPS):
            for sigma in (SIGMAS[i], (SIGMAS[i] + SIGMAS[i + 1]) / 2):
                with run.model_call(sigma, [COND], [stream.x.shape]) as served:
                    out = forward(transformer, stream.x, stream.context, sigma)
                if not served:
                    extra_calls.append((stream.x, sigma, out))
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    # Extra calls are computed in full, exactly like the model without the cache.
    for x, sigma, out in extra_calls:
        torch.testing.assert_close(out, forward(transformer, x, stream.context, sigma), rtol=0, atol=0)
    record = record_of(run)
    assert record.steps == STEPS and record.calls == 2 * STEPS
    assert record.extra_calls == STEPS
    assert record.cached_steps == FAST_MASK_CACHED
    assert record.cache_contexts == 1


def test_more_than_two_streams_per_step_do_not_crash_or_mix(transformer):
    """Area conds: cond, uncond and a further cond of another shape as separate calls."""
    streams = [Stream(COND, 1, tokens=5), Stream(UNCOND, 2, tokens=7), Stream(COND, 3, tokens=9)]
    with open_run(transformer, FAST, conds_per_step=2) as run:
        for i in range(STEPS):
            for s in streams:
                with run.model_call(SIGMAS[i], [s.branch], [s.x.shape, s.context.shape]):
                    out = forward(transformer, s.x, s.context, SIGMAS[i])
                s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    assert record_of(run).has_separate_cfg and record_of(run).cache_contexts == 1
    assert record_of(run).extra_calls == STEPS  # the third stream is always computed in full
    assert record_of(run).cached_steps == FAST_MASK_CACHED


def test_layout_change_mid_run_starts_a_fresh_cache(transformer):
    """Batched for four steps, then split (as under memory pressure): never serve a stale residual."""
    uncond, cond = Stream(UNCOND, 2), Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=2) as run:
        run_batched(transformer, run, uncond, cond, steps=range(4))
        for i in range(4, STEPS):
            for s in (uncond, cond):
                with run.model_call(SIGMAS[i], [s.branch], [s.x.shape, s.context.shape]):
                    out = forward(transformer, s.x, s.context, SIGMAS[i])
                s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    record = record_of(run)
    assert record.cache_contexts == 2
    assert record.step_states[4] == "computed", "the first split step has no residual of its own yet"
    assert record.cached_steps == [3, 5, 6]
    split_calls = [c for c in record.call_log if c[0] >= 4]
    assert [c[1] for c in split_calls[:2]] == [[UNCOND], [COND]]
    # Up to the change: exactly a batched run. From it on: each stream exactly what it gets alone
    # in a fresh cache with the rest of the mask (nothing of the batched residual survives).
    batched_uncond, batched_cond = Stream(UNCOND, 2), Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=2) as reference:
        run_batched(transformer, reference, batched_uncond, batched_cond)
    for got, batched in ((uncond, batched_uncond), (cond, batched_cond)):
        assert_same_outputs(got.outputs[:4], batched.outputs[:4], f"branch {got.branch} batched")
        assert_same_outputs(got.outputs[4:], run_alone_from(transformer, got, 4), f"branch {got.branch} split",
                            first_step=4)


def test_order_flip_mid_run_recomputes(transformer):
    streams = {COND: Stream(COND, 1, tokens=5), UNCOND: Stream(UNCOND, 2, tokens=7)}
    with open_run(transformer, FAST, conds_per_step=2) as run:
        for i in range(STEPS):
            for branch in ((COND, UNCOND) if i < 5 else (UNCOND, COND)):
                s = streams[branch]
                with run.model_call(SIGMAS[i], [branch], [s.x.shape, s.context.shape]):
                    out = forward(transformer, s.x, s.context, SIGMAS[i])
                s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    assert record_of(run).cache_contexts == 2
    assert record_of(run).step_states[5] == "computed"
    # Before the flip: exactly the unflipped split run. From it on: each stream exactly what it
    # gets alone in a fresh cache with the rest of the mask.
    _, unflipped = run_split(transformer, FAST, (COND, UNCOND))
    for branch, s in streams.items():
        assert_same_outputs(s.outputs[:5], unflipped[branch].outputs[:5], f"branch {branch} before the flip")
        assert_same_outputs(s.outputs[5:], run_alone_from(transformer, s, 5), f"branch {branch} after the flip",
                            first_step=5)


def test_each_run_starts_clean_and_leaves_the_module_uncached(transformer):
    first, second = Stream(COND, 1), Stream(COND, 1)
    run_single(transformer, FAST, first)
    run_single(transformer, FAST, second)
    assert_same_outputs(second.outputs, first.outputs, "second run")
    # After the runs the module samples exactly like a copy that never saw cache-dit.
    assert not hasattr(transformer, "_is_cached") and type(transformer.forward).__name__ == "method"
    untouched = diffusers_transformer(SHAPE, seed=3)
    assert_same_outputs(plain_outputs(transformer, Stream(COND, 1)), plain_outputs(untouched, Stream(COND, 1)),
                        "after the runs")


def test_a_module_left_cached_with_another_config_runs_with_the_runs_own_config():
    """Someone (another node, a crashed run) left cache-dit on the module with other settings:
    a run must not inherit them (refreshing the cache context alone would keep the TaylorSeer)."""
    import cache_dit

    transformer = diffusers_transformer(SHAPE, seed=3)
    clean = Stream(COND, 1)
    run_single(transformer, FAST, clean)
    adapter = cache_dit.BlockAdapter(transformer=transformer, blocks=transformer.transformer_blocks,
                                     forward_pattern=cache_dit.ForwardPattern.Pattern_3, has_separate_cfg=False)
    ultra = cache_dit.steps_mask(total_steps=STEPS, mask_policy="ultra")
    cache_dit.enable_cache(adapter, cache_config=cache_dit.DBCacheConfig(
        Fn_compute_blocks=2, Bn_compute_blocks=1, steps_computation_mask=ultra, steps_computation_policy="static",
        num_inference_steps=STEPS), calibrator_config=cache_dit.TaylorSeerCalibratorConfig(taylorseer_order=2))
    try:
        after = Stream(COND, 1)
        run = run_single(transformer, FAST, after)
    finally:
        cache_dit.disable_cache(transformer)
    assert record_of(run).cached_steps == FAST_MASK_CACHED
    assert record_of(run).block_evals == clean_block_evals(FAST_MASK_CACHED)
    assert_same_outputs(after.outputs, clean.outputs, "after a foreign cache-dit config")


def test_an_error_inside_the_run_still_disables_the_cache(transformer):
    run = open_run(transformer, FAST, conds_per_step=1)
    with pytest.raises(RuntimeError, match="boom"):
        fail_after_one_call(run, transformer)
    assert record_of(run).status == "error"
    assert not hasattr(transformer, "_is_cached")


def test_exact_when_caching_is_off(transformer):
    off = DBCacheSettings(residual_diff_threshold=0.0, steps_mask="none")
    cached = Stream(COND, 1)
    run = run_single(transformer, off, cached)
    assert record_of(run).cached_steps == []
    assert_same_outputs(cached.outputs, plain_outputs(transformer, Stream(COND, 1)), "caching off")


def test_threshold_caching_without_a_mask(transformer):
    loose = DBCacheSettings(residual_diff_threshold=1.5, max_warmup_steps=2,
                          max_continuous_cached_steps=2)
    run = run_single(transformer, loose, Stream(COND, 1))
    cached = record_of(run).cached_steps
    assert cached and min(cached) >= 2
    assert all(not {s, s + 1, s + 2} <= set(cached) for s in cached), "at most 2 cached steps in a row"


# cache-dit's "medium" mask for 8 steps is 1 1 1 1 0 1 0 1: steps 4 and 6 are served from the cache.
# Step 4 comes after 4 computed steps in a row, so every calibrator has what it needs to forecast
# there (TaylorSeer its derivative, FoCa its two anchors, DMD its 4 evenly spaced snapshots).
MEDIUM = DBCacheSettings(steps_mask="medium")
MEDIUM_MASK_CACHED = [4, 6]
CALIBRATED = {"taylorseer": dict(calibrator="taylorseer", taylorseer_order=2), "foca": dict(calibrator="foca"),
              "dmd": dict(calibrator="dmd", dmd_history=6)}


def differing_steps(a: Stream, b: Stream) -> list[int]:
    return [step for step, (x, y) in enumerate(zip(a.outputs, b.outputs)) if not torch.equal(x, y)]


def run_with_mask(transformer, settings: DBCacheSettings, mask: tuple[int, ...], stream: Stream) -> CacheRun:
    """One stream, one call per step, with a step mask of its own (cache-dit's masks are fixed)."""
    target = registry.resolve(transformer)
    plan = DBCachePlan(steps=STEPS, settings=settings, mask=mask)
    with CacheRun(target, plan, StepClock(SIGMAS), conds_per_step=1, node_name=NODE) as run:
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
                out = forward(transformer, stream.x, stream.context, SIGMAS[i])
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    return run


@pytest.mark.parametrize("name", list(CALIBRATED))
def test_each_calibrator_changes_what_the_same_cached_steps_serve(transformer, name):
    settings = DBCacheSettings(steps_mask="medium", **CALIBRATED[name])
    calibrated, plain = Stream(COND, 1), Stream(COND, 1)
    run = run_single(transformer, settings, calibrated)
    run_single(transformer, MEDIUM, plain)
    assert record_of(run).cached_steps == MEDIUM_MASK_CACHED, "the mask, not the calibrator, decides what is cached"
    assert record_of(run).as_dict()["calibrator"]["name"] == name
    assert all(torch.isfinite(o).all() for o in calibrated.outputs)
    # A calibrator only changes what a cached step serves: the runs agree up to the first cached
    # step, and part there.
    assert differing_steps(calibrated, plain)[:1] == [MEDIUM_MASK_CACHED[0]], differing_steps(calibrated, plain)


def test_taylorseer_order_reaches_cache_dit(transformer):
    first, second = Stream(COND, 1), Stream(COND, 1)
    run_single(transformer, DBCacheSettings(steps_mask="medium", calibrator="taylorseer", taylorseer_order=1), first)
    run_single(transformer, DBCacheSettings(steps_mask="medium", calibrator="taylorseer", taylorseer_order=2), second)
    differs = differing_steps(first, second)
    assert differs and differs[0] in MEDIUM_MASK_CACHED, differs


def test_dmd_history_reaches_cache_dit(transformer):
    """Five computed steps before the first cached one: a window of 4 and one of 6 fit different DMDs."""
    mask = (1, 1, 1, 1, 1, 0, 1, 1)
    short, long = Stream(COND, 1), Stream(COND, 1)
    run = run_with_mask(transformer, DBCacheSettings(calibrator="dmd", dmd_history=4), mask, short)
    run_with_mask(transformer, DBCacheSettings(calibrator="dmd", dmd_history=6), mask, long)
    assert record_of(run).cached_steps == [5]
    assert record_of(run).as_dict()["calibrator"] == {"name": "dmd", "dmd_history": 4, "forecast_steps": [5]}
    assert differing_steps(short, long) == [5, 6, 7]


def test_dmd_without_its_4_evenly_spaced_computed_steps_serves_its_fallback(transformer):
    """8 steps "fast" (1 1 1 0 1 0 0 1) never has 4 evenly spaced computed steps before a cached one:
    the record says DMD forecast no step, and indeed its window length changes nothing (its Taylor
    fallback does not read it), while it still serves something else than no calibrator."""
    outputs = []
    for history in (4, 6, 16):
        stream = Stream(COND, 1)
        run = run_single(transformer, DBCacheSettings(steps_mask="fast", calibrator="dmd", dmd_history=history), stream)
        assert record_of(run).as_dict()["calibrator"] == {"name": "dmd", "dmd_history": history, "forecast_steps": []}
        outputs.append(stream)
    plain = Stream(COND, 1)
    run_single(transformer, FAST, plain)
    assert differing_steps(outputs[0], outputs[1]) == differing_steps(outputs[0], outputs[2]) == []
    differs = differing_steps(outputs[0], plain)
    assert differs and differs[0] in FAST_MASK_CACHED, differs


@pytest.mark.parametrize("name", list(CALIBRATED))
def test_split_calls_keep_each_streams_calibrator_apart(transformer, name):
    """cache-dit keeps a second calibrator for the second CFG stream: each stream gets what it gets alone."""
    settings = DBCacheSettings(steps_mask="medium", **CALIBRATED[name])
    run, streams = run_split(transformer, settings, (COND, UNCOND))
    assert (record_of(run).has_separate_cfg, record_of(run).cached_steps) == (True, MEDIUM_MASK_CACHED)
    for branch, seed, tokens in ((COND, 1, 5), (UNCOND, 2, 7)):
        alone = Stream(branch, seed, tokens=tokens)
        run_single(transformer, settings, alone)
        assert_same_outputs(streams[branch].outputs, alone.outputs, f"{name}, branch {branch}")


def test_unsupported_module_is_named_in_the_error():
    with pytest.raises(registry.UnsupportedModelError, match=r"got a Linear model.*Supported: Krea-2"):
        registry.resolve(torch.nn.Linear(2, 2))


def test_duration_is_the_sampling_itself_not_what_comes_before_or_after(transformer):
    import time

    stream = Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=1) as run:
        time.sleep(0.4)     # ComfyUI's preparation before the first call (e.g. loading the model)
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [COND], [stream.x.shape]):
                out = forward(transformer, stream.x, stream.context, SIGMAS[i])
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
        time.sleep(0.4)
    calls = sum(call.timer.seconds() for call in run.calls)
    assert calls <= record_of(run).duration_s < calls + 0.2, (calls, record_of(run).duration_s)


class FailingTimer:
    """A call timer whose device is gone (as after a CUDA error: reading an event raises)."""

    def seconds(self, *args):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    seconds_until = stop = seconds


def test_the_runs_own_error_reaches_the_user_when_its_stats_cannot_be_made(transformer):
    stream = Stream(COND, 1)
    run = open_run(transformer, FAST, conds_per_step=1)
    with pytest.raises(ValueError, match="the sampler's own error"):
        with run:
            with run.model_call(SIGMAS[0], [COND], [stream.x.shape]):
                forward(transformer, stream.x, stream.context, SIGMAS[0])
            run.calls.insert(0, dataclasses.replace(run.calls[0], timer=FailingTimer()))
            raise ValueError("the sampler's own error")
    assert record_of(run) is None and not hasattr(transformer, "_is_cached")
    # Without an error of the run's own, a failure to make the stats is not hidden either.
    run = open_run(transformer, FAST, conds_per_step=1)
    with run:
        run.calls.append(Call(0, (COND,), None, True, False, 0, 0.0, FailingTimer(), "main"))
    assert not hasattr(transformer, "_is_cached")
    with pytest.raises(RuntimeError, match="CUDA error"):
        record_of(run)


def test_an_uncached_call_swaps_the_original_blocks_and_forward_in_and_back(transformer):
    stream = Stream(COND, 1)
    with open_run(transformer, FAST, conds_per_step=1) as run:
        cached_blocks, cached_forward = transformer.transformer_blocks, transformer.__dict__.get("forward")
        assert cached_forward is not None, "cache-dit patched the instance's forward"
        with run.uncached():
            assert list(transformer.transformer_blocks) == list(run.cache.lists[0].blocks)
            assert transformer.forward.__func__ is type(transformer).forward
            plain = forward(transformer, stream.x, stream.context, SIGMAS[0])
        assert transformer.transformer_blocks is cached_blocks
        assert transformer.__dict__.get("forward") is cached_forward
    untouched = diffusers_transformer(SHAPE, seed=3)
    torch.testing.assert_close(plain, forward(untouched, stream.x, stream.context, SIGMAS[0]), rtol=0, atol=0)


def test_a_call_sigma_stays_on_its_device_until_the_record(transformer):
    """A single-evaluation sampler's calls never read their sigma (a GPU read waits for the device)."""
    stream = Stream(COND, 1)
    target = registry.resolve(transformer)
    clock = StepClock(SIGMAS, sampler_reports=True, single_evaluation=True)
    with CacheRun(target, plan_run(FAST, STEPS, target.num_blocks, NODE), clock, conds_per_step=1, node_name=NODE) as run:
        for i in range(STEPS):
            # The value itself is unreadable here: a meta tensor has none.
            with run.model_call(torch.empty((1,), device="meta"), [COND], [stream.x.shape]):
                out = forward(transformer, stream.x, stream.context, SIGMAS[i])
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
            clock.step_reported(i)
            assert run.calls[-1].step == i and torch.is_tensor(run.calls[-1].sigma)
        # Readable again for the record at the end.
        run.calls[:] = [dataclasses.replace(call, sigma=sigma.reshape(1)) for call, sigma in zip(run.calls, SIGMAS)]
    assert record_of(run).cached_steps == FAST_MASK_CACHED
    assert [c[4] for c in record_of(run).call_log] == [round(float(s), 6) for s in SIGMAS[:STEPS]]


def test_the_fn_residual_of_a_two_stream_block_is_its_image_tokens():
    """Qwen-Image's blocks return (text, image), cache-dit's Pattern_1: the residual the run measures
    (and its diagnostics replay) is the first block's change of the *image* tokens, as cache-dit's own.
    Text and image have the same token count and width here, so measuring the text stream would not
    fail on shapes: it would give other values."""
    from diffusers import QwenImageTransformer2DModel

    torch.manual_seed(0)
    model = QwenImageTransformer2DModel(patch_size=2, in_channels=8, out_channels=2, num_layers=3,
                                        attention_head_dim=8, num_attention_heads=2, joint_attention_dim=16,
                                        axes_dims_rope=(2, 2, 4)).eval()
    comfy_family = next(f for f in registry.SUPPORTED if f.model == "Qwen-Image")
    # The same pattern on diffusers' class (the core tier has no ComfyUI), whose blocks take no options.
    family = dataclasses.replace(comfy_family, class_path=f"{QwenImageTransformer2DModel.__module__}."
                                 f"QwenImageTransformer2DModel", block_options_kwarg=None)
    image_changes = []  # the first block's change of the image tokens, seen by the test's own hook

    def on_first_block(module, args, kwargs, output):
        image_in = args[0] if args else kwargs["hidden_states"]
        image_changes.append((output[1] - image_in).reshape(-1).float())

    hook = model.transformer_blocks[0].register_forward_hook(on_first_block, with_kwargs=True)
    generator = torch.Generator().manual_seed(5)
    x, text = torch.randn(1, 16, 8, generator=generator), torch.randn(1, 16, 16, generator=generator)
    clock = StepClock(SIGMAS)
    target = registry.ResolvedTransformer(family, model)
    off = DBCacheSettings(residual_diff_threshold=0.0, steps_mask="none")
    try:
        with torch.no_grad(), CacheRun(target, plan_run(off, clock.steps, target.num_blocks, NODE), clock, 1,
                                       node_name=NODE) as run:
            for i in range(STEPS):
                with run.model_call(SIGMAS[i], [COND], [x.shape, text.shape]):
                    out = model(hidden_states=x, encoder_hidden_states=text,
                                encoder_hidden_states_mask=torch.ones(1, 16), timestep=SIGMAS[i:i + 1],
                                img_shapes=[(1, 4, 4)]).sample
                x = x + (SIGMAS[i + 1] - SIGMAS[i]) * out
    finally:
        hook.remove()
    [(trace, _)] = run.stream_traces()
    assert len(image_changes) == STEPS and sorted(trace.samples) == list(range(STEPS))
    for step, change in enumerate(image_changes):
        torch.testing.assert_close(trace.samples[step], change, rtol=0, atol=0, msg=f"step {step}")
