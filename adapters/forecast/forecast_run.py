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

The parts: ``FinalLayerSeam`` (the hook on the final layer's input), ``SkippedBlocks`` (the block lists
emptied for a forecast call), ``BlockCounter`` (the blocks that ran), ``FinalLayerContract`` (whether the
model's code still hands the final layer its feature as the registry says); for a forecast of the final
layer's output (``Forecaster.target``), ``final_layer_output``'s seam and contract in their place; and, shared with every method
(``sampling_run``): ``CallRouter`` (streams and contexts), ``TextPathReuse`` and ``ForeignServeWatch``.
"""

from __future__ import annotations

import contextlib

import torch

from ..families.registry import ResolvedTransformer
from ..sampling.block_count import BlockCounter
from ..sampling.call_router import CallLayout, StreamKey
from ..sampling.sampling_run import CallWork, SamplingRun, Vote
from ..sampling.step_clock import StepClock
from ..sampling.stream_report import StreamReport
from .feature_forecast import FeatureHistory
from .final_layer_contract import FeatureArgument, FinalLayerContract
from .final_layer_output import FinalLayerOutputSeam, FinalOutputContract
from .layer_seam import LayerSeam
from .forecast_settings import ForecastPlan

# Why a step was computed or forecast, as the record names it (``OTHER_DEVICE``: another device of a
# parallel run computed it, so this one did too).
WARMUP, SCHEDULE, FINAL, HISTORY, FORECAST = "warmup", "schedule", "final_steps", "history", "forecast"
OTHER_DEVICE = "other_device"


class FinalLayerSeam(LayerSeam):
    """A pre-hook on the final layer: keeps the feature it gets, or hands it a forecast instead.

    The feature is the final layer's parameter the registry names (``feature``): the loop may pass it by
    position or by keyword, and the hook reads (and replaces) it where it came, never another argument.
    """

    def __init__(self, module: torch.nn.Module, feature: FeatureArgument):
        super().__init__(module)
        self.feature = feature

    def _register(self):
        return self.module.register_forward_pre_hook(self._before, with_kwargs=True)

    @torch.compiler.disable
    def _before(self, module, args, kwargs):
        self.ran += 1
        feature = self.feature.get(args, kwargs)
        if not torch.is_tensor(feature):
            raise RuntimeError(
                f"{type(module).__name__}, the model's final layer, was called without its feature "
                f"({self.feature.name!r}) by position or by name: the model's code changed, and the Cache-DiT Forecast "
                f"node cannot find what to forecast. Update the pack, or use the Cache-DiT DBCache node for this model.")
        if self._forecast is None:
            self.seen = feature
            return None
        if tuple(feature.shape) != tuple(self._forecast.shape):
            raise RuntimeError(f"The forecast feature has the shape {tuple(self._forecast.shape)}, the final layer "
                               f"got {tuple(feature.shape)}: this call's stream changed shape within a cache context.")
        return self.feature.replace(args, kwargs, self._forecast)


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


def feature_seam(target: ResolvedTransformer):
    contract = FinalLayerContract(target)
    return contract, FinalLayerSeam(contract.layer, contract.feature)


def output_seam(target: ResolvedTransformer):
    contract = FinalOutputContract(target)
    return contract, FinalLayerOutputSeam(contract.layer)


# Per ``Forecaster.target``: what checks the loop still serves it, and the hook that reads and replaces it.
SEAMS = {"feature": feature_seam, "output": output_seam}


class ForecastRun(SamplingRun):
    """Whole-call forecasting on ``target`` for one sampling run; use as a context manager."""

    evidence = "the model's final layer"

    def __init__(self, target: ResolvedTransformer, plan: ForecastPlan, clock: StepClock, conds_per_step: int, *,
                 node_name: str, host=None, text_reuse_off: str | None = None):
        super().__init__(target, plan, clock, conds_per_step, node_name=node_name, host=host,
                         text_reuse_off=text_reuse_off)
        self.counter = BlockCounter(target.block_modules)
        self.contract, self.seam = SEAMS[plan.settings.forecast.target](target)
        self.skipped = SkippedBlocks(target.module, tuple(entry.attr for entry in target.block_lists))
        self.streams: dict[tuple[int, StreamKey], ForecastStream] = {}
        self._vote: Vote | None = None

    @property
    def num_blocks(self) -> int:
        return self.counter.num_blocks

    # --- lifetime -----------------------------------------------------------------
    def _loop_mismatch(self) -> str | None:
        return self.contract.signature_mismatch()

    def _open(self) -> None:
        self.counter.install()
        self.seam.install()
        self.contract.watch()   # until the first computed call it decides

    def _close(self) -> None:
        self.counter.remove()
        self.seam.remove()
        self.contract.unwatch()
        for stream in self.streams.values():
            stream.history = None   # the features hold device memory; the run has ended

    def _streams(self) -> list[ForecastStream]:
        return list(self.streams.values())

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def _call(self, step: int, key: StreamKey, routed: bool):
        stream = self._stream(key) if routed else None
        reason = self._reason(step, stream) if routed else None
        if reason is not None and self._vote is not None and not self._vote(reason == FORECAST, 0):
            reason = OTHER_DEVICE if reason == FORECAST else reason
        forecast = stream.history.forecast(step, self.plan.share_at(step)) if reason == FORECAST else None
        self.counter.begin()
        self.seam.begin(forecast)
        work = CallWork(skipped=forecast is not None)
        try:
            with self.skipped() if forecast is not None else contextlib.nullcontext():
                yield work
        finally:
            counted = self.counter.end()
            work.evidence_ran, seen = self.seam.end()
        work.blocks_run = sum(counted)
        if stream is not None and forecast is None and self.contract.watching:
            warning = self.contract.verdict(seen)   # the call ran as it is: only the rest of the run steps aside
            if warning is not None:
                self.step_aside(warning)
                return
        if stream is not None:
            stream.reasons[step] = reason
            if forecast is None and seen is not None:
                stream.history.add(step, seen)

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

    def _start_context(self, step: int, layout: CallLayout):
        """A fresh context: its streams' histories start empty (``_stream``)."""

    # --- several devices ------------------------------------------------------------
    def share_decisions(self, vote: Vote) -> None:
        """Each decided call's "forecast or compute" goes through ``vote``: a step is forecast only where every
        device's stream has the history for it, so no device waits on another's computed call."""
        self._vote = vote

    def stop_sharing(self) -> None:
        self._vote = None
