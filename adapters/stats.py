"""What a sampling run cached: the record shared by the log, the HTTP route and the UI."""

from __future__ import annotations

import collections
import dataclasses
import threading

from .calibrators import calibrator_summary
from .strict_json import finite_or_null, replaced_warning


@dataclasses.dataclass
class CallOutcome:
    step: int
    branches: tuple[int, ...]   # cond_or_uncond of the call (0 = cond, 1 = uncond)
    served_by_cache_dit: bool   # False: an extra call in a step, computed in full outside the cache
    blocks_run: int             # transformer blocks actually evaluated in this call
    blocks_total: int           # blocks in the model
    sigma: float = 0.0          # the sigma the sampler called the model at

    @property
    def cached(self) -> bool:
        # cache-dit always runs the first Fn blocks: a served call that ran none was answered elsewhere.
        return self.served_by_cache_dit and 0 < self.blocks_run < self.blocks_total


@dataclasses.dataclass
class RunRecord:
    node_id: str
    prompt_id: str
    model: str
    steps_mask: str
    mask: list[int] | None        # the step mask built for this run (1 = compute), None without one
    steps: int
    sigmas: list                  # the run's sigma schedule (steps + 1 values)
    cfg: float
    guidance: dict                # the guider and the scales it really uses (e.g. cfg1/cfg2 of dual CFG)
    cfg_mode: str | None          # "none", "batched" or "split"; None when no model call was made
    has_separate_cfg: bool
    settings: dict
    cached_steps: list[int]
    partial_steps: list[int]
    step_states: list[str]
    calls: int
    extra_calls: int
    cache_contexts: int           # > 1 when the call layout changed mid-run and a fresh context started
    block_evals: int
    block_evals_uncached: int
    call_log: list[list]          # per call: [step, branches, served_by_cache_dit, blocks_run, sigma]
    status: str                   # "ok", "interrupted", "error", or "skipped" (left uncached, see warnings)
    warnings: list[str]
    duration_s: float
    estimated_uncached_s: float   # the same run had nothing been cached, from its own call timings
    residual_diffs: list          # per step: relative Fn residual change vs the last computed step (max over streams)
    step_reasons: list            # per step: why it was computed or cached (warmup, mask, threshold, ...)
    streams: list                 # per stream and context: its diffs, cached steps and reasons
    threshold_suggestions: list   # [{"threshold", "range", "cached_steps"}], by threshold
    # Who asked for the run, filled in where it is published: the client (websocket id) that
    # queued the prompt and the id of the editor workflow it came from; None when unknown.
    client_id: str | None = None
    workflow_id: str | None = None
    # Multi-device runs: one summary per device (calls, threads, cached steps, its own CFG mode),
    # and the block evaluations of the busiest device per step [with the cache, without], which the
    # wall time follows when the devices run side by side. Empty / None on one device.
    devices: list = dataclasses.field(default_factory=list)
    parallel_block_evals: list | None = None

    @property
    def estimated_speedup(self) -> float:
        return self.estimated_uncached_s / self.duration_s if self.duration_s > 0 else 1.0

    @property
    def estimated_saved_s(self) -> float:
        return max(self.estimated_uncached_s - self.duration_s, 0.0)

    @property
    def blocks_saved(self) -> float:
        if not self.block_evals_uncached:
            return 0.0
        return 1.0 - self.block_evals / self.block_evals_uncached

    @property
    def ideal_speedup(self) -> float:
        """Block evaluations without the cache over those with it (on the busiest device of each step)."""
        with_cache, without = self.parallel_block_evals or (self.block_evals, self.block_evals_uncached)
        return without / with_cache if with_cache else 1.0

    @property
    def device_count(self) -> int:
        return max(1, len(self.devices))

    @property
    def calibrator(self) -> dict | None:
        """The calibrator that ran and the parameters it read (None for a run left uncached)."""
        return calibrator_summary(self.settings, self.streams)

    def as_dict(self) -> dict:
        """The record as strict JSON data: a non-finite number becomes None, with a warning saying where."""
        data = dataclasses.asdict(self)
        data["blocks_saved"] = round(self.blocks_saved, 4)
        data["ideal_speedup"] = round(self.ideal_speedup, 4)
        data["estimated_speedup"] = round(self.estimated_speedup, 4)
        data["estimated_saved_s"] = round(self.estimated_saved_s, 4)
        data["calibrator"] = self.calibrator
        data["device_count"] = self.device_count
        data, replaced = finite_or_null(data)
        if replaced:
            data["warnings"].append(replaced_warning(replaced))
        return data

    def log_line(self) -> str:
        return (f"Krea-2 Cache-DiT [node {self.node_id or '?'}]: cached steps {len(self.cached_steps)}/{self.steps}"
                f"{f' (+{len(self.partial_steps)} partial)' if self.partial_steps else ''}, "
                f"block evaluations saved {self.block_evals_uncached - self.block_evals}/{self.block_evals_uncached} "
                f"({self.blocks_saved:.0%}), CFG {self.cfg:g} mode {self.cfg_mode or 'n/a (no model call)'}, "
                f"has_separate_cfg={self.has_separate_cfg}, calibrator {_calibrator_text(self.calibrator)}, "
                f"{f'{self.device_count} devices, ' if self.device_count > 1 else ''}"
                f"~{self.estimated_speedup:.2f}x, {self.estimated_saved_s:.2f} s saved (estimated)"
                f"{'' if self.status == 'ok' else f', run {self.status}'}")


def _calibrator_text(calibrator: dict | None) -> str:
    if not calibrator:
        return "none"
    parameters = [f"{key}={value}" for key, value in calibrator.items() if key != "name"]
    return calibrator["name"] + (f" ({', '.join(parameters)})" if parameters else "")


def skipped_record(node_id: str, prompt_id: str, steps: int, cfg: float, guidance: dict, reason: str) -> RunRecord:
    """The record of a run the pack left uncached on purpose, saying why."""
    return RunRecord(
        node_id=str(node_id), prompt_id=str(prompt_id), model="", steps_mask="none", mask=None, steps=steps,
        sigmas=[],
        cfg=cfg, guidance=guidance, cfg_mode=None, has_separate_cfg=False, settings={}, cached_steps=[],
        partial_steps=[], step_states=["uncached"] * steps, calls=0, extra_calls=0, cache_contexts=0,
        block_evals=0, block_evals_uncached=0, call_log=[], status="skipped", warnings=[reason],
        duration_s=0.0, estimated_uncached_s=0.0, residual_diffs=[None] * steps, step_reasons=["skipped"] * steps,
        streams=[], threshold_suggestions=[])


def summarize_steps(outcomes: list[CallOutcome], steps: int) -> tuple[list[str], list[int], list[int]]:
    """Per-step state from the calls cache-dit served: all cached, some, or none."""
    served: dict[int, list[bool]] = collections.defaultdict(list)
    for outcome in outcomes:
        if outcome.served_by_cache_dit:
            served[outcome.step].append(outcome.cached)
    states = []
    for step in range(steps):
        flags = served.get(step, [])
        if flags and all(flags):
            states.append("cached")
        elif any(flags):
            states.append("partial")
        else:
            states.append("computed")
    cached = [i for i, s in enumerate(states) if s == "cached"]
    partial = [i for i, s in enumerate(states) if s == "partial"]
    return states, cached, partial


class RecentRuns:
    """The last runs' records, newest last; shared between the sampler and the web server threads."""

    def __init__(self, limit: int = 50):
        self._records: collections.deque[dict] = collections.deque(maxlen=limit)
        self._lock = threading.Lock()

    def add(self, record: RunRecord) -> dict:
        data = record.as_dict()
        with self._lock:
            self._records.append(data)
        return data

    def all(self) -> list[dict]:
        with self._lock:
            return list(self._records)


RECENT_RUNS = RecentRuns()
