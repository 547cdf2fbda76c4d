"""Calls answered by something else than the model: another step cache on the call path.

cache-dit always runs the first ``Fn`` blocks of a call it serves, so a served call
whose transformer blocks never ran was answered by something between the call and the
model (another step cache the pack could not see before the run). From then on
cache-dit's count of calls is off, so the rest of the run goes around it.
"""

from __future__ import annotations


class ForeignServeWatch:
    """Notices calls cache-dit served whose blocks never ran: another cache answered them."""

    def __init__(self):
        self.first_step: int | None = None
        self.calls = 0

    @property
    def seen(self) -> bool:
        return self.first_step is not None

    def observe(self, step: int, served: bool, blocks_run: int) -> bool:
        """Record one call; True when something other than the model answered it."""
        if not served or blocks_run > 0:
            return False
        if self.first_step is None:
            self.first_step = step
        self.calls += 1
        return True

    def warning(self) -> str | None:
        if not self.seen:
            return None
        return (f"From step {self.first_step} on, model calls returned without running a transformer "
                f"block: another step cache on this model's call path answered them, so from then on this run "
                f"was not cached and its cached steps count only what cache-dit served. Use one step cache: "
                f"bypass the other cache node or this node.")
