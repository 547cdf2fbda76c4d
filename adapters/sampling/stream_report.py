"""What one CFG stream of one cache context did, step by step: what the record's ``streams`` entries are made of.

Each method keeps its own per-stream state while a run goes (DBCache: a residual trace and the
rules of its context; whole-call forecasting: a feature history and its schedule); each hands out
an account whose ``report`` the record reads, so the record is built the same way for every method.
``advisor_input`` is what the threshold advisor replays: a DBCache stream's (trace, rules), None
for a method the threshold does not decide.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, runtime_checkable


@dataclasses.dataclass(frozen=True)
class StreamReport:
    branches: tuple[int, ...]          # the guider's conds in this stream's calls
    context: int                       # the cache context (a new one starts when the call layout changes)
    start_step: int
    steps: list[int]                   # the steps this stream was served in, in order
    skipped_steps: list[int]           # of those, the ones whose blocks the method skipped (cached or forecast)
    step_reasons: list[str]            # why each of ``steps`` went as it did
    residual_diffs: list[float | None]  # DBCache's measured change per step of ``steps`` (None: not measured)
    blocks: str | None = None          # the block list, when the model has several (each its own context)


@runtime_checkable
class StreamAccount(Protocol):
    """A stream's account, as a method's run hands it out (``SamplingRun._streams``)."""

    advisor_input: tuple | None

    def report(self) -> StreamReport: ...
