"""cache-dit on every device of a parallel sampling run, with one caching decision per step.

Multi-GPU sampling keeps one copy of the transformer per device and, in every step, hands the
conds to the devices in parallel threads (two devices and CFG: cond on one, uncond on the other).
cache-dit keeps its per-step state in the module it patches, so each copy gets its own
``CacheRun``: its own contexts, call layouts and ``has_separate_cfg``, learnt from what that
device is sent.

The sampler waits for every device, so a step is only faster when every device serves it from
the cache. ``StepConsensus`` makes that one decision: cache-dit asks ``can_cache`` once per call,
after the Fn blocks; each device's first call of a step votes there with cache-dit's own answer,
and the step is cached only if every device voted yes. A "no" decides at once; a "yes" waits for
the other devices' votes. With a step mask all devices agree anyway; with the threshold the
device whose residual changed most decides, the most conservative choice.

Who votes in a step is who voted in the step before: the conds a device is sent stay the same
from step to step unless the conds themselves change (e.g. a timestep range ends). A device that
stops getting work is waited for once (``StepConsensus.wait_s``: ten times the longest gap
between the devices' votes seen so far, at least ``MIN_WAIT_S``), and that step is computed
everywhere (said in the record's warnings); a device that gets other work than before starts a
fresh context through its ``CacheRun`` (its first step computes, never serving another cond's
residual), so its vote in that step is "no".
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import threading
import time

import torch

from .cache_run import CacheRun, quiet_cache_dit
from .run_record import CallTimer
from .diagnostics import suggest_thresholds
from .registry import ResolvedTransformer
from .settings import RunPlan
from .stats import RunRecord, summarize_steps
from .step_clock import StepClock

# The least time a device that voted "cache" waits for the votes of the devices that voted in the
# step before. Only used up when a device gets no work in a step any more: devices vote a few
# blocks into the same step, normally milliseconds apart.
MIN_WAIT_S = 10.0
# How many times the longest gap seen between the devices' votes of one step a device waits.
WAIT_PER_GAP = 10.0
# A step's reason on a device that would have cached it, had another device not computed it.
OTHER_DEVICE = "other_device"


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """One device's copy of the transformer, as the sampler will call it."""

    label: str                   # the torch device, e.g. "cuda:1"
    target: ResolvedTransformer
    host: torch.nn.Module        # the module the sampler calls on that device
    conds_per_step: int          # conds the device is expected to get per step (a hint; calls decide)


class SharedClock:
    """One step clock for every device: the sampler reports once, calls come from several threads."""

    def __init__(self, clock: StepClock):
        self._clock = clock
        self._lock = threading.Lock()
        self.steps, self.sigmas = clock.steps, clock.sigmas

    def step_reported(self, step: int) -> None:
        with self._lock:
            self._clock.step_reported(step)

    def for_device(self, label: str) -> "DeviceClock":
        return DeviceClock(self, label)

    def step_of(self, sigma, stream) -> int:
        with self._lock:
            return self._clock.step_of(sigma, stream)


class DeviceClock:
    """A device's view of the shared clock; remembers the step of the device's current call.

    Each device's calls run one after another on its own thread, so "current" is well defined.
    """

    def __init__(self, shared: SharedClock, label: str):
        self._shared, self._label = shared, label
        self.steps, self.sigmas = shared.steps, shared.sigmas
        self.current_step: int | None = None

    def step_of(self, sigma, stream=None) -> int:
        # Streams are told apart per device: two devices may be sent the same branches.
        self.current_step = self._shared.step_of(sigma, (self._label, stream))
        return self.current_step


@dataclasses.dataclass
class _Ballot:
    expected: set[str]
    votes: dict[str, bool] = dataclasses.field(default_factory=dict)
    decision: bool | None = None
    timed_out: list[str] = dataclasses.field(default_factory=list)
    first_vote: float = 0.0

    def settle(self) -> None:
        if self.decision is None and (not all(self.votes.values()) or self.expected <= self.votes.keys()):
            self.decision = all(self.votes.values())


class StepConsensus:
    """Per step, the devices' votes on serving it from the cache: yes only if every device says yes."""

    def __init__(self, min_wait_s: float = MIN_WAIT_S):
        self.min_wait_s = min_wait_s
        self._longest_gap = 0.0
        self._ballots: dict[int, _Ballot] = {}
        self._changed = threading.Condition()

    @property
    def wait_s(self) -> float:
        return max(self.min_wait_s, WAIT_PER_GAP * self._longest_gap)

    def vote(self, step: int, device: str, cache: bool) -> bool:
        """``device``'s call at ``step`` would ``cache``: what it must do so that all devices do alike."""
        with self._changed:
            ballot = self._ballot(step)
            if device in ballot.votes:
                # A further stream of this device in this step: the step's decision stands (its first
                # call only returned once it was made); this stream may still compute on its own.
                return cache and bool(ballot.decision)
            now = time.monotonic()
            if not ballot.votes:
                ballot.first_vote = now
            elif device in ballot.expected and not ballot.timed_out:
                self._longest_gap = max(self._longest_gap, now - ballot.first_vote)
            ballot.votes[device] = cache
            ballot.settle()
            self._changed.notify_all()
            deadline = now + self.wait_s
            while ballot.decision is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    ballot.timed_out = sorted(ballot.expected - ballot.votes.keys())
                    ballot.decision = False
                    self._changed.notify_all()
                    break
                self._changed.wait(left)
            return cache and ballot.decision

    def withdraw(self, step: int, device: str) -> None:
        """``device``'s call at ``step`` ended before it voted (an error): nobody waits for it."""
        with self._changed:
            ballot = self._ballot(step)
            if device not in ballot.votes:
                ballot.expected.discard(device)
                ballot.settle()
                self._changed.notify_all()

    def _ballot(self, step: int) -> _Ballot:
        if step not in self._ballots:
            earlier = [s for s in self._ballots if s < step]
            voters = set(self._ballots[max(earlier)].votes) if earlier else set()
            self._ballots[step] = _Ballot(expected=voters)
        return self._ballots[step]

    def overridden(self) -> dict[int, list[str]]:
        """Steps computed although some devices voted to cache them, and those devices."""
        return {step: sorted(d for d, yes in b.votes.items() if yes) for step, b in sorted(self._ballots.items())
                if b.decision is False and any(b.votes.values())}

    def timeouts(self) -> dict[int, list[str]]:
        return {step: b.timed_out for step, b in sorted(self._ballots.items()) if b.timed_out}


class DeviceRun:
    """The ``CacheRun`` of one device, as the model-call hook sees it; votes through the consensus."""

    def __init__(self, device: DeviceModel, run: CacheRun, clock: DeviceClock, consensus: StepConsensus):
        self.label = device.label
        self.run = run
        self.clock = clock
        self.consensus = consensus
        self.threads: list[str] = []   # per call: the name of the thread it ran on
        # Per call: step, stream key, served by cache-dit, cached, its timer.
        self.timings: list[tuple[int, tuple, bool, bool, CallTimer]] = []
        self._manager = None

    @property
    def host(self) -> torch.nn.Module:
        return self.run.host

    def uncached(self):
        return self.run.uncached()

    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None):
        self.threads.append(threading.current_thread().name)
        timer = CallTimer(device)
        try:
            with self.run.model_call(sigma, branches, shapes, device=device) as served:
                yield served
        except BaseException:
            if self.clock.current_step is not None:
                self.consensus.withdraw(self.clock.current_step, self.label)
            raise
        timer.stop()
        outcome = self.run.outcomes[-1]
        self.timings.append((outcome.step, (outcome.branches, tuple(map(tuple, shapes))), outcome.served_by_cache_dit,
                             outcome.cached, timer))

    def join_consensus(self) -> None:
        """Route cache-dit's own per-call decision on this device's module through the consensus."""
        manager = self.run.target.module._context_manager
        manager.can_cache = functools.partial(_shared_can_cache, self, manager.can_cache)
        self._manager = manager

    def leave_consensus(self) -> None:
        if self._manager is not None:
            self._manager.__dict__.pop("can_cache", None)
            self._manager = None


@torch.compiler.disable
def _shared_can_cache(device_run: DeviceRun, own_can_cache, *args, **kwargs) -> bool:
    cache = bool(own_can_cache(*args, **kwargs))
    return device_run.consensus.vote(device_run.clock.current_step, device_run.label, cache)


class MultiDeviceRun:
    """One sampling run on several devices: a ``CacheRun`` per device, one merged record."""

    def __init__(self, devices: list[DeviceModel], plan: RunPlan, clock: StepClock, cfg: float,
                 node_id: str = "", prompt_id: str = "", guidance: dict | None = None,
                 min_wait_s: float = MIN_WAIT_S):
        if len({id(d.host) for d in devices}) != len(devices):
            raise ValueError("each device needs its own copy of the model")
        self.plan = plan
        self.clock = SharedClock(clock)
        self.consensus = StepConsensus(min_wait_s)
        self.devices = []
        for device in devices:
            device_clock = self.clock.for_device(device.label)
            run = CacheRun(device.target, plan, device_clock, cfg=cfg, conds_per_step=device.conds_per_step,
                           node_id=node_id, prompt_id=prompt_id, guidance=guidance, host=device.host)
            self.devices.append(DeviceRun(device, run, device_clock, self.consensus))
        self.record: RunRecord | None = None
        self._stack: contextlib.ExitStack | None = None
        self._started = 0.0

    def routes(self) -> dict[int, DeviceRun]:
        """Each device's run by the id of the module its calls go to."""
        return {id(device.host): device for device in self.devices}

    def __enter__(self) -> "MultiDeviceRun":
        self._started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            # Quiet for the whole run: each device refreshes its contexts on its own thread, and
            # quiet_cache_dit saves and restores logger levels, which threads would interleave.
            stack.enter_context(quiet_cache_dit())
            for device in self.devices:
                stack.enter_context(device.run)
                stack.callback(device.leave_consensus)
                device.join_consensus()
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type, exc, tb):
        stack, self._stack = self._stack, None
        stack.__exit__(exc_type, exc, tb)
        duration = time.perf_counter() - self._started
        self.record = merge_records(self, duration)
        return False


def merge_records(run: MultiDeviceRun, duration: float) -> RunRecord:
    """The devices' records as one: a step is cached when every device's calls of it were."""
    records = [device.run.record for device in run.devices]
    first = records[0]
    outcomes = [o for device in run.devices for o in device.run.outcomes]
    states, cached, partial = summarize_steps(outcomes, first.steps)
    overridden = run.consensus.overridden()
    warnings = list(dict.fromkeys(w for r in records for w in r.warnings))
    for step, missing in run.consensus.timeouts().items():
        warnings.append(f"Step {step}: {', '.join(missing)} got no work in this step (the conds changed), so "
                        f"after waiting for it the step was computed on every device.")
    streams = []
    for device, record in zip(run.devices, records):
        for stream in record.streams:
            reasons = [OTHER_DEVICE if step in overridden and device.label in overridden[step] else reason
                       for step, reason in zip(stream["steps"], stream["step_reasons"])]
            streams.append({"device": device.label, **stream, "step_reasons": reasons})
    modes = [r.cfg_mode for r in records if r.calls]
    parallel = parallel_block_evals(run)
    return dataclasses.replace(
        first,
        # "split": the step's conds went to several devices (each device's own mode is in ``devices``).
        cfg_mode="split" if len(modes) > 1 else (modes[0] if modes else first.cfg_mode),
        has_separate_cfg=any(r.has_separate_cfg for r in records),
        cached_steps=cached, partial_steps=partial, step_states=states,
        calls=sum(r.calls for r in records), extra_calls=sum(r.extra_calls for r in records),
        cache_contexts=max(r.cache_contexts for r in records),
        # By step, then device; each device's calls of a step in the order they ran.
        call_log=[entry for _, entry in sorted(
            (((entry[0], index, order), entry) for index, r in enumerate(records)
             for order, entry in enumerate(r.call_log)), key=lambda item: item[0])],
        block_evals=sum(r.block_evals for r in records),
        block_evals_uncached=sum(r.block_evals_uncached for r in records),
        warnings=warnings, duration_s=round(duration, 4),
        estimated_uncached_s=round(parallel_uncached_seconds(run, duration), 4),
        residual_diffs=[_max_or_none(r.residual_diffs[s] for r in records) for s in range(first.steps)],
        step_reasons=_step_reasons(run, states, overridden),
        streams=streams,
        threshold_suggestions=suggest_thresholds([t for d in run.devices for t in d.run.stream_traces()]),
        devices=[_device_summary(d, r) for d, r in zip(run.devices, records)],
        parallel_block_evals=list(parallel),
    )


def _device_summary(device: DeviceRun, record: RunRecord) -> dict:
    return {"device": device.label, "calls": record.calls, "threads": sorted(set(device.threads)),
            "module_id": id(device.host), "cfg_mode": record.cfg_mode,
            "has_separate_cfg": record.has_separate_cfg, "cache_contexts": record.cache_contexts,
            "cached_steps": record.cached_steps, "partial_steps": record.partial_steps,
            "block_evals": record.block_evals,
            # per call: [step, branches, served_by_cache_dit, blocks_run, sigma, thread]
            "call_log": [entry + [thread] for entry, thread in zip(record.call_log, device.threads)]}


def _step_reasons(run: MultiDeviceRun, states: list[str], overridden: dict[int, list[str]]) -> list:
    """A step's reason is that of a device that decided the step's outcome by its own rules."""
    reasons = []
    for step, state in enumerate(states):
        working = [(d.label, d.run.record) for d in run.devices if d.run.record.calls]
        own = [r.step_reasons[step] for label, r in working
               if r.step_states[step] == state and label not in overridden.get(step, [])]
        reasons.append(own[0] if own else next((r.step_reasons[step] for _, r in working), None))
    return reasons


def _max_or_none(values) -> float | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _step_costs(device: DeviceRun):
    """Per step: the device's block evaluations, with the cache and without."""
    with_cache: dict[int, int] = {}
    without: dict[int, int] = {}
    for outcome in device.run.outcomes:
        with_cache[outcome.step] = with_cache.get(outcome.step, 0) + outcome.blocks_run
        without[outcome.step] = without.get(outcome.step, 0) + outcome.blocks_total
    return with_cache, without


def parallel_block_evals(run: MultiDeviceRun) -> tuple[int, int]:
    """Block evaluations on the busiest device of each step, with the cache and without.

    Devices run a step side by side and the sampler waits for the slowest, so this, not the sum
    over devices, is what the wall time follows.
    """
    costs = [_step_costs(device) for device in run.devices]
    steps = sorted({s for with_cache, _ in costs for s in with_cache})
    with_cache = sum(max(c[0].get(s, 0) for c in costs) for s in steps)
    without = sum(max(c[1].get(s, 0) for c in costs) for s in steps)
    return with_cache, without


def parallel_uncached_seconds(run: MultiDeviceRun, duration: float) -> float:
    """The run's time had nothing been cached, with the devices running each step side by side.

    A cached call would have cost its stream's median computed call on its device (as for one
    device, see ``estimate_uncached_seconds``); a step would have taken its slowest device's time.
    """
    actual: dict[int, dict[str, float]] = {}
    uncached: dict[int, dict[str, float]] = {}
    for device in run.devices:
        timings = [(step, key, served, cached, timer.seconds()) for step, key, served, cached, timer in device.timings]
        full: dict[object, list[float]] = {}
        for _, key, served, cached, seconds in timings:
            if served and not cached:
                full.setdefault(key, []).append(seconds)
        for step, key, served, cached, seconds in timings:
            would = _median(full[key]) if served and cached and full.get(key) else seconds
            actual.setdefault(step, {}).setdefault(device.label, 0.0)
            uncached.setdefault(step, {}).setdefault(device.label, 0.0)
            actual[step][device.label] += seconds
            uncached[step][device.label] += max(would, seconds)
    saved = sum(max(uncached[s].values()) - max(actual[s].values()) for s in actual)
    return duration + max(saved, 0.0)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2


def conds_per_device(total_conds: int, devices: int) -> list[int]:
    """How many of a step's conds each device is sent when they are filled in order to an even share."""
    share = max(1, math.ceil(total_conds / max(devices, 1)))
    return [max(0, min(share, total_conds - index * share)) for index in range(devices)]
