"""Whole-call forecasting on one transformer for exactly one sampling run.

On a step the schedule forecasts, the model runs without its blocks: its own code still embeds
the inputs, computes the time modulation (and the text path, reused within the run where the
family has one), and the final layer runs with this step's modulation on the feature forecast
from the stream's computed steps (``feature_forecast``). On a computed step the model runs as it
is and the feature its final layer gets joins the stream's history.

Streams are decided at run time as for DBCache (``call_router``): split cond and uncond keep a
history each, a batched call one for the batch, CFG 1 one; a layout change starts a context with
fresh histories, whose steps compute until they hold the points a forecast needs. Calls outside
the layout (a multi-call sampler's further evaluations of a step, a third cond) are computed in
full and kept out of the histories: their time is not a step of the schedule the forecast is
fitted on, and the first evaluation of each step is what the histories hold.

The parts: ``CallRouter`` (streams and contexts), ``FinalLayerSeam`` (the hook on the final
layer), ``SkippedBlocks`` (the block lists emptied for a forecast call), ``BlockProbe`` (the blocks
that ran), ``TextPathReuse`` and ``ForeignServeWatch``.
"""

from __future__ import annotations

import contextlib
import threading

import torch

from .block_probe import BlockProbe
from .call_router import CallLayout, CallRouter, StreamKey
from .feature_forecast import FeatureHistory
from .forecast_settings import ForecastPlan
from .foreign_serves import ForeignServeWatch
from .observation import Call, CallTimer, RunObservation, RunOutcome, exit_status
from .registry import ResolvedTransformer
from .step_clock import StepClock
from .stream_report import StreamReport
from .text_path import TextPathReuse

# Why a step was computed or forecast, as the record names it.
WARMUP, SCHEDULE, FINAL, HISTORY, FORECAST = "warmup", "schedule", "final_steps", "history", "forecast"


class FinalLayerSeam:
    """A pre-hook on the final layer: keeps the feature it gets, or hands it a forecast instead."""

    def __init__(self, module: torch.nn.Module):
        self.module = module
        self._hook = None
        self._forecast: torch.Tensor | None = None
        self.seen: torch.Tensor | None = None
        self.ran = 0

    def install(self) -> None:
        self._hook = self.module.register_forward_pre_hook(self._before)

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def begin(self, forecast: torch.Tensor | None) -> None:
        self._forecast, self.seen, self.ran = forecast, None, 0

    def end(self) -> tuple[int, torch.Tensor | None]:
        seen, ran = self.seen, self.ran
        self._forecast, self.seen = None, None
        return ran, seen

    @torch.compiler.disable
    def _before(self, module, args):
        self.ran += 1
        if self._forecast is None:
            self.seen = args[0]
            return None
        if tuple(args[0].shape) != tuple(self._forecast.shape):
            raise RuntimeError(f"The forecast feature has the shape {tuple(self._forecast.shape)}, the final layer "
                               f"got {tuple(args[0].shape)}: this call's stream changed shape within a cache context.")
        return (self._forecast, *args[1:])


class SkippedBlocks:
    """A module's block lists emptied for one call (its own loop then runs no block), put back after."""

    def __init__(self, module: torch.nn.Module, attrs: tuple[str, ...]):
        self.module, self.attrs = module, attrs
        self._empty = torch.nn.ModuleList()

    @contextlib.contextmanager
    def __call__(self):
        held = [getattr(self.module, attr) for attr in self.attrs]
        for attr in self.attrs:
            setattr(self.module, attr, self._empty)
        try:
            yield
        finally:
            for attr, blocks in zip(self.attrs, held):
                setattr(self.module, attr, blocks)


class ForecastStream:
    """A stream's account for the record: the steps it was served in, which were forecast, and why."""

    advisor_input = None   # the threshold decides nothing here

    def __init__(self, key: StreamKey, context: int, start_step: int, history: FeatureHistory):
        self.key, self.context, self.start_step, self.history = key, context, start_step, history
        self.reasons: dict[int, str] = {}

    def report(self) -> StreamReport:
        steps = list(self.reasons)
        return StreamReport(self.key.branches, self.context, self.start_step, steps,
                            [s for s in steps if self.reasons[s] == FORECAST], [self.reasons[s] for s in steps],
                            [None] * len(steps))


class ForecastRun:
    """Whole-call forecasting on ``target`` for one sampling run; use as a context manager.

    The same face as ``CacheRun``: ``model_call``, ``uncached``, ``warn_once``, ``outcome``.
    """

    parallel = None

    def __init__(self, target: ResolvedTransformer, plan: ForecastPlan, clock: StepClock, conds_per_step: int, *,
                 node_name: str, host=None, text_reuse_off: str | None = None, tell_block_index=None):
        self.target, self.plan, self.clock = target, plan, clock
        self.host = host if host is not None else target.module
        family = target.family
        lists, modules = target.block_lists, target.block_modules
        self.router = CallRouter(conds_per_step, self._start_context, node_name)
        self.probe = BlockProbe(lists, modules, fn_blocks=1, bn_blocks=0)   # counts only
        self.seam = FinalLayerSeam(getattr(target.module, family.final_layer))
        self.skipped = SkippedBlocks(target.module, tuple(entry.attr for entry in lists))
        self.foreign_serves = ForeignServeWatch(evidence="the model's final layer")
        text_path = family.text_path
        self.text_path = TextPathReuse(target.module, text_path, off=text_reuse_off) if text_path else None
        self.streams: dict[tuple[int, StreamKey], ForecastStream] = {}
        self.calls: list[Call] = []
        self.warnings: list[str] = []
        self.observation: RunObservation | None = None

    @property
    def num_blocks(self) -> int:
        return self.probe.num_blocks

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> "ForecastRun":
        self.probe.install([])
        self.seam.install()
        if self.text_path is not None:
            self.text_path.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self.text_path is not None:
                self.text_path.__exit__(exc_type, exc, tb)
            self.probe.remove()
            self.seam.remove()
        finally:
            layout = self.router.first_layout
            self.observation = RunObservation(
                status=exit_status(exc_type), num_blocks=self.num_blocks, module_id=id(self.host),
                calls=tuple(self.calls), cfg_mode=layout.mode if layout else None,
                has_separate_cfg=bool(layout and layout.separate_cfg), cache_contexts=self.router.contexts,
                streams=tuple(self.streams.values()), warnings=tuple(self.warnings),
                text_path=self.text_path.counts() if self.text_path is not None else None)
            for stream in self.streams.values():
                stream.history = None   # the features hold device memory
        return False

    @property
    def observations(self) -> list[RunObservation]:
        return [self.observation] if self.observation is not None else []

    def outcome(self) -> RunOutcome:
        return RunOutcome(self.plan, self.clock, self.target.family.name, tuple(self.observations), self.parallel)

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None, text=None):
        key = StreamKey(tuple(int(b) for b in branches), tuple(tuple(s) for s in shapes))
        if torch.is_tensor(sigma):
            sigma = sigma.detach()
        step = self.clock.step_of(sigma, key)
        served = not self.foreign_serves.seen and self.router.route(step, key)
        stream = self._stream(key) if served else None
        reason = self._reason(step, stream) if served else None
        forecast = stream.history.forecast(step) if reason == FORECAST else None
        self.probe.begin(False, None, step)
        self.seam.begin(forecast)
        timer = CallTimer(device)
        text_call = self.text_path.call(*text) if self.text_path is not None and text else contextlib.nullcontext()
        try:
            with text_call, (self.skipped() if forecast is not None else contextlib.nullcontext()):
                yield served
        finally:
            counted = self.probe.end()
            ran, seen = self.seam.end()
        timer.stop()
        if stream is not None:
            stream.reasons[step] = reason
            if forecast is None and seen is not None:
                stream.history.add(step, seen)
        if self.foreign_serves.observe(step, served, ran) and self.foreign_serves.calls == 1:
            self.warnings.append(self.foreign_serves.warning())
        self.calls.append(Call(step, key.branches, key, served, forecast is not None, sum(counted), sigma, timer,
                               threading.current_thread().name))

    def _stream(self, key: StreamKey) -> ForecastStream:
        context = self.router.contexts
        if (context, key) not in self.streams:
            history = FeatureHistory(self.plan.settings.forecast, self.plan.steps)
            self.streams[(context, key)] = ForecastStream(key, context - 1, self.router.context_starts[-1], history)
        return self.streams[(context, key)]

    def _reason(self, step: int, stream: ForecastStream) -> str:
        schedule = self.plan.settings.schedule
        if step < schedule.warmup_steps:
            return WARMUP
        if step >= self.plan.steps - schedule.final_computed_steps:
            return FINAL
        if self.plan.computes(step):
            return SCHEDULE
        if not stream.history.ready:
            return HISTORY   # a fresh context's history has too few computed steps yet
        return FORECAST

    def warn_once(self, warning: str):
        if warning not in self.warnings:
            self.warnings.append(warning)

    def uncached(self):
        """A call computed in full: the model runs as it is (nothing of the run is on its path but hooks)."""
        return contextlib.nullcontext()

    def _start_context(self, step: int, layout: CallLayout):
        """A fresh context: its streams' histories start empty (``_stream``)."""
