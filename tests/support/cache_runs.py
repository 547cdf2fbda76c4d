"""Drive a run (DBCache's ``CacheRun`` or the Forecast node's ``ForecastRun``) as ComfyUI's samplers do, on a
small seeded diffusers Krea-2 (no ComfyUI).

Shared by the adapter tests of both methods: a simulated sampler stream, one driver per call pattern (one call
per step, cond and uncond split, batched, on two devices), and ``record_of``, the record a run's observation
makes, built by the same ``run_record.build`` the node uses.
"""

from __future__ import annotations

import threading

import torch

from krea2_cachedit.adapters.families import registry
from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
from krea2_cachedit.adapters.dbcache.residual_trace import StreamTrace
from krea2_cachedit.adapters.record.run_record import RunMeta, RunRecord, record_or_none
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, DBCachePlan, plan_run
from krea2_cachedit.adapters.forecast.forecast_run import ForecastRun
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run
from krea2_cachedit.adapters.sampling.multi_device import DeviceModel, MultiDeviceRun
from krea2_cachedit.adapters.sampling.step_clock import StepClock
from helpers import FAST_8_CACHED
from devkit.krea2_synthetic import Krea2Shape, diffusers_transformer

SHAPE = Krea2Shape(layers=6)
STEPS = 8
SIGMAS = torch.linspace(1.0, 0.0, STEPS + 1)
FAST_MASK_CACHED = FAST_8_CACHED   # what ``FAST`` caches of STEPS steps
COND, UNCOND = 0, 1
NODE = "Krea-2 Cache-DiT"   # the node these runs speak for in their messages


def seeded_transformer():
    torch.manual_seed(0)
    return diffusers_transformer(SHAPE, seed=3)


def make_inputs(seed: int, batch: int = 1, tokens: int = 5):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, SHAPE.channels * 4, generator=g)
    context = torch.randn(batch, tokens, SHAPE.txtlayers, SHAPE.txtdim, generator=g)
    return x, context


def forward(transformer, x, context, sigma):
    ids = torch.zeros(context.shape[1] + x.shape[1], 3)
    ids[context.shape[1]:, 1] = torch.arange(x.shape[1]) // 4
    ids[context.shape[1]:, 2] = torch.arange(x.shape[1]) % 4
    timestep = torch.full((x.shape[0],), float(sigma))
    return transformer(x, context, timestep, ids).sample


class Stream:
    """One branch (cond or uncond) of a simulated sampler, with its own latent trajectory."""

    def __init__(self, branch: int, seed: int, tokens: int = 5):
        self.branch = branch
        self.x, self.context = make_inputs(seed, tokens=tokens)
        self.inputs: list[torch.Tensor] = []   # the latent each step was called with
        self.outputs: list[torch.Tensor] = []

    def advance(self, out, sigma, next_sigma):
        self.inputs.append(self.x)
        self.outputs.append(out)
        self.x = self.x + (next_sigma - sigma) * out  # an Euler step, so inputs change every step

    def resumed_at(self, step: int) -> "Stream":
        """This stream as it stood before ``step``, with no outputs yet."""
        copy = Stream.__new__(Stream)
        copy.branch, copy.x, copy.context, copy.inputs, copy.outputs = \
            self.branch, self.inputs[step], self.context, [], []
        return copy


def open_run(transformer, settings: DBCacheSettings | ForecastSettings, conds_per_step: int) -> CacheRun | ForecastRun:
    """A DBCache run (``DBCacheSettings``) or a Forecast run (``ForecastSettings``) of ``transformer`` over SIGMAS."""
    target = registry.resolve(transformer)
    clock = StepClock(SIGMAS)
    if isinstance(settings, ForecastSettings):
        return ForecastRun(target, plan_forecast_run(settings, clock.steps, clock.sigmas), clock, conds_per_step,
                           node_name=NODE)
    return CacheRun(target, plan_run(settings, clock.steps, target.num_blocks, NODE), clock, conds_per_step,
                    node_name=NODE)


def fail_after_one_call(run: CacheRun, transformer) -> None:
    """Sample ``run`` for one model call, then fail: ``RuntimeError("boom")`` raised inside it, and out of here."""
    stream = Stream(COND, 1)
    with run:
        with run.model_call(SIGMAS[0], [COND], [stream.x.shape]):
            forward(transformer, stream.x, stream.context, SIGMAS[0])
        raise RuntimeError("boom")


def record_of(run: CacheRun, cfg: float = 1.0) -> RunRecord | None:
    """The finished run's record, as the node builds it (None where the run's own error must win)."""
    return record_or_none(run.outcome(), RunMeta(node_name=NODE, cfg=cfg))


def single_calls(run, transformer, stream: Stream, steps=range(STEPS)):
    """``stream`` alone in the open ``run``, one call per step of ``steps``."""
    for i in steps:
        with run.model_call(SIGMAS[i], [stream.branch], [stream.x.shape]):
            out = forward(transformer, stream.x, stream.context, SIGMAS[i])
        stream.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))


def split_calls(run, transformer, streams: dict[int, Stream], order, steps=range(STEPS)):
    """cond and uncond as separate calls in the open ``run``, in ``order`` each step of ``steps``."""
    for i in steps:
        for branch in order:
            s = streams[branch]
            with run.model_call(SIGMAS[i], [branch], [s.x.shape, s.context.shape]):
                out = forward(transformer, s.x, s.context, SIGMAS[i])
            s.advance(out, float(SIGMAS[i]), float(SIGMAS[i + 1]))


def run_batched(transformer, run, uncond: Stream, cond: Stream, steps=range(STEPS)):
    """uncond and cond batched into one call per step of ``steps`` in the open ``run`` (ComfyUI's order: uncond
    first)."""
    for i in steps:
        x, context = torch.cat([uncond.x, cond.x]), torch.cat([uncond.context, cond.context])
        with run.model_call(SIGMAS[i], [UNCOND, COND], [x.shape, context.shape]):
            out = forward(transformer, x, context, SIGMAS[i])
        uncond.advance(out[:1], float(SIGMAS[i]), float(SIGMAS[i + 1]))
        cond.advance(out[1:], float(SIGMAS[i]), float(SIGMAS[i + 1]))


def run_split(transformer, settings, order):
    """A run of ``settings`` (either method's) with cond and uncond as separate calls, in ``order`` each step."""
    streams = {COND: Stream(COND, 1, tokens=5), UNCOND: Stream(UNCOND, 2, tokens=7)}
    with open_run(transformer, settings, conds_per_step=2) as run:
        split_calls(run, transformer, streams, order)
    return run, streams


def run_single(transformer, settings, stream: Stream):
    """A run of ``settings`` (either method's) on one stream alone, one call per step: the reference for what that
    stream should get."""
    with open_run(transformer, settings, conds_per_step=1) as run:
        single_calls(run, transformer, stream)
    return run


def run_on_two_devices() -> tuple[MultiDeviceRun, StepClock]:
    """A DBCache run of FAST on two copies: cond on "cuda:0", uncond on "cuda:1", every
    step on two threads at once, as ComfyUI's multi-GPU pool runs them (the labels stand for the GPUs)."""
    copies = [seeded_transformer(), seeded_transformer()]
    devices = [DeviceModel(label, registry.resolve(copy), copy, conds_per_step=1)
               for label, copy in zip(("cuda:0", "cuda:1"), copies)]
    clock = StepClock(SIGMAS)
    run = MultiDeviceRun(devices, plan_run(FAST, clock.steps, devices[0].target.num_blocks, NODE), clock,
                         run_type=CacheRun, node_name=NODE)
    streams = [Stream(COND, 1, tokens=5), Stream(UNCOND, 2, tokens=7)]
    with run:
        device_runs = run.routes()
        for i in range(STEPS):
            def call(copy, stream):
                single_calls(device_runs[id(copy)], copy, stream, steps=(i,))

            threads = [threading.Thread(target=call, args=pair, name=f"device-{n}")
                       for n, pair in enumerate(zip(copies, streams))]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join(timeout=60)
    return run, clock


def run_alone_from(transformer, stream: Stream, start: int) -> list[torch.Tensor]:
    """What ``stream`` gets alone from step ``start`` on, in a fresh FAST cache that holds the rest
    of the run's mask (its first step computed: a fresh cache has no residual to serve)."""
    rest = (1, *plan_run(FAST, STEPS, SHAPE.layers, NODE).mask[start + 1:])
    clock = StepClock(SIGMAS[start:])
    resumed = stream.resumed_at(start)
    plan = DBCachePlan(steps=clock.steps, settings=FAST, mask=rest)
    with CacheRun(registry.resolve(transformer), plan, clock, conds_per_step=1, node_name=NODE) as run:
        single_calls(run, transformer, resumed, steps=range(start, STEPS))
    return resumed.outputs


def plain_outputs(transformer, stream: Stream) -> list[torch.Tensor]:
    """``stream`` sampled by ``transformer`` without any cache run."""
    for i in range(STEPS):
        stream.advance(forward(transformer, stream.x, stream.context, SIGMAS[i]), float(SIGMAS[i]), float(SIGMAS[i + 1]))
    return stream.outputs


def clean_block_evals(cached_steps: list[int]) -> int:
    """Block evaluations of a one-stream run with Fn=1, Bn=0: a cached step runs only the first block."""
    return (STEPS - len(cached_steps)) * SHAPE.layers + len(cached_steps) * 1


def assert_same_outputs(got: list[torch.Tensor], expected: list[torch.Tensor], what: str, first_step: int = 0,
                        tolerance: float = 0.0):
    assert len(got) == len(expected), what
    for step, (a, b) in enumerate(zip(got, expected), start=first_step):
        torch.testing.assert_close(a, b, rtol=tolerance, atol=tolerance, msg=f"{what}, step {step}")


FAST = DBCacheSettings(steps_mask="fast")
OFF = DBCacheSettings(residual_diff_threshold=0.0)
TURBO = ForecastSettings.from_preset("turbo_5_of_8")   # 8 steps: 0 1 3 5 7 computed, 2 4 6 forecast
TURBO_FORECAST = [2, 4, 6]




def held_residuals(trace: StreamTrace) -> int:
    """Full-size Fn residuals a trace holds now: between calls and through the middle blocks, one
    (its reference, and the current call's until the call is known to compute or be cached)."""
    return sum(held is not None for held in (trace._reference, trace._pending))


def cache_dit_change(reference: torch.Tensor, current: torch.Tensor) -> torch.Tensor:
    """cache-dit's residual change (``CachedContextManager.similarity``), written out here as the
    tests' own oracle: ``mean|ref - cur| / mean|ref|`` in the residual's dtype, as a 0-d tensor."""
    return (reference - current).abs().mean() / reference.abs().mean()
