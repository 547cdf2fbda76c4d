"""A finished run's record: what was cached, why, how long it took, what the advisor suggests.

``build`` makes the ``RunRecord`` (shared by the log, the HTTP route and the UI) from the
run's plan and clock, the ``RunObservation`` of each device and the run's metadata. One
device is the one-element case: the merge of several devices, the time estimate and the
threshold advisor exist once and run once. It reads the device once per kind of value (the
call timings, the sigmas, the measured changes), here at the end of the run, not per call.
"""

from __future__ import annotations

import collections
import dataclasses
import logging
import statistics
from typing import Sequence

import torch

from ..sampling.observation import Call, ParallelOutcome, RunObservation, RunOutcome
from ..sampling.seam import RunPlan
from ..sampling.stream_report import StreamReport
from .strict_json import finite_or_null, replaced_warning

logger = logging.getLogger(__name__)

# A step's reason on a device that would have cached it, had another device not computed it.
OTHER_DEVICE = "other_device"


@dataclasses.dataclass(frozen=True)
class RunMeta:
    """Who asked for the run and with what guidance: facts the engine never needs."""

    node_name: str                                            # the node the user placed, for the log
    node_id: str = ""
    prompt_id: str = ""
    cfg: float = 1.0
    guidance: dict = dataclasses.field(default_factory=dict)  # the guider and the scales it really uses
    warnings: tuple[str, ...] = ()                            # said about the run from outside the engine


@dataclasses.dataclass
class RunRecord:
    """Every field has the value of a run that did nothing: a record left uncached says only what it must."""

    node_id: str = ""
    prompt_id: str = ""
    model: str = ""                   # the family's name ("" for a run left uncached)
    # The method's own summary (``RunPlan.method_summary``: {"name": "dbcache"}, or {"name": "forecast", what it ran
    # with}) and how to read the record, in its words: ``skipped_state`` ("cached", "forecast") and
    # ``measures_residuals``; empty for a run left uncached.
    method: dict = dataclasses.field(default_factory=dict)
    steps_mask: str = "none"
    mask: list[int] | None = None     # the step mask built for this run (1 = compute), None without one
    steps: int = 0
    sigmas: list = dataclasses.field(default_factory=list)   # the run's sigma schedule (steps + 1 values)
    cfg: float = 1.0
    guidance: dict = dataclasses.field(default_factory=dict)  # the guider and the scales it really uses
    cfg_mode: str | None = None       # "none", "batched" or "split"; None when no model call was made
    has_separate_cfg: bool = False
    settings: dict = dataclasses.field(default_factory=dict)
    # Per step what happened: "computed", "cached" (DBCache skipped its middle blocks in every decided call),
    # "forecast" (whole-call forecasting ran none of its blocks in every decided call), "partial" (some of the
    # step's calls did), or "uncached" (a run left uncached).
    step_states: list[str] = dataclasses.field(default_factory=list)
    cached_steps: list[int] = dataclasses.field(default_factory=list)     # DBCache's cached steps
    forecast_steps: list[int] = dataclasses.field(default_factory=list)   # whole-call forecasting's forecast steps
    partial_steps: list[int] = dataclasses.field(default_factory=list)
    calls: int = 0
    extra_calls: int = 0              # calls outside the step's streams, computed in full around the method
    cache_contexts: int = 0           # > 1 when the call layout changed mid-run and a fresh context started
    block_evals: int = 0
    block_evals_uncached: int = 0
    # Model calls in which every block ran (a DBCache cached call runs its Fn/Bn blocks, a forecast call none);
    # None for a run left uncached: what ran was not the pack's to count (another step cache on the model may have
    # skipped steps, another cache node after this one may have cached them).
    full_calls: int | None = 0
    call_log: list[list] = dataclasses.field(default_factory=list)   # per call: [step, branches, decided by the
                                                                       # method, blocks_run, sigma]
    status: str = "ok"                # "ok", "interrupted", "error", or "skipped" (left uncached, see warnings)
    warnings: list[str] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0
    estimated_uncached_s: float = 0.0   # the same run had nothing been skipped, from its own call timings
    residual_diffs: list = dataclasses.field(default_factory=list)   # per step: DBCache's relative Fn residual
                                                                      # change vs the last computed step (max over
                                                                      # streams); None where not measured
    step_reasons: list = dataclasses.field(default_factory=list)   # per step: why it was computed or skipped
    streams: list = dataclasses.field(default_factory=list)        # per stream and context: its steps and reasons
    # The method's own parts (``plan.record_parts``): DBCache's threshold suggestions
    # [{"threshold", "range", "cached_steps"}] and the calibrator that ran with the parameters it read.
    threshold_suggestions: list = dataclasses.field(default_factory=list)
    calibrator: dict | None = None
    # Multi-device runs: one summary per device (calls, threads, cached steps, its own CFG mode),
    # and the block evaluations of the busiest device per step [with the cache, without], which the
    # wall time follows when the devices run side by side. Empty / None on one device.
    devices: list = dataclasses.field(default_factory=list)
    parallel_block_evals: list | None = None
    # The family's text path over all calls: {"computed", "reused", "off"}; None when it has none.
    text_path: dict | None = None
    # Models with several block lists (Flux: double, then single blocks), each its own cache context:
    # per list {"blocks", "size", "cached_steps", "partial_steps"}, where a step counts for a list as
    # for the run (every decided call of the step, on every device, skipped that list's middle blocks).
    # A step is in the run's ``cached_steps`` only when every list skipped it. Empty for one list.
    block_lists: list = dataclasses.field(default_factory=list)
    # What ran besides the counts, in the method's words for the log line (``RunPlan.method_text``); not published:
    # the panel says it from ``method`` and ``calibrator`` in the editor's language.
    method_text: str = dataclasses.field(default="calibrator none", metadata={"published": False})

    @property
    def skipped_state(self) -> str:
        """The method's word for a step whose blocks it skipped ("cached" for a run left uncached)."""
        return self.method.get("skipped_state", "cached")

    @property
    def skipped_steps(self) -> list[int]:
        """The steps whose blocks the method skipped, whichever method it was (cached or forecast)."""
        return sorted(self.cached_steps + self.forecast_steps)

    @property
    def estimated_speedup(self) -> float:
        return self.estimated_uncached_s / self.duration_s if self.duration_s > 0 else 1.0

    @property
    def estimated_saved_s(self) -> float:
        return max(self.estimated_uncached_s - self.duration_s, 0.0)

    @property
    def blocks_saved(self) -> float:
        if not self.block_evals_uncached:
            return 0.0
        return 1.0 - self.block_evals / self.block_evals_uncached

    @property
    def ideal_speedup(self) -> float:
        """Block evaluations without the cache over those with it (on the busiest device of each step)."""
        with_cache, without = self.parallel_block_evals or (self.block_evals, self.block_evals_uncached)
        return without / with_cache if with_cache else 1.0

    @property
    def device_count(self) -> int:
        return max(1, len(self.devices))

    @property
    def equal_cost_steps(self) -> int | None:
        """The step count whose uncached run costs as much as this run: the one to set a plain KSampler to, to
        see whether the cache beats fewer steps at the same cost.

        None where there is nothing honest to say: a run left uncached (its calls were not the pack's to count,
        see ``full_calls``), an interrupted or failed one (no image to compare), one that made no model call.
        Several devices count as the wall time does, by the busiest device of each step (``parallel_block_evals``),
        as ``ideal_speedup`` does.
        """
        if self.status != "ok" or not self.calls:
            return None
        with_cache, without = self.parallel_block_evals or (self.block_evals, self.block_evals_uncached)
        return steps_costing_as_much(self.steps, with_cache, without)

    def as_dict(self) -> dict:
        """The record as strict JSON data: a non-finite number becomes None, with a warning saying where."""
        # The fields as they are: ``finite_or_null`` copies every dict and list on its way (a deep copy
        # first, as ``dataclasses.asdict`` makes, would copy it all twice).
        data = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                if field.metadata.get("published", True)}
        data["blocks_saved"] = round(self.blocks_saved, 4)
        data["ideal_speedup"] = round(self.ideal_speedup, 4)
        data["estimated_speedup"] = round(self.estimated_speedup, 4)
        data["estimated_saved_s"] = round(self.estimated_saved_s, 4)
        data["skipped_steps"] = self.skipped_steps
        data["device_count"] = self.device_count
        data["equal_cost_steps"] = self.equal_cost_steps
        data, replaced = finite_or_null(data)
        if replaced:
            data["warnings"].append(replaced_warning(replaced))
        return data

    def log_line(self, node_name: str) -> str:
        calls = self.calls_text()
        return (f"{node_name} [node {self.node_id or '?'}]: {self.skipped_state} steps {len(self.skipped_steps)}/"
                f"{self.steps}"
                f"{f' (+{len(self.partial_steps)} partial)' if self.partial_steps else ''}, "
                f"block evaluations saved {self.block_evals_uncached - self.block_evals}/{self.block_evals_uncached} "
                f"({self.blocks_saved:.0%}), {f'{calls}, ' if calls else ''}"
                f"CFG {self.cfg:g} mode {self.cfg_mode or 'n/a (no model call)'}, "
                f"has_separate_cfg={self.has_separate_cfg}, {self.method_text}, "
                f"{f'{self.device_count} devices, ' if self.device_count > 1 else ''}"
                f"~{self.estimated_speedup:.2f}x, {self.estimated_saved_s:.2f} s saved (estimated)"
                f"{'' if self.status == 'ok' else f', run {self.status}'}")

    def calls_text(self) -> str:
        """The calls made in full and the step count that costs as much ("5 of 8 calls computed: as many as 5
        steps"), as the log says it; "" for a run left uncached, whose calls were not counted."""
        if self.full_calls is None:
            return ""
        counted = f"{self.full_calls} of {self.calls} calls computed"
        return counted if self.equal_cost_steps is None else f"{counted}: as many as {self.equal_cost_steps} steps"


def steps_costing_as_much(steps: int, block_evals: int, block_evals_uncached: int) -> int:
    """The fewest steps whose uncached run makes at least as many block evaluations as a run of ``steps`` steps
    that made ``block_evals`` of the ``block_evals_uncached`` it would have made uncached.

    An uncached step costs ``block_evals_uncached / steps``: the blocks per call times the calls per step as this
    run made them (one call, two for split CFG, one batched call for both, a corrector's extra call), so CFG needs
    no guess here. A DBCache cached call counts for the Fn/Bn blocks it still ran, a forecast call for none.
    Rounded up: when the cache saved part of a step, fewer steps get that part, the benefit of the doubt.
    """
    return -(-steps * block_evals // block_evals_uncached) if block_evals_uncached else 0


# --- building --------------------------------------------------------------------------------

def record_or_none(outcome: RunOutcome, meta: RunMeta) -> RunRecord | None:
    """``build``, except that when the run itself failed, a failure here must not hide its error.

    None also for a run that never started (enabling cache-dit failed): it has nothing to report.
    """
    if not outcome.observations:
        return None
    failing = any(o.status != "ok" for o in outcome.observations)
    try:
        return build(outcome, meta)
    except Exception:
        if not failing:
            raise
        logger.exception("%s [node %s]: no stats for this failed run (the run's own error follows)", meta.node_name,
                         meta.node_id)
        return None


def build(outcome: RunOutcome, meta: RunMeta) -> RunRecord:
    """The record of a run on one device (one observation) or several (one each, and ``parallel``)."""
    plan, clock, observations, parallel = outcome.plan, outcome.clock, outcome.observations, outcome.parallel
    steps = clock.steps
    overridden = parallel.overridden if parallel else {}
    word = plan.skipped_state
    devices = [_DeviceView(o, steps, word) for o in observations]
    calls = [call for o in observations for call in o.calls]
    states, skipped, partial = summarize_steps(calls, steps, word)
    working = [d for d in devices if d.observation.calls]
    modes = [d.observation.cfg_mode for d in working]
    seconds = [d.seconds for d in devices]
    duration = parallel.wall_s if parallel else sampling_seconds(observations[0].calls)
    sigmas = [call_sigmas(o.calls) for o in observations]   # one device read each
    streams = [stream for d in devices for stream in d.streams(overridden, labelled=parallel is not None)]
    parts = plan.record_parts(observations, streams)
    return RunRecord(
        node_id=str(meta.node_id), prompt_id=str(meta.prompt_id), model=outcome.family,
        method={**plan.method_summary(), "skipped_state": word, "measures_residuals": plan.measures_residuals},
        method_text=plan.method_text(parts),
        steps_mask=plan.mask_name, mask=list(plan.mask) if plan.mask else None,
        steps=steps, sigmas=[round(v, 6) for v in clock.sigmas], cfg=float(meta.cfg), guidance=dict(meta.guidance),
        # "split" across devices: the step's conds went to several devices (each one's own mode is in ``devices``).
        cfg_mode="split" if len(modes) > 1 else (modes[0] if modes else observations[0].cfg_mode),
        has_separate_cfg=any(o.has_separate_cfg for o in observations),
        settings=dataclasses.asdict(plan.settings), step_states=states, partial_steps=partial,
        **{f"{word}_steps": skipped},   # the record's field of the method's word (``cached_steps``, ...)
        calls=len(calls), extra_calls=sum(not c.routed for c in calls),
        cache_contexts=max(o.cache_contexts for o in observations),
        call_log=_call_log(observations, sigmas, merged=parallel is not None),
        block_evals=sum(c.blocks_run for c in calls),
        block_evals_uncached=sum(len(o.calls) * o.num_blocks for o in observations),
        full_calls=sum(c.blocks_run == o.num_blocks for o in observations for c in o.calls),
        status=next((o.status for o in observations if o.status != "ok"), "ok"),
        warnings=_warnings(plan, clock, observations, meta, parallel),
        duration_s=round(duration, 4),
        estimated_uncached_s=round(estimate_uncached_seconds(duration, observations, seconds), 4),
        residual_diffs=[_max_or_none(d.diffs[s] for d in devices) for s in range(steps)],
        step_reasons=[_step_reason(working, step, state, overridden) for step, state in enumerate(states)],
        streams=streams,
        **parts,
        devices=[d.summary(own) for d, own in zip(devices, sigmas)] if parallel else [],
        parallel_block_evals=list(parallel_block_evals(observations)) if parallel else None,
        text_path=_text_path(observations),
        block_lists=_block_lists(observations, steps, word),
    )


def _block_lists(observations: Sequence[RunObservation], steps: int, word: str) -> list[dict]:
    """Each block list's own skipped steps (``word``: "cached") over the devices' calls (several lists only)."""
    lists = []
    for position, (attr, size) in enumerate(observations[0].block_lists):
        per_list = [dataclasses.replace(call, skipped=call.list_skipped[position]) if call.list_skipped else call
                    for observation in observations for call in observation.calls]
        _, skipped, partial = summarize_steps(per_list, steps, word)
        lists.append({"blocks": attr, "size": size, f"{word}_steps": skipped, "partial_steps": partial})
    return lists


def _text_path(observations: Sequence[RunObservation]) -> dict | None:
    counts = [o.text_path for o in observations if o.text_path is not None]
    if not counts:
        return None
    return {"computed": sum(c.computed for c in counts), "reused": sum(c.reused for c in counts),
            "off": next((c.off for c in counts if c.off), None)}


def skipped_record(steps: int, meta: RunMeta, reason: str) -> RunRecord:
    """The record of a run the pack left uncached on purpose, saying why."""
    return RunRecord(node_id=str(meta.node_id), prompt_id=str(meta.prompt_id), steps=steps, cfg=meta.cfg,
                     guidance=dict(meta.guidance), step_states=["uncached"] * steps, status="skipped", full_calls=None,
                     warnings=[reason, *meta.warnings], residual_diffs=[None] * steps,
                     step_reasons=["skipped"] * steps)


class _DeviceView:
    """One observation's own step states and diagnostics (what a device decided by its own rules)."""

    def __init__(self, observation: RunObservation, steps: int, word: str):
        self.observation, self.word = observation, word
        self.states, self.skipped, self.partial = summarize_steps(observation.calls, steps, word)
        self.diffs: list[float | None] = [None] * steps
        self.reasons: list[str | None] = [None] * steps
        self._streams: list[dict] = []
        self.seconds = [call.timer.seconds() for call in observation.calls]
        for account in observation.streams:
            self._add_stream(account.report())

    def _add_stream(self, report: StreamReport) -> None:
        skipped = set(report.skipped_steps)
        for step, value, reason in zip(report.steps, report.residual_diffs, report.step_reasons):
            if value is not None and (self.diffs[step] is None or value > self.diffs[step]):
                self.diffs[step] = value
            # A step's reason is that of a stream whose outcome is the step's outcome.
            if self.reasons[step] is None or (self.states[step] != self.word and step not in skipped):
                self.reasons[step] = reason
        self._streams.append(_stream_entry(report, self.word))

    def streams(self, overridden: dict[int, dict[str | None, list[str]]], labelled: bool) -> list[dict]:
        if not labelled:
            return self._streams
        label = self.observation.device
        return [{"device": label, **stream,
                 "step_reasons": [OTHER_DEVICE if label in overridden.get(step, {}).get(stream.get("blocks"), ())
                                  else reason for step, reason in zip(stream["steps"], stream["step_reasons"])]}
                for stream in self._streams]

    def summary(self, sigmas: list[float]) -> dict:
        o = self.observation
        return {"device": o.device, "calls": len(o.calls), "threads": sorted({c.thread for c in o.calls}),
                "module_id": o.module_id, "cfg_mode": o.cfg_mode, "has_separate_cfg": o.has_separate_cfg,
                "cache_contexts": o.cache_contexts, f"{self.word}_steps": self.skipped, "partial_steps": self.partial,
                "block_evals": sum(c.blocks_run for c in o.calls),
                **({"block_lists": _block_lists([o], len(self.states), self.word)} if o.block_lists else {}),
                # per call: [step, branches, decided by the method, blocks_run, sigma, thread]
                "call_log": [[c.step, list(c.branches), c.routed, c.blocks_run, sigma, c.thread]
                             for c, sigma in zip(o.calls, sigmas)]}


def _stream_entry(report: StreamReport, word: str) -> dict:
    """The record's ``streams`` entry of one stream; ``word`` names its skipped steps as the method's record does
    ("cached_steps", "forecast_steps")."""
    return {"branches": list(report.branches), "context": report.context,
            **({"blocks": report.blocks} if report.blocks is not None else {}),
            "start_step": report.start_step, "residual_diffs": list(report.residual_diffs), "steps": list(report.steps),
            f"{word}_steps": list(report.skipped_steps), "step_reasons": list(report.step_reasons)}


def _step_reason(working: list[_DeviceView], step: int, state: str,
                 overridden: dict[int, dict[str | None, list[str]]]):
    """A step's reason is that of a device that decided the step's outcome by its own rules (on every list)."""
    others = {device for devices in overridden.get(step, {}).values() for device in devices}
    own = [d.reasons[step] for d in working if d.states[step] == state and d.observation.device not in others]
    return own[0] if own else next((d.reasons[step] for d in working), None)


def _warnings(plan: RunPlan, clock, observations, meta: RunMeta, parallel: ParallelOutcome | None) -> list[str]:
    warnings = list(dict.fromkeys([*plan.warnings, *(w for o in observations for w in o.warnings)]))
    for step, missing in (parallel.timeouts if parallel else {}).items():
        warnings.append(f"Step {step}: {', '.join(missing)} got no work in this step (the conds changed), so "
                        f"after waiting for it the step was computed on every device.")
    return [*warnings, *meta.warnings, *clock.warnings()]


def _call_log(observations: Sequence[RunObservation], sigmas: list[list[float]], merged: bool) -> list[list]:
    """Per call: [step, branches, decided by the method, blocks_run, sigma]; several devices' by step, then
    device."""
    entries = []
    for index, (observation, own) in enumerate(zip(observations, sigmas)):
        for order, (call, sigma) in enumerate(zip(observation.calls, own)):
            entry = [call.step, list(call.branches), call.routed, call.blocks_run, sigma]
            entries.append(((call.step, index, order), entry))
    if merged:
        entries.sort(key=lambda item: item[0])
    return [entry for _, entry in entries]


def summarize_steps(calls: Sequence[Call], steps: int, word: str) -> tuple[list[str], list[int], list[int]]:
    """Per-step state from the calls the method decided: all skipped (``word``: "cached" or "forecast"), some
    ("partial"), or none ("computed"); and the steps of the first two states."""
    decided: dict[int, list[bool]] = collections.defaultdict(list)
    for call in calls:
        if call.routed:
            decided[call.step].append(call.skipped)
    states = []
    for step in range(steps):
        flags = decided.get(step, [])
        if flags and all(flags):
            states.append(word)
        elif any(flags):
            states.append("partial")
        else:
            states.append("computed")
    skipped = [i for i, s in enumerate(states) if s == word]
    partial = [i for i, s in enumerate(states) if s == "partial"]
    return states, skipped, partial


def call_sigmas(calls: Sequence[Call]) -> list[float]:
    """Each call's sigma as a float, read from the device in one go (the calls of one device)."""
    values = [c.sigma for c in calls]
    tensors = [v.reshape(-1)[:1].float() for v in values if torch.is_tensor(v)]
    read = iter(torch.cat(tensors).tolist() if tensors else [])
    return [round(next(read) if torch.is_tensor(v) else float(v), 6) for v in values]


# --- time ------------------------------------------------------------------------------------

def sampling_seconds(calls: Sequence[Call]) -> float:
    """The sampling itself: the first model call's start to the last one's end, on the calls' clock.

    Not the wrapper's whole span: that would also hold ComfyUI's preparation (loading a model
    onto the GPU) and, on a GPU, end on the host before the device is done.
    """
    return calls[0].timer.seconds_until(calls[-1].timer) if calls else 0.0


def estimate_uncached_seconds(duration_s: float, observations: Sequence[RunObservation],
                              seconds: Sequence[Sequence[float]]) -> float:
    """The run's time had no call been cached, from its own call timings (``seconds``: per device, per call).

    A cached call would have cost what a computed call of the same stream on the same device
    costs (its median, which ignores a slow first call); everything else in the run (sampler,
    text tokens, extra calls) is measured as it was. Devices run a step side by side, so a step
    takes its slowest device's time, with the cache and without.
    """
    actual: dict[int, dict[int, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    uncached: dict[int, dict[int, float]] = collections.defaultdict(lambda: collections.defaultdict(float))
    for device, (observation, timings) in enumerate(zip(observations, seconds)):
        full: dict[object, list[float]] = {}
        for call, spent in zip(observation.calls, timings):
            if call.routed and not call.skipped:
                full.setdefault(call.stream, []).append(spent)
        for call, spent in zip(observation.calls, timings):
            would = statistics.median(full[call.stream]) if call.skipped and full.get(call.stream) else spent
            actual[call.step][device] += spent
            uncached[call.step][device] += max(would, spent)
    saved = sum(max(uncached[step].values()) - max(actual[step].values()) for step in actual)
    return duration_s + max(saved, 0.0)


def parallel_block_evals(observations: Sequence[RunObservation]) -> tuple[int, int]:
    """Block evaluations on the busiest device of each step, with the cache and without.

    Devices run a step side by side and the sampler waits for the slowest, so this, not the sum
    over devices, is what the wall time follows.
    """
    with_cache: dict[int, list[int]] = collections.defaultdict(lambda: [0] * len(observations))
    without: dict[int, list[int]] = collections.defaultdict(lambda: [0] * len(observations))
    for device, observation in enumerate(observations):
        for call in observation.calls:
            with_cache[call.step][device] += call.blocks_run
            without[call.step][device] += observation.num_blocks
    return sum(map(max, with_cache.values())), sum(map(max, without.values()))


def _max_or_none(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None
