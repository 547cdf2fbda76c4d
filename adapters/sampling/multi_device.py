"""A method on every device of a parallel sampling run, with one decision per step (and block list).

Multi-GPU sampling keeps one copy of the transformer per device and, in every step, hands the
conds to the devices in parallel threads (two devices and CFG: cond on one, uncond on the other).
A method keeps its per-step state per module (cache-dit in the module it patches), so each copy
gets its own run of the method (a ``SamplingRun``): its own contexts, call layouts and
``has_separate_cfg``, learnt from what that device is sent.

The sampler waits for every device, so a step is only faster when every device skips it.
``StepConsensus`` makes that one decision; each run routes its own decisions to it
(``SamplingRun.share_decisions``). DBCache: cache-dit asks ``can_cache`` once per call
and block list (each list of the family is its own cache context, e.g. Flux's double- then
single-stream blocks), after that list's Fn blocks; each device's first call of a step votes there
with cache-dit's own answer, on a ballot of that step and list, and the list is cached in that step
only if every device voted yes. A "no" decides at once; a "yes" waits for the other devices' votes.
The lists decide apart, as on one device: in one step a family may skip one list's middle blocks on
every device and compute the other's on every device. With a step mask all devices agree anyway;
with the threshold the device whose residual changed most decides, the most conservative choice.
Whole-call forecasting: each device's first call of a step votes whether its stream would forecast
it (its schedule decides alike everywhere; a stream whose history is not ready yet says no).

Who votes on a list in a step is who voted on it in the step before: the conds a device is sent stay
the same from step to step unless the conds themselves change (e.g. a timestep range ends). A device that
stops getting work is waited for once (``StepConsensus.wait_s``: ten times the longest gap
between the devices' votes seen so far, at least ``MIN_WAIT_S``), and that step is computed
everywhere (said in the record's warnings); a device that gets other work than before starts a
fresh context through its run (its first step computes, never serving another cond's
residual), so its vote in that step is "no".
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import threading
import time

import torch

from ..families.registry import ResolvedTransformer
from .observation import ParallelOutcome, RunObservation, RunOutcome
from .sampling_run import SamplingRun
from .seam import RunPlan
from .step_clock import StepClock

# The least time a device that voted "cache" waits for the votes of the devices that voted in the
# step before. Only used up when a device gets no work in a step any more: devices vote a few
# blocks into the same step, normally milliseconds apart.
MIN_WAIT_S = 10.0
# How many times the longest gap seen between the devices' votes of one step a device waits.
WAIT_PER_GAP = 10.0


@dataclasses.dataclass(frozen=True)
class DeviceModel:
    """One device's copy of the transformer, as the sampler will call it."""

    label: str                   # the torch device, e.g. "cuda:1"
    target: ResolvedTransformer
    host: torch.nn.Module        # the module the sampler calls on that device
    conds_per_step: int          # conds the device is expected to get per step (a hint; calls decide)


def devices_refusal(devices: list[DeviceModel]) -> str | None:
    """Why these device copies cannot share one run (None: they can)."""
    seen: dict[int, str] = {}
    main = devices[0].target
    for device in devices:
        target = device.target
        if id(target.module) in seen:
            return (f"Multi-GPU sampling: {device.label} and {seen[id(target.module)]} share one copy of the model, "
                    f"and cache-dit keeps its state in the model: this run was not cached. Give every device its "
                    f"own copy (MultiGPU CFG Split does).")
        if target.num_blocks != main.num_blocks:
            return (f"Multi-GPU sampling: the model on {device.label} has {target.num_blocks} blocks, the main one "
                    f"{main.num_blocks}: this run was not cached.")
        seen[id(target.module)] = device.label
    return None


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
    """Per step and block list, the devices' votes on serving it from the cache: yes only if every device says yes.

    ``block_list`` names the list a vote is on (its attribute); None for a family with one list.
    """

    def __init__(self, min_wait_s: float = MIN_WAIT_S):
        self.min_wait_s = min_wait_s
        self._longest_gap = 0.0
        self._ballots: dict[tuple[int, str | None], _Ballot] = {}
        self._withdrawn: dict[int, set[str]] = {}
        self._changed = threading.Condition()

    @property
    def wait_s(self) -> float:
        return max(self.min_wait_s, WAIT_PER_GAP * self._longest_gap)

    def vote(self, step: int, device: str, cache: bool, block_list: str | None = None) -> bool:
        """``device``'s call at ``step`` would ``cache`` ``block_list``: what it must do so that all devices do
        alike."""
        with self._changed:
            ballot = self._ballot(step, block_list)
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
        """``device``'s call at ``step`` ended before it voted on every list (an error): nobody waits for it."""
        with self._changed:
            self._withdrawn.setdefault(step, set()).add(device)
            for (ballot_step, _), ballot in self._ballots.items():
                if ballot_step == step and device not in ballot.votes:
                    ballot.expected.discard(device)
                    ballot.settle()
            self._changed.notify_all()

    def _ballot(self, step: int, block_list: str | None) -> _Ballot:
        key = (step, block_list)
        if key not in self._ballots:
            earlier = [s for s, name in self._ballots if name == block_list and s < step]
            voters = set(self._ballots[max(earlier), block_list].votes) if earlier else set()
            self._ballots[key] = _Ballot(expected=voters - self._withdrawn.get(step, set()))
        return self._ballots[key]

    def overridden(self) -> dict[int, dict[str | None, list[str]]]:
        """Per step and block list computed although some devices voted to cache it, those devices."""
        found: dict[int, dict[str | None, list[str]]] = {}
        for (step, block_list), b in sorted(self._ballots.items(), key=lambda item: (item[0][0], str(item[0][1]))):
            if b.decision is False and any(b.votes.values()):
                found.setdefault(step, {})[block_list] = sorted(d for d, yes in b.votes.items() if yes)
        return found

    def timeouts(self) -> dict[int, list[str]]:
        """Per step, the devices some list's ballot waited for in vain."""
        found: dict[int, set[str]] = {}
        for (step, _), b in self._ballots.items():
            if b.timed_out:
                found.setdefault(step, set()).update(b.timed_out)
        return {step: sorted(devices) for step, devices in sorted(found.items())}


class DeviceRun:
    """One device's run, as the model-call hook sees it; its decisions go through the consensus."""

    def __init__(self, device: DeviceModel, run: SamplingRun, clock: DeviceClock, consensus: StepConsensus):
        self.label = device.label
        self.run = run
        self.clock = clock
        self.consensus = consensus

    @property
    def host(self) -> torch.nn.Module:
        return self.run.host

    @property
    def target(self):
        return self.run.target

    def uncached(self):
        return self.run.uncached()

    def warn_once(self, warning: str):
        self.run.warn_once(warning)

    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None, text=None):
        try:
            with self.run.model_call(sigma, branches, shapes, device=device, text=text) as routed:
                yield routed
        except BaseException:
            if self.clock.current_step is not None:
                self.consensus.withdraw(self.clock.current_step, self.label)
            raise

    def join_consensus(self) -> None:
        """Route the run's own decisions on this device through the consensus."""
        self.run.share_decisions(self._shared_decision)

    def leave_consensus(self) -> None:
        self.run.stop_sharing()

    @torch.compiler.disable
    def _shared_decision(self, own: bool, ballot: int) -> bool:
        return self.consensus.vote(self.clock.current_step, self.label, own, self.run.ballots[ballot])

    def observation(self) -> RunObservation:
        return dataclasses.replace(self.run.observation, device=self.label)


class MultiDeviceRun:
    """One sampling run on several devices: a run of the method (``run_type``) per device, their observations side
    by side, and one decision per step (and block list) for all of them.

    ``run_options``: what the method's run takes beyond every run's arguments (see ``Method``), handed to each
    device's run."""

    def __init__(self, devices: list[DeviceModel], plan: RunPlan, clock: StepClock, *, run_type: type[SamplingRun],
                 node_name: str, min_wait_s: float = MIN_WAIT_S, text_reuse_off: str | None = None,
                 run_options: dict | None = None):
        if len({id(d.host) for d in devices}) != len(devices):
            raise ValueError("each device needs its own copy of the model")
        self.plan = plan
        self.family = devices[0].target.family.name
        self.step_clock = clock           # the record's (its warnings); the devices share it through ``clock``
        self.clock = SharedClock(clock)
        self.consensus = StepConsensus(min_wait_s)
        self.devices = []
        for device in devices:
            device_clock = self.clock.for_device(device.label)
            run = run_type(device.target, plan, device_clock, conds_per_step=device.conds_per_step,
                           node_name=node_name, host=device.host, text_reuse_off=text_reuse_off,
                           **(run_options or {}))
            self.devices.append(DeviceRun(device, run, device_clock, self.consensus))
        self.observations: list[RunObservation] = []
        self.parallel: ParallelOutcome | None = None
        self._stack: contextlib.ExitStack | None = None
        self._started = 0.0

    def outcome(self) -> RunOutcome:
        """What the record is built from (``run_record.build``), once the run has ended."""
        return RunOutcome(self.plan, self.step_clock, self.family, tuple(self.observations), self.parallel)

    @property
    def stepped_aside(self) -> str | None:
        """Why the run stepped aside on some device (the model's code is the same on every device)."""
        return next((device.run.stepped_aside for device in self.devices if device.run.stepped_aside), None)

    def routes(self) -> dict[int, DeviceRun]:
        """Each device's run by the id of the module its calls go to."""
        return {id(device.host): device for device in self.devices}

    def __enter__(self) -> "MultiDeviceRun":
        self._started = time.perf_counter()
        with contextlib.ExitStack() as stack:
            for device in self.devices:
                stack.enter_context(device.run)
                if device.run.opened:   # a run that stepped aside at once decides nothing
                    stack.callback(device.leave_consensus)
                    device.join_consensus()
            self._stack = stack.pop_all()
        return self

    def __exit__(self, exc_type, exc, tb):
        stack, self._stack = self._stack, None
        try:
            stack.__exit__(exc_type, exc, tb)
        finally:
            self.observations = [device.observation() for device in self.devices]
            self.parallel = ParallelOutcome(self.consensus.overridden(), self.consensus.timeouts(),
                                            time.perf_counter() - self._started)
        return False


def conds_per_device(total_conds: int, devices: int) -> list[int]:
    """How many of a step's conds each device is sent when they are filled in order to an even share."""
    share = max(1, math.ceil(total_conds / max(devices, 1)))
    return [max(0, min(share, total_conds - index * share)) for index in range(devices)]
