"""Whole-call forecasting against a small seeded diffusers Krea-2, in every call pattern (no ComfyUI).

A stream's forecast must come from that stream's own computed steps: with cond and uncond split,
each gets exactly what it gets alone; a layout change starts fresh histories. A run that forecasts
nothing is bit-identical to the plain model, and forecast calls run no block.
"""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

from cache_runs import (COND, NODE, SIGMAS, STEPS, TURBO, TURBO_FORECAST, UNCOND, Stream, assert_same_outputs, forward,
                        open_run, plain_outputs, record_of, run_batched, run_single, run_split)
from krea2_cachedit.adapters.families import registry
from krea2_cachedit.adapters.forecast.feature_forecast import Forecaster
from krea2_cachedit.adapters.forecast.final_layer_contract import FeatureArgument
from krea2_cachedit.adapters.forecast.final_layer_output import FinalOutputContract
from krea2_cachedit.adapters.forecast.forecast_run import FinalLayerSeam
from krea2_cachedit.adapters.forecast.forecast_schedule import ForecastSchedule
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run
from krea2_cachedit.adapters.sampling.step_clock import StepClock

NOTHING = ForecastSettings("custom", Forecaster("linear"), ForecastSchedule(0, 1.0, 0.0, 0))   # every step
SPECTRUM = ForecastSettings("custom", Forecaster("spectrum", 4, 0.1, 0.5), ForecastSchedule(3, 2.0, 0.0, 1))
# turbo_5_of_8's schedule, forecasting the final layer's output 0.7 of the way.
OUTPUT = ForecastSettings("custom", Forecaster("linear", extrapolation=0.7, target="output"), TURBO.schedule)


def test_a_run_that_forecasts_nothing_is_the_plain_model(transformer):
    plain = plain_outputs(transformer, Stream(COND, 1))
    forecast = Stream(COND, 1)
    record = record_of(run_single(transformer, NOTHING, forecast))
    assert record.forecast_steps == [] and record.block_evals == STEPS * len(transformer.transformer_blocks)
    assert_same_outputs(forecast.outputs, plain, "nothing forecast")


def test_the_schedule_forecasts_its_steps_and_they_run_no_block(transformer):
    stream = Stream(COND, 1)
    run = run_single(transformer, TURBO, stream)
    record = record_of(run)
    blocks = len(transformer.transformer_blocks)
    assert record.forecast_steps == TURBO_FORECAST and record.mask == [1, 1, 0, 1, 0, 1, 0, 1]
    assert record.cached_steps == [] and record.skipped_steps == TURBO_FORECAST, "nothing here is DBCache's"
    assert record.step_states == ["forecast" if step in TURBO_FORECAST else "computed" for step in range(STEPS)]
    assert record.log_line("node").startswith(f"node [node ?]: forecast steps 3/{STEPS}, ")
    assert "forecast linear (preset turbo_5_of_8)" in record.log_line("node")
    assert record.calibrator is None and [s["forecast_steps"] for s in record.as_dict()["streams"]] == [TURBO_FORECAST]
    assert [c[3] for c in record.call_log] == [0 if step in TURBO_FORECAST else blocks for step in range(STEPS)]
    assert record.step_reasons == ["warmup", "warmup", "forecast", "schedule", "forecast", "schedule", "forecast",
                                   "final_steps"]
    assert record.method["name"] == "forecast" and record.method["preset"] == "turbo_5_of_8"
    assert record.method["computed_steps"] == [0, 1, 3, 5, 7]
    assert record.residual_diffs == [None] * STEPS and record.threshold_suggestions == []
    plain = plain_outputs(transformer, Stream(COND, 1))
    assert_same_outputs(stream.outputs[:2], plain[:2], "the warmup is computed as without the node")
    assert not torch.equal(stream.outputs[2], plain[2]), "step 2 is a forecast"
    assert all(torch.isfinite(out).all() for out in stream.outputs)


def test_a_forecast_is_the_final_layer_on_the_extrapolated_feature(transformer):
    """Step 2's output is the final layer, with step 2's modulation, on 2 * feature(1) - feature(0)."""
    features = []
    # A forward hook sees the arguments the layer ran with (after the run's own pre-hook put the forecast in).
    hook = transformer.final_layer.register_forward_hook(lambda module, args, out: features.append(args[0].clone()))
    try:
        stream = Stream(COND, 1)
        run_single(transformer, TURBO, stream)
    finally:
        hook.remove()
    torch.testing.assert_close(features[2], 2 * features[1] - features[0], rtol=1e-6, atol=1e-6)


def test_an_output_forecast_is_the_extrapolated_model_output_and_runs_no_block(transformer):
    """Target ``output``: a forecast step's model output is the computed outputs' line, 0.7 of the way (what
    follows the final layer is affine, and the line's weights sum to 1), and no block runs for it."""
    stream = Stream(COND, 1)
    record = record_of(run_single(transformer, OUTPUT, stream))
    blocks = len(transformer.transformer_blocks)
    assert record.forecast_steps == TURBO_FORECAST and record.method["target"] == "output"
    assert "forecast linear (extrapolation 0.7, target output) (preset custom)" in record.log_line("node")
    assert [c[3] for c in record.call_log] == [0 if step in TURBO_FORECAST else blocks for step in range(STEPS)]
    out = stream.outputs
    for step, (before, last) in zip(TURBO_FORECAST, [(0, 1), (1, 3), (3, 5)]):
        k = (step - last) / (last - before)
        torch.testing.assert_close(out[step], out[last] + 0.7 * k * (out[last] - out[before]), rtol=1e-5, atol=1e-5,
                                   msg=f"step {step}")
    feature = Stream(COND, 1)
    run_single(transformer, ForecastSettings("custom", Forecaster("linear", extrapolation=0.7), TURBO.schedule),
                  feature)
    assert not torch.allclose(feature.outputs[2], out[2], atol=1e-4), "forecasting the feature is another forecast"


def test_an_output_forecast_steps_aside_where_the_final_layer_returns_more_than_one_tensor(transformer):
    """The output's contract: one tensor from the final layer, checked on the first computed call; a tuple (a
    loop that unpacks an extra value) is named, with the model and the final layer."""
    contract = FinalOutputContract(registry.resolve(transformer))
    out = torch.zeros(1, 4, 8)
    contract.watch()
    assert contract.verdict(out) is None and not contract.watching
    contract.watch()
    warning = contract.verdict((out, out))
    assert warning is not None and "one tensor as its output" in warning and "a tuple" in warning
    assert "final_layer" in warning or "norm_out" in warning
    assert contract.signature_mismatch() is None, "nothing of the layer's parameters is read"


@pytest.mark.parametrize("order", [(COND, UNCOND), (UNCOND, COND)], ids=["cond_first", "uncond_first"])
@pytest.mark.parametrize("settings", [TURBO, SPECTRUM, OUTPUT], ids=["linear", "spectrum", "linear_output"])
def test_split_calls_forecast_each_stream_from_its_own_history(transformer, order, settings):
    run, streams = run_split(transformer, settings, order)
    record = record_of(run)
    assert (record.cfg_mode, record.has_separate_cfg, record.cache_contexts) == ("split", True, 1)
    assert len(record.streams) == 2
    for branch, seed, tokens in ((COND, 1, 5), (UNCOND, 2, 7)):
        alone = Stream(branch, seed, tokens=tokens)
        run_single(transformer, settings, alone)
        assert_same_outputs(streams[branch].outputs, alone.outputs, f"branch {branch} split vs alone")


def test_batched_cond_and_uncond_share_one_history_for_the_batch(transformer):
    with open_run(transformer, TURBO, conds_per_step=2) as run:
        run_batched(transformer, run, Stream(UNCOND, 2), Stream(COND, 1), range(STEPS))
    record = record_of(run)
    assert (record.cfg_mode, record.has_separate_cfg) == ("batched", False)
    assert len(record.streams) == 1 and record.streams[0]["branches"] == [UNCOND, COND]
    assert record.forecast_steps == TURBO_FORECAST


def test_a_layout_change_starts_fresh_histories(transformer):
    """Batched for four steps, then split (as under memory pressure): the split streams' histories start
    empty, so their steps compute until each holds two points, whatever the schedule says."""
    uncond, cond = Stream(UNCOND, 2), Stream(COND, 1)
    with open_run(transformer, TURBO, conds_per_step=2) as run:
        run_batched(transformer, run, uncond, cond, range(4))
        for i in range(4, STEPS):
            for s in (uncond, cond):
                with run.model_call(SIGMAS[i], [s.branch], [s.x.shape, s.context.shape]):
                    out = forward(transformer, s.x, s.context, SIGMAS[i])
                s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    record = record_of(run)
    assert record.cache_contexts == 2
    later = [stream for stream in record.streams if stream["context"] == 1]
    assert [stream["branches"] for stream in later] == [[UNCOND], [COND]]
    for stream in later:   # steps 4 and 5 fill the fresh history; step 6 is forecast from it
        assert stream["steps"] == [4, 5, 6, 7]
        assert stream["step_reasons"] == ["history", "schedule", "forecast", "final_steps"]
    assert record.forecast_steps == [2, 6]


def test_a_further_call_in_a_step_is_computed_and_kept_out_of_the_history(transformer):
    """A multi-call sampler's further evaluation of a step (dpm-2s-like: at an intermediate sigma)."""
    stream = Stream(COND, 1)
    with open_run(transformer, TURBO, conds_per_step=1) as run:
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [COND], [stream.x.shape]):
                out = forward(transformer, stream.x, stream.context, SIGMAS[i])
            middle = (SIGMAS[i] + SIGMAS[i + 1]) / 2
            with run.model_call(middle, [COND], [stream.x.shape]) as served:
                assert not served
                forward(transformer, stream.x, stream.context, middle)
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
    record = record_of(run)
    blocks = len(transformer.transformer_blocks)
    extra = [c for c in record.call_log if not c[2]]
    assert len(extra) == STEPS and all(c[3] == blocks for c in extra), "further calls are computed in full"
    assert record.forecast_steps == TURBO_FORECAST
    alone = Stream(COND, 1)
    run_single(transformer, TURBO, alone)
    assert_same_outputs(stream.outputs, alone.outputs, "the further calls changed no history")


def test_a_model_that_ran_is_freed_and_left_as_it_was():
    torch.manual_seed(0)
    from cache_runs import seeded_transformer

    transformer = seeded_transformer()
    before = {name: set(module.__dict__) for name, module in transformer.named_modules()}
    refs = [weakref.ref(m) for m in (transformer, transformer.final_layer, transformer.transformer_blocks[0],
                                     transformer.text_fusion)]
    run = run_single(transformer, TURBO, Stream(COND, 1))
    assert {name: set(module.__dict__) for name, module in transformer.named_modules()} == before
    assert all(stream.history is None for stream in run.streams.values()), "the features are dropped at the end"
    del transformer, run
    gc.collect()
    assert all(ref() is None for ref in refs)


def test_on_two_devices_each_forecasts_its_own_conds_alike():
    """cond on one copy, uncond on the other, each step on two threads at once (ComfyUI's multi-GPU
    split): every device forecasts from its own history, and each step's decision is one for both (they agree)."""
    import threading

    from cache_runs import seeded_transformer
    from krea2_cachedit.adapters.methods import FORECAST
    from krea2_cachedit.adapters.sampling.multi_device import DeviceModel, MultiDeviceRun

    copies = [seeded_transformer(), seeded_transformer()]
    devices = [DeviceModel(label, registry.resolve(copy), copy, conds_per_step=1)
               for label, copy in zip(("cuda:0", "cuda:1"), copies)]
    clock = StepClock(SIGMAS)
    run = FORECAST.open_run(plan_forecast_run(TURBO, clock.steps), clock, target=None, host=None,
                                       conds_per_step=2, devices=devices, node_name=NODE)
    assert isinstance(run, MultiDeviceRun)
    streams = [Stream(COND, 1, tokens=5), Stream(UNCOND, 2, tokens=7)]
    with run:
        device_runs = run.routes()
        for i in range(STEPS):
            def call(copy, stream):
                with device_runs[id(copy)].model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
                    out = forward(copy, stream.x, stream.context, SIGMAS[i])
                stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))

            threads = [threading.Thread(target=call, args=pair) for pair in zip(copies, streams)]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
    record = record_of(run)
    assert record.device_count == 2 and record.forecast_steps == TURBO_FORECAST
    assert [d["forecast_steps"] for d in record.devices] == [TURBO_FORECAST, TURBO_FORECAST]
    for stream, (seed, tokens) in zip(streams, ((1, 5), (2, 7))):
        alone = Stream(stream.branch, seed, tokens=tokens)
        run_single(copies[0], TURBO, alone)
        assert_same_outputs(stream.outputs, alone.outputs, f"branch {stream.branch} on its device vs alone")


def test_a_shared_decision_that_says_compute_computes_the_step_and_feeds_the_history(transformer):
    """On several devices each decided call asks the devices' vote (``share_decisions``): it is asked with the
    stream's own decision, and a "no" on a step the schedule forecasts computes that step in full (reason
    ``other_device``), whose feature then joins the history like any computed step's."""
    asked: list[tuple[int, bool]] = []
    stream = Stream(COND, 1)
    with open_run(transformer, TURBO, conds_per_step=1) as run:
        run.share_decisions(lambda own, ballot: asked.append((len(asked), own)) or (own and len(asked) - 1 != 4))
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
                out = forward(transformer, stream.x, stream.context, SIGMAS[i])
            stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))
        run.stop_sharing()
    record = record_of(run)
    assert asked == [(step, step in TURBO_FORECAST) for step in range(STEPS)], "every decided call votes, own first"
    assert record.forecast_steps == [2, 6] and record.step_reasons[4] == "other_device"
    blocks = len(transformer.transformer_blocks)
    assert [c[3] for c in record.call_log] == [0 if step in (2, 6) else blocks for step in range(STEPS)]
    # The run without the vote forecasts step 4 from steps 1 and 3; here it is computed.
    alone = Stream(COND, 1)
    run_single(transformer, TURBO, alone)
    assert_same_outputs(stream.outputs[:4], alone.outputs[:4], "the steps before the overruled one")
    assert not torch.equal(stream.outputs[4], alone.outputs[4]), "step 4 computed, not forecast"


class _FinalLayer(torch.nn.Module):
    def forward(self, x, scale):
        return x * scale


class _ReorderedFinalLayer(torch.nn.Module):
    """The same layer after an upstream change that put the time modulation first."""

    def forward(self, scale, x):
        return x * scale


@pytest.mark.parametrize("layer_type", [_FinalLayer, _ReorderedFinalLayer])
def test_the_final_layer_seam_finds_the_feature_by_the_registrys_name(layer_type):
    """The loop may hand the final layer its feature by position or by keyword, and its parameters may be reordered
    (ComfyUI's loops differ and change): the seam finds the registry's parameter by name, keeps it and puts the
    forecast in its place either way; a call that names no feature is refused by name, never forecast into
    another argument."""
    layer = layer_type()
    seam = FinalLayerSeam(layer, FeatureArgument(layer, "x"))
    seam.install()
    try:
        x, forecast = torch.ones(2, 3), torch.full((2, 3), 5.0)
        positional = (lambda: layer(x, 2.0)) if layer_type is _FinalLayer else (lambda: layer(2.0, x))
        for call in (positional, lambda: layer(x=x, scale=2.0), lambda: layer(scale=2.0, x=x)):
            seam.begin(None)
            out = call()
            ran, seen = seam.end()
            assert ran == 1 and seen is x and torch.equal(out, x * 2)
            seam.begin(forecast)
            out = call()
            seam.end()
            assert torch.equal(out, forecast * 2), "the forecast replaced the feature where it came"
        seam.begin(forecast)
        with pytest.raises(RuntimeError, match=rf"{layer_type.__name__}, the model's final layer, was called without "
                                               r"its feature \('x'\) by position or by name.*Update the pack"):
            layer(feature=x, scale=2.0)
        seam.end()
    finally:
        seam.remove()
