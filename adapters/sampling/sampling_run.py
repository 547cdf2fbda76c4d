"""One method on one transformer for exactly one sampling run: what every method's run shares.

Data path: the node's OUTER_SAMPLE wrapper opens a run (``Method.open_run``), the DIFFUSION_MODEL
wrapper sends every model call through ``SamplingRun.model_call``, and the end of the sampling run
closes it and takes its ``outcome`` for the record.

Every call is handled alike up to the method's own part: its step (``StepClock``) and CFG stream
(``CallRouter``: decided by the method, or an extra call computed in full), the family's text path
reused within the run (``TextPathReuse``), calls another step cache answered (``ForeignServeWatch``),
its timing and its entry in the run's calls. A method (``CacheRun``: DBCache; ``ForecastRun``:
whole-call forecasting) adds only what differs:

- ``_open`` / ``_close``: put its hooks on the module, and take them off;
- ``_loop_mismatch()`` / ``_first_call()``: whether the model's code still is what the method relies on, when
  the run opens and around its first decided call (``loop_drift``); on a mismatch the run steps aside;
- ``_start_context(step, layout)``: a fresh context for a new call layout;
- ``_call(step, key, routed)``: its part around one model call, filling in a ``CallWork``;
- ``_streams()``: each stream's account for the record;
- ``share_decisions(vote)``: how several devices make one decision per step (``multi_device``);
- ``evidence``: the part of the model it always runs, by which a call answered by another cache shows.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import threading
from typing import Callable

import torch

from ..families.registry import ResolvedTransformer
from .call_router import CallLayout, CallRouter, StreamKey
from .foreign_serves import ForeignServeWatch
from .loop_drift import LoopDrift
from .observation import Call, CallTimer, RunObservation, RunOutcome, exit_status
from .seam import RunPlan
from .step_clock import StepClock
from .stream_report import StreamAccount
from .text_path import TextPathReuse

# A device's vote on one decision of a step: (its own decision, the position of the block list it is on) ->
# what it must do so that every device does alike.
Vote = Callable[[bool, int], bool]


@dataclasses.dataclass
class CallWork:
    """What the method's part of one call did, filled in when the call ends."""

    blocks_run: int = 0
    skipped: bool = False                 # the method skipped the call's blocks (cached by DBCache, or forecast)
    list_skipped: tuple[bool, ...] = ()   # several block lists: per list, whether its middle blocks were skipped
    evidence_ran: int = 0                 # how often the part the method always runs ran (``evidence``)


class SamplingRun(abc.ABC):
    """A method on ``target`` for one sampling run; use as a context manager.

    ``node_name`` is the node the user placed, which the run's log lines speak for. ``host`` is the
    module the sampler calls (the transformer, or a module around it); calls into any other module
    (e.g. a copy on another GPU) are not this run's. A method's run implements every abstract method
    below (a run missing one cannot be made); what it needs beyond these arguments it declares in its
    own ``__init__`` (DBCache: ``tell_block_index``), and only that method is handed it (``Method``).
    """

    evidence = "a transformer block"   # what the method always runs of a call it decides
    parallel = None                    # only a run on several devices (``MultiDeviceRun``) has a ParallelOutcome

    def __init__(self, target: ResolvedTransformer, plan: RunPlan, clock: StepClock, conds_per_step: int, *,
                 node_name: str, host=None, text_reuse_off: str | None = None):
        self.target, self.plan, self.clock = target, plan, clock
        self.host = host if host is not None else target.module
        self.router = CallRouter(conds_per_step, node_name)
        self.foreign_serves = ForeignServeWatch(evidence=self.evidence)
        text_path = target.family.text_path   # computed once per batch of conds (None: the family has none)
        self.text_path = TextPathReuse(target.module, text_path, off=text_reuse_off) if text_path else None
        self.calls: list[Call] = []
        self.warnings: list[str] = []   # the run's own; the plan's are the plan's
        self.observation: RunObservation | None = None
        # Why the run stepped aside (``loop_drift``): from then on every call is computed as without the node.
        self.stepped_aside: str | None = None
        self.opened = False
        self._probed = False

    @property
    @abc.abstractmethod
    def num_blocks(self) -> int:
        """Blocks a call runs when computed in full."""

    # --- the method's part ------------------------------------------------------------
    @abc.abstractmethod
    def _open(self) -> None:
        """Put the method's hooks on the module."""

    @abc.abstractmethod
    def _close(self) -> None:
        """Take them off, whatever happened."""

    @abc.abstractmethod
    def _start_context(self, step: int, layout: CallLayout) -> None:
        """A fresh context from ``step`` on, for a new call layout."""

    @abc.abstractmethod
    def _call(self, step: int, key: StreamKey, routed: bool) -> contextlib.AbstractContextManager[CallWork]:
        """The method's part around one model call, filling in the ``CallWork`` it yields."""

    @abc.abstractmethod
    def _streams(self) -> list[StreamAccount]:
        """Each stream's account for the record."""

    def _loop_mismatch(self) -> str | None:
        """The warning when the model's signatures are not what the method relies on (None: they are)."""
        return None

    def _first_call(self) -> contextlib.AbstractContextManager:
        """Around the run's first decided call: raises ``LoopDrift`` when the model's loop is not what the method
        relies on (a method that checks in its own ``_call`` watches nothing here)."""
        return contextlib.nullcontext()

    def _observed(self) -> dict:
        """What the method adds to its observation (``RunObservation`` fields)."""
        return {}

    @abc.abstractmethod
    def share_decisions(self, vote: Vote) -> None:
        """From now on every decision of this run on a step goes through ``vote`` (one device of several)."""

    @abc.abstractmethod
    def stop_sharing(self) -> None:
        """Decide on its own again."""

    @property
    def ballots(self) -> tuple[str | None, ...]:
        """What the devices vote on per step: one ballot per block list position (None: the whole call)."""
        return (None,)

    # --- lifetime -------------------------------------------------------------------
    def __enter__(self):
        self.stepped_aside = self._loop_mismatch()
        if self.stepped_aside is None:   # else nothing of the method touches the model
            self._open()
            self.opened = True
            if self.text_path is not None:
                self.text_path.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self.opened:
                self.opened = False
                try:
                    if self.text_path is not None:
                        self.text_path.__exit__(exc_type, exc, tb)
                finally:
                    self._close()   # whatever happened: the method's hooks never outlive the run
        finally:
            self.observation = self._observe(exit_status(exc_type))
        return False

    def step_aside(self, warning: str) -> None:
        """From now on the run computes every call as without the node (the model's code is not what the method
        relies on); the record is a skipped one that says why."""
        if self.stepped_aside is None:
            self.stepped_aside = warning

    @property
    def observations(self) -> list[RunObservation]:
        """This run's observation, as the one device of a run (see ``MultiDeviceRun``); none before it ended."""
        return [self.observation] if self.observation is not None else []

    def outcome(self) -> RunOutcome:
        """What the record is built from (``run_record.build``), once the run has ended."""
        return RunOutcome(self.plan, self.clock, self.target.family.name, tuple(self.observations), self.parallel)

    def routes(self) -> dict[int, "SamplingRun"]:
        """The run each module's calls go to, by the module's id: this run's host."""
        return {id(self.host): self}

    def _observe(self, status: str) -> RunObservation:
        layout = self.router.first_layout
        return RunObservation(
            status=status, num_blocks=self.num_blocks, module_id=id(self.host), calls=tuple(self.calls),
            cfg_mode=layout.mode if layout else None, has_separate_cfg=bool(layout and layout.separate_cfg),
            cache_contexts=self.router.contexts, streams=tuple(self._streams()), warnings=tuple(self.warnings),
            text_path=self.text_path.counts() if self.text_path is not None else None, **self._observed())

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None, text=None):
        """Wrap one transformer call: the method decides it (or it is computed in full), and it is counted.

        ``sigma`` may stay on the device: it is read only when the clock needs it, and for the
        record at the end of the run. ``text``: (identity, tensor) of the call's conditioning when
        the host vouches it is the same whenever the identity is (see ``text_path``), else None.
        Yields whether the method decides the call. Raises ``LoopDrift`` when the run's first decided call found
        the model's loop changed: the run stepped aside, and the caller computes the call again (``uncached``).
        """
        if not self.opened:   # stepped aside when the run opened: the method never touched the model
            yield False
            return
        key = StreamKey(tuple(int(b) for b in branches), tuple(tuple(s) for s in shapes))
        if torch.is_tensor(sigma):
            sigma = sigma.detach()
        step = self.clock.step_of(sigma, key)
        routed = self._route(step, key)
        first = routed and not self._probed
        self._probed = self._probed or routed
        timer = CallTimer(device)
        text_call = self.text_path.call(*text) if self.text_path is not None and text else contextlib.nullcontext()
        try:
            with text_call, self._call(step, key, routed) as work, \
                    self._first_call() if first else contextlib.nullcontext():
                yield routed
        except LoopDrift as drift:
            self.step_aside(str(drift))
            raise
        timer.stop()
        if self.foreign_serves.observe(step, routed, work.evidence_ran) and self.foreign_serves.calls == 1:
            self.warnings.append(self.foreign_serves.warning())
        self.calls.append(Call(step, key.branches, key, routed, work.skipped, work.blocks_run, sigma, timer,
                               threading.current_thread().name, work.list_skipped))

    def _route(self, step: int, key: StreamKey) -> bool:
        # Once another cache answered a call, the count of calls is off, and once the run stepped aside the
        # method's part is off: route around it.
        if self.foreign_serves.seen or self.stepped_aside is not None:
            return False
        route = self.router.route(step, key)
        if route.new_context is not None:
            self._start_context(step, route.new_context)
        return route.routed

    def warn_once(self, warning: str):
        if warning not in self.warnings:
            self.warnings.append(warning)

    def uncached(self):
        """A call computed in full, outside the method's state."""
        return contextlib.nullcontext()
