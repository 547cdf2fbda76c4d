"""Which model calls a step cache may serve: each call mapped to its step and CFG stream.

A step cache counts *calls*. With ``has_separate_cfg`` cache-dit assumes calls alternate between
two streams (cond/uncond) and keeps a residual cache per stream; without it, one call per step.
ComfyUI decides at run time whether cond and uncond are batched, split, or absent (CFG 1), and
some samplers call the model more than once per step. So each call is mapped to (step, stream)
and only calls that fit the current layout are served; the others ("extra") are computed in
full around the cache. When the layout itself changes (a new batch layout, a skipped step), a
fresh cache context starts at that step, so one stream's state is never served to another.
"""

from __future__ import annotations

import dataclasses
import logging

logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class StreamKey:
    """What makes two calls share a cache: the same branches in the same batch order and shapes."""

    branches: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]


@dataclasses.dataclass
class CallLayout:
    """The call pattern one cache context was configured for.

    ``streams`` holds one key per call the cache expects in each step: one for CFG 1 or batched
    cond+uncond, two (in arrival order) when cond and uncond are separate calls. ``None`` marks a
    second stream not yet seen.
    """

    mode: str                              # "none", "batched" or "split"
    streams: list[StreamKey | None]
    start_step: int
    next_step: int = 0
    next_slot: int = 0

    def __post_init__(self):
        self.next_step = self.start_step

    @property
    def separate_cfg(self) -> bool:
        return len(self.streams) == 2

    def classify(self, step: int, key: StreamKey) -> str:
        """"serve" (the call the cache expects next), "extra" (ignore it), or "mismatch" (layout broke)."""
        if step < self.next_step or (step == self.next_step and key in self.streams[:self.next_slot]):
            return "extra"  # a further call in a step whose streams were all served already
        if step > self.next_step:
            return "mismatch"  # a step had no call, or its second stream never came
        expected = self.streams[self.next_slot]
        if expected == key or (expected is None and key != self.streams[0]):
            return "serve"
        if self.next_slot > 0:
            return "extra"  # a third stream in this step (e.g. an area cond): compute it in full
        return "mismatch"

    def advance(self, key: StreamKey):
        if self.streams[self.next_slot] is None:
            self.streams[self.next_slot] = key
        self.next_slot += 1
        if self.next_slot == len(self.streams):
            self.next_step, self.next_slot = self.next_step + 1, 0


def cfg_mode(branches: tuple[int, ...], conds_per_step: int) -> str:
    """"split" when this call leaves conds of the step to further calls, else "batched" or "none".

    Branches are indices into the guider's conds (cond/uncond for CFG; up to three for dual CFG
    or perp-neg); several in one call are one batched stream.
    """
    if len(set(branches)) < conds_per_step:
        return "split"
    return "batched" if len(set(branches)) > 1 else "none"


@dataclasses.dataclass(frozen=True)
class Route:
    """The router's verdict on one call."""

    routed: bool                            # one of the step's streams: the method decides it (else extra)
    new_context: CallLayout | None = None   # a fresh context starts at this call, configured for this layout


EXTRA = Route(False)
IN_LAYOUT = Route(True)


class CallRouter:
    """Routes a run's calls: decided by the method in the current layout, or extra.

    It only tells: a verdict that starts a fresh context (the first call, or a layout change) carries
    its layout, and the run starts that context before the call is decided.
    """

    def __init__(self, conds_per_step: int, node_name: str):
        self.conds_per_step = int(conds_per_step)   # conds the guider evaluates per step (1: no uncond pass)
        self.node_name = node_name
        self.layout: CallLayout | None = None
        self.first_layout: CallLayout | None = None
        self.context_starts: list[int] = []
        self._single_stream_seen = self.conds_per_step < 2

    @property
    def contexts(self) -> int:
        return len(self.context_starts)

    def route(self, step: int, key: StreamKey) -> Route:
        """Whether the method decides this call (not routed: an extra call, computed in full around it)."""
        if self.layout is not None:
            verdict = self.layout.classify(step, key)
            if verdict == "extra":
                return EXTRA
            if verdict == "serve":
                self.layout.advance(key)
                return IN_LAYOUT
            if self.layout.separate_cfg and self.layout.next_slot == 1:
                # The second stream never came: treat the rest of the run as one call per step.
                self._single_stream_seen = True
        layout = self._start_context(step, key)
        layout.advance(key)
        return Route(True, layout)

    def _start_context(self, step: int, key: StreamKey) -> CallLayout:
        mode = cfg_mode(key.branches, self.conds_per_step)
        split = mode == "split" and not self._single_stream_seen
        if mode == "split" and not split:
            mode = "none"
        self.layout = CallLayout(mode=mode, streams=[key, None] if split else [key], start_step=step)
        if self.first_layout is None:
            self.first_layout = self.layout
        else:
            logger.info("%s: call layout changed at step %d (%s); starting a fresh cache there.", self.node_name,
                        step, mode)
        self.context_starts.append(step)
        return self.layout
