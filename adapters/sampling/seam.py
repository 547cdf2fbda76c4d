"""The method seam: what a method's plan offers the run and the record, and what the nodes use of a run.

A method (``adapters/methods.py``) is a plan (``RunPlan``) and a run (a ``SamplingRun`` subclass). The
sampling wrappers hold a ``Run`` for one sampling (one device's ``SamplingRun``, or a ``MultiDeviceRun``)
and send each model call to the ``CallRoute`` of the module it calls. The record (``run_record``) reads
only what ``RunPlan`` declares, so a method's words ("cached", "forecast") and its own parts of the
record come from its plan, never from a test of its name.

Declared as runtime-checkable protocols: ``isinstance`` holds each method's plan and run to them
(``tests/sampling/test_seam.py``), the type checker holds the callers.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Protocol, Sequence, runtime_checkable

if TYPE_CHECKING:
    from ..families.registry import ResolvedTransformer
    from .observation import RunObservation, RunOutcome


@runtime_checkable
class RunPlan(Protocol):
    """A method's plan for one run of ``steps`` steps, and how the record speaks of it."""

    steps: int
    settings: object                 # a dataclass: the record's ``settings``
    mask: tuple[int, ...] | None     # the record's ``mask`` (1 = compute), None without one
    mask_name: str                   # the record's ``steps_mask``
    warnings: tuple[str, ...]        # said about the plan before the run (the log and the record)
    # The record's word for a step whose blocks the method skipped: the step's state, and the name of the record's
    # ``<word>_steps`` fields ("cached": DBCache, "forecast": whole-call forecasting).
    skipped_state: str
    measures_residuals: bool         # whether the record's ``residual_diffs`` are its measure (DBCache's threshold)

    def method_summary(self) -> dict:
        """The record's ``method``: the method's name and what it ran with (strict JSON data)."""
        ...

    def record_parts(self, observations: Sequence[RunObservation], streams: list[dict]) -> dict:
        """The method's own fields of the record (RunRecord field -> value), from what the run saw."""
        ...

    def method_text(self, parts: dict) -> str:
        """What ran besides the counts, as the log line says it (``parts``: ``record_parts``' answer)."""
        ...


@runtime_checkable
class CallRoute(Protocol):
    """What the model-call hook uses of the run a module's calls go to (a ``SamplingRun``, or one device's run)."""

    target: ResolvedTransformer

    def model_call(self, sigma, branches, shapes, device=None, text=None) -> contextlib.AbstractContextManager[bool]:
        ...

    def uncached(self) -> contextlib.AbstractContextManager:
        ...

    def warn_once(self, warning: str) -> None:
        ...


@runtime_checkable
class Run(Protocol):
    """One sampling run of a method, as the sampling wrappers hold it; use as a context manager."""

    clock: object                  # hears the sampler's own step index (``step_reported``)
    stepped_aside: str | None      # why the run computed every call as without the node (None: it did not)

    def routes(self) -> dict[int, CallRoute]:
        """The route of each module's calls, by the module's id."""
        ...

    def outcome(self) -> RunOutcome:
        """What the record is built from, once the run has ended."""
        ...

    def __enter__(self) -> Run:
        ...

    def __exit__(self, exc_type, exc, tb) -> bool:
        ...
