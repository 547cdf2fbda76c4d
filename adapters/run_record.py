"""A finished run's record: what was cached, why, how long it took, what the advisor suggests.

``CacheRun`` routes the calls and collects what happened; this turns that into the
``RunRecord`` the log, the HTTP route and the UI share. It reads the device once
per kind of value (the call timings, the sigmas, the measured changes), here at
the end of the run and not per call.
"""

from __future__ import annotations

import dataclasses
import time

import torch

from .diagnostics import DecisionRules, StreamTrace, estimate_uncached_seconds, suggest_thresholds
from .stats import CallOutcome, RunRecord, summarize_steps


class CallTimer:
    """Wall time of one model call: CUDA events on a GPU (no sync per call), else the CPU clock."""

    def __init__(self, device):
        self._cuda = device is not None and torch.device(device).type == "cuda"
        if self._cuda:
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._begun, self._ended = time.perf_counter(), None

    def stop(self):
        if self._cuda:
            self._end.record()
        else:
            self._ended = time.perf_counter()

    def seconds(self) -> float:
        return self.seconds_until(self)

    def seconds_until(self, last: "CallTimer") -> float:
        """From this call's start to the end of ``last`` (the same clock; waits for the device once)."""
        if self._cuda:
            last._end.synchronize()
            return self._start.elapsed_time(last._end) / 1000.0
        return last._ended - self._begun


@dataclasses.dataclass
class TimedCall:
    stream: object          # the call's StreamKey
    served: bool            # by cache-dit
    cached: bool
    timer: CallTimer


def sampling_seconds(calls: list[TimedCall]) -> float:
    """The sampling itself: the first model call's start to the last one's end, on the calls' clock.

    Not the wrapper's whole span: that would also hold ComfyUI's preparation (loading a model
    onto the GPU) and, on a GPU, end on the host before the device is done.
    """
    return calls[0].timer.seconds_until(calls[-1].timer) if calls else 0.0


def stream_diagnostics(traces: list[tuple[StreamTrace, DecisionRules]], steps: int, states: list[str]) -> dict:
    """Per step and per stream: the change cache-dit compared, why each step went as it did, suggestions."""
    diffs: list[float | None] = [None] * steps
    reasons: list[str | None] = [None] * steps
    streams = []
    for trace, rules in traces:
        measured = trace.measured_diffs()
        order = sorted(trace.cached)
        why = rules.explain(order, trace.cached)
        for step in order:
            value = measured.get(step)
            if value is not None and (diffs[step] is None or value > diffs[step]):
                diffs[step] = value
            # A step's reason is that of a stream whose outcome is the step's outcome.
            if reasons[step] is None or (states[step] != "cached" and not trace.cached[step]):
                reasons[step] = why[step]
        streams.append({"branches": list(trace.branches), "context": trace.context,
                        "start_step": trace.start_step,
                        "residual_diffs": [measured.get(s) for s in order], "steps": order,
                        "cached_steps": [s for s in order if trace.cached[s]],
                        "step_reasons": [why[s] for s in order]})
    # The changes keep every digit: rounded, one just below the threshold could show on it.
    return {"residual_diffs": diffs, "step_reasons": reasons, "streams": streams,
            "threshold_suggestions": suggest_thresholds(traces)}


def call_sigmas(outcomes: list[CallOutcome]) -> list[float]:
    """Each call's sigma as a float, read from the device in one go."""
    values = [o.sigma for o in outcomes]
    tensors = [v.reshape(-1)[:1].float() for v in values if torch.is_tensor(v)]
    read = iter(torch.cat(tensors).tolist() if tensors else [])
    return [round(next(read) if torch.is_tensor(v) else float(v), 6) for v in values]


def build_record(run, status: str) -> RunRecord:
    """The record of a finished ``CacheRun`` (its plan, clock, outcomes, timed calls and traces)."""
    states, cached, partial = summarize_steps(run.outcomes, run.clock.steps)
    layout = run.first_layout
    diagnostics = stream_diagnostics(run.stream_traces(), run.clock.steps, states)
    duration = sampling_seconds(run.timed_calls)
    calls = [(c.stream, c.served, c.cached, c.timer.seconds()) for c in run.timed_calls]
    estimate = estimate_uncached_seconds(duration, calls)
    sigmas = call_sigmas(run.outcomes)
    for outcome, sigma in zip(run.outcomes, sigmas):
        outcome.sigma = sigma
    settings = run.plan.settings
    return RunRecord(
        node_id=str(run.node_id), prompt_id=str(run.prompt_id), model=run.target.family.name,
        steps_mask=settings.steps_mask, mask=list(run.plan.mask) if run.plan.mask else None,
        steps=run.clock.steps, sigmas=[round(v, 6) for v in run.clock.sigmas],
        cfg=run.cfg, guidance=run.guidance,
        cfg_mode=layout.mode if layout else None,
        has_separate_cfg=bool(layout and layout.separate_cfg), settings=dataclasses.asdict(settings),
        cached_steps=cached, partial_steps=partial, step_states=states,
        calls=len(run.outcomes), extra_calls=sum(not o.served_by_cache_dit for o in run.outcomes),
        cache_contexts=run.contexts,
        call_log=[[o.step, list(o.branches), o.served_by_cache_dit, o.blocks_run, o.sigma] for o in run.outcomes],
        block_evals=sum(o.blocks_run for o in run.outcomes),
        block_evals_uncached=len(run.outcomes) * run.num_blocks,
        status=status, warnings=list(run.warnings),
        duration_s=round(duration, 4),
        estimated_uncached_s=round(estimate, 4),
        residual_diffs=diagnostics["residual_diffs"], step_reasons=diagnostics["step_reasons"],
        streams=diagnostics["streams"], threshold_suggestions=diagnostics["threshold_suggestions"],
    )
