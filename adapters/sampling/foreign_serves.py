"""Calls answered by something else than the model: another step cache on the call path.

cache-dit always runs the first ``Fn`` blocks of a call it serves, and whole-call forecasting
always runs the model's final layer, so a served call where that part never ran was answered by
something between the call and the model (another step cache the pack could not see before the
run). From then on the run's count of calls is off, so the rest of the run goes around it.
"""

from __future__ import annotations


class ForeignServeWatch:
    """Notices served calls whose always-run part (``evidence``) never ran: another cache answered them."""

    def __init__(self, evidence: str = "a transformer block"):
        self.evidence = evidence
        self.first_step: int | None = None
        self.calls = 0

    @property
    def seen(self) -> bool:
        return self.first_step is not None

    def observe(self, step: int, served: bool, evidence_ran: int) -> bool:
        """Record one call (``evidence_ran``: how often its always-run part ran); True when something other
        than the model answered it."""
        if not served or evidence_ran > 0:
            return False
        if self.first_step is None:
            self.first_step = step
        self.calls += 1
        return True

    def warning(self) -> str | None:
        if not self.seen:
            return None
        return (f"From step {self.first_step} on, model calls returned without running {self.evidence}: "
                f"another step cache on this model's call path answered them, so from then on this run "
                f"was not cached and its cached steps count only what this node served. Use one step cache: "
                f"bypass the other cache node or this node.")
