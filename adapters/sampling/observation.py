"""What the engine saw of one sampling run, handed out when the run ends.

A run (``SamplingRun``, one per device) routes the calls; while it runs it only appends one
``Call`` per model call. When it ends it returns a frozen ``RunObservation``: the
calls, the call layout it settled on, an account of each stream (for DBCache its
residual trace with the rules of its cache context), and its warnings. The run hands out a ``RunOutcome`` (its plan, clock
and observations), which ``run_record.build`` turns into the record; nothing here
reads the device.
"""

from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

import torch

from .seam import RunPlan
from .stream_report import StreamAccount
from .text_path import TextPathCounts

if TYPE_CHECKING:
    from .step_clock import StepClock


class CallTimer:
    """Wall time of one model call: CUDA events on a GPU (no sync per call), else the CPU clock.

    The per-call wrapper runs inside the diffusion model's forward, which ComfyUI's TorchCompileModel
    compiles: traced by dynamo, the events would become graph ops and the Python events kept here would
    never be recorded (reading them fails the prompt). The clock therefore always runs eagerly.
    """

    @torch.compiler.disable
    def __init__(self, device):
        self._cuda = device is not None and torch.device(device).type == "cuda"
        if self._cuda:
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._begun, self._ended = time.perf_counter(), None

    @torch.compiler.disable
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


@dataclasses.dataclass(frozen=True)
class Call:
    """One model call as the run routed it."""

    step: int
    branches: tuple[int, ...]   # cond_or_uncond of the call (0 = cond, 1 = uncond)
    stream: object              # what makes calls share a residual cache (cache_run.StreamKey)
    routed: bool                # one of the step's streams, decided by the method; False: an extra call computed
                                # in full around it
    skipped: bool               # the method skipped the call's blocks: cached by DBCache (its middle blocks), or
                                # forecast (all of them)
    blocks_run: int             # transformer blocks actually evaluated
    sigma: object               # the sigma the sampler called the model at (a tensor until the record reads it)
    timer: CallTimer
    thread: str                 # the thread the call ran on (several devices run side by side)
    # Several block lists only: per list (in loop order), whether cache-dit skipped its middle blocks.
    # ``skipped`` is True when every list did; a call where only some did is counted here.
    list_skipped: tuple[bool, ...] = ()


@dataclasses.dataclass(frozen=True)
class RunObservation:
    """One device's run, as the engine saw it."""

    status: str                 # "ok", "interrupted" or "error": how the sampling ended
    num_blocks: int
    module_id: int              # id() of the module the sampler called
    calls: tuple[Call, ...]
    cfg_mode: str | None        # the first call layout's: "none", "batched" or "split"; None without a call
    has_separate_cfg: bool      # what cache-dit was configured with for that layout
    cache_contexts: int         # > 1 when the call layout changed mid-run and a fresh context started
    streams: tuple[StreamAccount, ...]   # per (context, stream[, block list]): what it did, for the record
    warnings: tuple[str, ...]
    device: str | None = None   # the torch device of a multi-device run's copy; None on one device
    text_path: TextPathCounts | None = None   # the family's text path: computed / reused calls
    block_lists: tuple[tuple[str, int], ...] = ()   # (attribute, blocks) of each list when there are several


@dataclasses.dataclass(frozen=True)
class ParallelOutcome:
    """What only a run on several devices has: their shared decisions and one wall clock."""

    # step -> block list (its attribute; None for one list) -> devices that would have cached it, had another
    # not computed it
    overridden: dict[int, dict[str | None, list[str]]]
    timeouts: dict[int, list[str]]     # step -> devices waited for in vain (they got no work in that step)
    wall_s: float                      # the run's span: each device's calls are timed on its own clock


@dataclasses.dataclass(frozen=True)
class RunOutcome:
    """What a finished run hands back for its record: the plan, the clock, one observation per device."""

    plan: RunPlan               # the method's plan: what the record says of the method
    clock: StepClock            # its steps, sigmas and warnings (a multi-device run's shared view of it)
    family: str                 # the family's name (the record's ``model``)
    observations: tuple[RunObservation, ...]   # empty when the run never started (enabling failed)
    parallel: ParallelOutcome | None = None     # several devices only


def exit_status(exc_type) -> str:
    if exc_type is None:
        return "ok"
    return "interrupted" if "Interrupt" in exc_type.__name__ else "error"
