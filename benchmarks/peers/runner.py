"""The peer benchmark's runs in order: a warm-up, the side-by-side repeats, the own-cost repeats.

Every case is warmed up once, then each repeat runs every case on every image, the order of the
cases reversed every other repeat, so drift on a shared machine hits every case alike. After the
table, the three cases that decide the node's own cost run back to back many more times.
"""

from __future__ import annotations

from .cases import CACHING_OFF, CACHING_OFF_FULL_TEXT, UNCACHED, WARMUP_IMAGE, PeerCase
from .rows import summarize
from .sample import run_case
from devkit.comfy_harness import ComfyServer

# The node's own cost is a margin of 1%: no single repeat shows it on a CPU whose runs vary by a few
# percent, but the median of many tightly interleaved pairs does (spread.median_interval).
OWN_COST_PAIRS = 30


def measure(server: ComfyServer, cases: list[PeerCase], images, repeats: int, decode, progress=print) -> list[dict]:
    """Every case on every image, ``repeats`` times in alternating order; one summary row per case (``decode``:
    one decoder, or one per model file name: ``rows.decoder``)."""
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        raise ValueError(f"case names must be unique: {names}")
    times = {c.name: [] for c in cases}
    samples = {c.name: {} for c in cases}   # image -> its samples, one per repeat
    progress(f"Warming up {len(cases)} cases ...")
    for c in cases:
        run_case(server, c, WARMUP_IMAGE)
    for rep in range(repeats):
        progress(f"Repeat {rep + 1}/{repeats} ...")
        order = cases if rep % 2 == 0 else cases[::-1]
        for image in images:
            for c in order:
                sample = run_case(server, c, image)
                times[c.name].append(sample.seconds)
                samples[c.name].setdefault(tuple(image), []).append(sample)
    return summarize(cases, times, samples, decode)


def own_cost_cases(cases: list[PeerCase], regime: str) -> list[PeerCase]:
    """No node, the node caching nothing, and the same with the text path on every call."""
    methods = (UNCACHED, CACHING_OFF, CACHING_OFF_FULL_TEXT)
    return [next(c for c in cases if c.regime == regime and c.method == m) for m in methods]


def measure_own_cost(server: ComfyServer, cases: list[PeerCase], images, pairs: int, progress=print) -> dict:
    """Per regime: the three cases of ``own_cost_cases`` back to back, ``pairs`` times (order reversed every
    other time, the images taken in turn), so each repeat's times are seconds apart and the node's
    own cost is read from the median of per-repeat ratios. Cases already warmed up by ``measure``."""
    result = {}
    for regime in dict.fromkeys(c.regime for c in cases):
        trio = own_cost_cases(cases, regime)
        progress(f"The node's own cost, {regime}: {pairs} interleaved repeats of {len(trio)} cases ...")
        times = {c.method: [] for c in trio}
        for rep in range(pairs):
            for c in (trio if rep % 2 == 0 else trio[::-1]):
                times[c.method].append(run_case(server, c, images[rep % len(images)]).seconds)
        result[regime] = {"pairs": pairs, "times": times}
    return result
