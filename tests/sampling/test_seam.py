"""The method seam (adapters/sampling/seam.py, adapters/methods.py): every method's plan and run are what the
shared run, the record and the nodes rely on, and each method's words reach the record from its plan.

Real methods on the small seeded Krea-2: each ``Method``'s plan is a ``RunPlan``, its run a complete
``SamplingRun`` that is a ``Run`` whose routes are ``CallRoute``s, on one device and on two; what a method's run
takes beyond every run's arguments it names in ``run_needs``, and only it is handed that; a record speaks in
its plan's words, whatever the method's name.
"""

from __future__ import annotations

import dataclasses
import inspect
import json

import pytest

from cache_runs import NODE, SIGMAS, STEPS, Stream, forward, record_of, seeded_transformer
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings
from krea2_cachedit.adapters.families import registry
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastPlan, ForecastSettings
from krea2_cachedit.adapters.methods import DBCACHE, FORECAST, Method
from krea2_cachedit.adapters.record.run_record import RunMeta, RunRecord, build
from krea2_cachedit.adapters.sampling.multi_device import DeviceModel, MultiDeviceRun
from krea2_cachedit.adapters.sampling.sampling_run import SamplingRun
from krea2_cachedit.adapters.sampling.seam import CallRoute, Run, RunPlan
from krea2_cachedit.adapters.sampling.step_clock import StepClock

FAST = DBCacheSettings(steps_mask="fast")
TURBO = ForecastSettings.from_preset("turbo_5_of_8")
METHODS = {"dbcache": (DBCACHE, FAST), "forecast": (FORECAST, TURBO)}
RECORD_FIELDS = {field.name for field in dataclasses.fields(RunRecord)}


@pytest.fixture(scope="module")
def transformer():
    return seeded_transformer()


def plan_of(method: Method, settings, target, steps: int = STEPS):
    return method.plan(settings, steps, target, NODE)


def single_calls(route, transformer, stream: Stream):
    """``stream`` alone through ``route``, one call per step."""
    for i in range(STEPS):
        with route.model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
            out = forward(transformer, stream.x, stream.context, SIGMAS[i])
        stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_methods_plan_is_a_run_plan_the_record_can_read(name, transformer):
    method, settings = METHODS[name]
    plan = plan_of(method, settings, registry.resolve(transformer))
    assert isinstance(plan, RunPlan), f"{name}'s plan lacks {[a for a in RunPlan.__annotations__ if not hasattr(plan, a)]}"
    # Its word names a state and the record's field of those steps; its summary is strict JSON named as the method.
    assert f"{plan.skipped_state}_steps" in RECORD_FIELDS and isinstance(plan.measures_residuals, bool)
    summary = plan.method_summary()
    assert summary["name"] == method.name and json.loads(json.dumps(summary, allow_nan=False)) == summary
    assert isinstance(plan.method_text({}), str) and plan.method_text({})


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_methods_run_is_a_complete_sampling_run(name):
    run_type = METHODS[name][0].run_type
    assert issubclass(run_type, SamplingRun) and not run_type.__abstractmethods__, run_type.__abstractmethods__


def test_a_run_that_leaves_out_a_part_of_the_seam_cannot_be_made(transformer):
    """The abstract base holds every method's run to the whole seam: one without ``_streams`` is refused when made,
    not when a record is first built from it."""
    class Partial(METHODS["forecast"][0].run_type):
        _streams = SamplingRun._streams

    target = registry.resolve(transformer)
    with pytest.raises(TypeError, match="_streams"):
        Partial(target, plan_of(FORECAST, TURBO, target), StepClock(SIGMAS), 1, node_name=NODE)


@pytest.mark.parametrize("name", sorted(METHODS))
def test_each_methods_run_is_a_run_whose_routes_are_call_routes(name, transformer):
    method, settings = METHODS[name]
    target = registry.resolve(transformer)
    clock = StepClock(SIGMAS)
    run = method.open_run(plan_of(method, settings, target, clock.steps), clock, target=target, host=transformer,
                          conds_per_step=1, node_name=NODE)
    assert isinstance(run, Run)
    with run:
        routes = run.routes()
        assert list(routes) == [id(transformer)] and all(isinstance(r, CallRoute) for r in routes.values())
        single_calls(routes[id(transformer)], transformer, Stream(0, 1))
    record = record_of(run)
    assert record.method["skipped_state"] == run.outcome().plan.skipped_state and record.skipped_steps


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_run_on_two_devices_is_a_run_whose_routes_are_call_routes(name):
    method, settings = METHODS[name]
    copies = [seeded_transformer(), seeded_transformer()]
    devices = [DeviceModel(label, registry.resolve(copy), copy, conds_per_step=1)
               for label, copy in zip(("cuda:0", "cuda:1"), copies)]
    clock = StepClock(SIGMAS)
    run = method.open_run(plan_of(method, settings, devices[0].target, clock.steps), clock, target=None, host=None,
                          conds_per_step=2, devices=devices, node_name=NODE)
    assert isinstance(run, MultiDeviceRun) and isinstance(run, Run)
    assert all(isinstance(route, CallRoute) for route in run.routes().values()) and len(run.routes()) == 2


def _own_arguments(run_type: type[SamplingRun]) -> set[str]:
    shared = set(inspect.signature(SamplingRun.__init__).parameters)
    return set(inspect.signature(run_type.__init__).parameters) - shared


@pytest.mark.parametrize("name", sorted(METHODS))
def test_a_method_needs_exactly_what_its_run_takes_beyond_every_runs_arguments(name):
    """Nothing is handed to a run that ignores it: a method's ``run_needs`` are its run's own arguments, no more
    (a need its run does not take would fail at open) and no fewer (an argument of its own never offered)."""
    method = METHODS[name][0]
    assert method.run_needs == _own_arguments(method.run_type), (method.run_needs, _own_arguments(method.run_type))


@pytest.mark.parametrize("name", sorted(METHODS))
def test_open_run_makes_only_what_the_method_needs(name, transformer):
    """The wrappers offer the block index teller to every method; only a method that needs it has it made and
    handed to its run (DBCache's blocks learn their place under cache-dit; a forecast runs no block it could tell)."""
    method, settings = METHODS[name]
    target = registry.resolve(transformer)
    clock = StepClock(SIGMAS)
    made, told = [], []

    def make_teller():
        made.append(True)
        return lambda index, total, kwargs, block_type: told.append(index)

    run = method.open_run(plan_of(method, settings, target, clock.steps), clock, target=target, host=transformer,
                          conds_per_step=1, node_name=NODE, offers={"tell_block_index": make_teller})
    with run:
        single_calls(run, transformer, Stream(0, 1))
    needs = "tell_block_index" in method.run_needs
    assert bool(made) == needs and bool(told) == needs, (name, made, told)


class RenamedForecastPlan(ForecastPlan):
    """A forecast plan under another method's name: its words are still its own."""

    def method_summary(self) -> dict:
        return {**super().method_summary(), "name": "renamed"}


def test_the_record_and_its_log_line_speak_in_the_plans_words_not_by_the_methods_name(transformer):
    target = registry.resolve(transformer)
    clock = StepClock(SIGMAS)
    plan = plan_of(FORECAST, TURBO, target, clock.steps)
    run = FORECAST.run_type(target, RenamedForecastPlan(plan.steps, plan.settings, plan.mask), clock, 1,
                            node_name=NODE)
    with run:
        single_calls(run, transformer, Stream(0, 1))
    record = build(run.outcome(), RunMeta(node_name=NODE))
    assert record.method["name"] == "renamed" and record.method["skipped_state"] == "forecast"
    assert record.method["measures_residuals"] is False
    assert record.forecast_steps and not record.cached_steps
    assert record.log_line("n").startswith(f"n [node ?]: forecast steps {len(record.forecast_steps)}/{STEPS}")
    assert "forecast linear (preset turbo_5_of_8)" in record.log_line("n")
    data = record.as_dict()
    assert "method_text" not in data and data["method"]["skipped_state"] == "forecast"


def test_a_resolved_transformer_reads_its_block_lists_once(transformer):
    """The registry is read for a run once, when its transformer is resolved: what the plan, the run and its
    contracts read later is that reading, even while a method stands in the module's lists (a forecast call
    empties them, cache-dit wraps them)."""
    target = registry.resolve(transformer)
    lists, modules = target.block_lists, target.block_modules
    attr = lists[0].attr
    held = getattr(transformer, attr)
    try:
        setattr(transformer, attr, type(held)())
        assert target.block_lists == lists and target.block_modules[0] is held and target.num_blocks == len(held)
    finally:
        setattr(transformer, attr, held)
