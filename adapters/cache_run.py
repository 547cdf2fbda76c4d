"""cache-dit on one transformer for exactly one sampling run.

Data path: the node's OUTER_SAMPLE wrapper opens a ``CacheRun`` (enable
cache-dit), the DIFFUSION_MODEL wrapper sends every model call through
``CacheRun.model_call`` (route it), and the ``finally`` of the sampling run
closes it (disable cache-dit, publish the stats).

Why routing is needed: cache-dit counts *calls*. With ``has_separate_cfg`` it
assumes calls alternate between two streams (cond/uncond) and keeps a residual
cache per stream; without it, it assumes one call per step. ComfyUI decides at
run time whether cond and uncond are batched, split, or absent (CFG 1), and
some samplers call the model more than once per step. So each call is mapped
to (step, stream) and only calls that fit the context's layout reach
cache-dit; the others are computed in full with the original blocks, which
never touches cache-dit's state. When the layout itself changes (a new batch
layout, a skipped step), a fresh cache context starts at that step, so a cond
residual is never served to an uncond call or the reverse.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import types
import unittest.mock

import torch

from .calibrators import calibrator_config
from .diagnostics import DecisionRules, StreamTrace, estimate_uncached_seconds, suggest_thresholds
from .registry import ResolvedTransformer
from .settings import RunPlan
from .step_cache_conflicts import ForeignServeWatch
from .stats import CallOutcome, RunRecord, summarize_steps
from .step_clock import StepClock, sigma_value

logger = logging.getLogger(__name__)


@contextlib.contextmanager
def quiet_cache_dit():
    """Silence cache-dit's per-call info and warnings (e.g. on every disable_cache)."""
    loggers = [logging.getLogger(name) for name in list(logging.Logger.manager.loggerDict)
               if name.startswith("cache_dit") or name == "CACHE_DIT"]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


@dataclasses.dataclass(frozen=True)
class StreamKey:
    """What makes two calls share a residual cache: the same branches in the same batch order and shapes."""

    branches: tuple[int, ...]
    shapes: tuple[tuple[int, ...], ...]


@dataclasses.dataclass
class CallLayout:
    """The call pattern one cache-dit context was configured for.

    ``streams`` holds one key per call that cache-dit expects in each step: one
    for CFG 1 or batched cond+uncond, two (in arrival order) when cond and uncond
    are separate calls. ``None`` marks a second stream not yet seen.
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
        """"serve" (the call cache-dit expects next), "extra" (ignore it), or "mismatch" (layout broke)."""
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


def _cfg_mode(branches: tuple[int, ...], conds_per_step: int) -> str:
    """"split" when this call leaves conds of the step to further calls, else "batched" or "none".

    Branches are indices into the guider's conds (cond/uncond for CFG; up to three for dual CFG
    or perp-neg); several in one call are one batched stream.
    """
    if len(set(branches)) < conds_per_step:
        return "split"
    return "batched" if len(set(branches)) > 1 else "none"


class CallTimer:
    """Wall time of one model call: CUDA events on a GPU (no sync per call), else the CPU clock."""

    def __init__(self, device):
        self._cuda = device is not None and torch.device(device).type == "cuda"
        if self._cuda:
            self._start, self._end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            self._start.record()
        else:
            self._begun, self._seconds = time.perf_counter(), 0.0

    def stop(self):
        if self._cuda:
            self._end.record()
        else:
            self._seconds = time.perf_counter() - self._begun

    def seconds(self) -> float:
        if self._cuda:
            self._end.synchronize()
            return self._start.elapsed_time(self._end) / 1000.0
        return self._seconds


class CacheRun:
    """cache-dit enabled on ``target`` for one sampling run; use as a context manager."""

    def __init__(self, target: ResolvedTransformer, plan: RunPlan, clock: StepClock, cfg: float,
                 conds_per_step: int, node_id: str = "", prompt_id: str = "", guidance: dict | None = None,
                 host=None):
        self.target = target
        # The module the sampler calls (the transformer, or a module around it); calls into any
        # other module (e.g. a copy on another GPU) are not this run's.
        self.host = host if host is not None else target.module
        self.plan = plan
        self.clock = clock
        self.cfg = float(cfg)
        self.guidance = dict(guidance or {})
        # How many conds the guider evaluates per step (1 without an uncond pass).
        self.conds_per_step = int(conds_per_step)
        self.node_id = node_id
        self.prompt_id = prompt_id
        self.layout: CallLayout | None = None
        self.first_layout: CallLayout | None = None
        self.contexts = 0
        self.outcomes: list[CallOutcome] = []
        self.record: RunRecord | None = None
        self._single_stream_seen = self.conds_per_step < 2
        # Read once: while cache-dit runs, the module's block list is its single wrapper.
        self._original_blocks = target.blocks
        self.num_blocks = len(self._original_blocks)
        self._blocks_counted = 0
        self._hooks: list = []
        self._started = 0.0
        self._warnings = list(plan.warnings)
        # Diagnostics: one trace per (context, stream), fed by the block hooks while a call runs.
        self._traces: dict[tuple[int, StreamKey], StreamTrace] = {}
        self._context_starts: list[int] = []
        self._tracing: tuple[StreamTrace, int] | None = None
        self._fn_input: torch.Tensor | None = None
        self._timings: list[tuple[StreamKey, bool, bool, CallTimer]] = []
        self.foreign_serves = ForeignServeWatch()

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> "CacheRun":
        import cache_dit

        self._started = time.perf_counter()
        with quiet_cache_dit():
            adapter = cache_dit.BlockAdapter(
                transformer=self.target.module,
                blocks=self._original_blocks,
                forward_pattern=getattr(cache_dit.ForwardPattern, self.target.family.forward_pattern),
                check_forward_pattern=self.target.family.check_forward_pattern,
                has_separate_cfg=False,  # the real value goes into each context's DBCacheConfig
            )
            if getattr(self.target.module, "_is_cached", False):
                # A cached module silently ignores a new config: start from the plain module.
                cache_dit.disable_cache(self.target.module)
            try:
                cache_dit.enable_cache(adapter, **self._cache_configs(start_step=0, separate_cfg=False))
            except Exception:
                cache_dit.disable_cache(self.target.module)  # never leave a half-patched shared module
                raise
        self._install_block_hooks()
        return self

    def __exit__(self, exc_type, exc, tb):
        import cache_dit

        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        with quiet_cache_dit():
            cache_dit.disable_cache(self.target.module)
        status = "ok" if exc_type is None else ("interrupted" if "Interrupt" in exc_type.__name__ else "error")
        duration = time.perf_counter() - self._started
        self.record = self._make_record(status, duration)
        for trace in self._traces.values():
            trace.release()
        return False

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None):
        """Wrap one transformer call: route it through cache-dit or around it, and count its blocks."""
        key = StreamKey(tuple(int(b) for b in branches), tuple(tuple(s) for s in shapes))
        sigma = sigma_value(sigma)
        step = self.clock.step_of(sigma, key)
        # Once another cache answered a call, cache-dit's count of calls is off: route around it.
        served = not self.foreign_serves.seen and self._route(step, key)
        trace = self._trace_for(key) if served else None
        self._blocks_counted = 0
        self._tracing, self._fn_input = ((trace, step) if trace else None), None
        timer = CallTimer(device)
        try:
            with (contextlib.nullcontext() if served else self.uncached()):
                yield served
        finally:
            self._tracing, self._fn_input = None, None
        timer.stop()
        # Cached only when cache-dit served it: it always runs the first Fn blocks itself.
        cached = served and 0 < self._blocks_counted < self.num_blocks
        if self.foreign_serves.observe(step, served, self._blocks_counted) and self.foreign_serves.calls == 1:
            self._warnings.append(self.foreign_serves.warning())
        if trace is not None:
            trace.finish(step, cached)
        self._timings.append((key, served, cached, timer))
        self.outcomes.append(CallOutcome(step, key.branches, served, self._blocks_counted, self.num_blocks,
                                         sigma=round(sigma, 6)))

    @contextlib.contextmanager
    def uncached(self):
        """Run a call with the original blocks and forward, outside cache-dit's state."""
        module = self.target.module
        plain_forward = types.MethodType(type(module).forward, module)
        with unittest.mock.patch.object(module, self.target.family.blocks_attr, self._original_blocks), \
                unittest.mock.patch.object(module, "forward", plain_forward):
            yield

    def _route(self, step: int, key: StreamKey) -> bool:
        if self.layout is not None:
            verdict = self.layout.classify(step, key)
            if verdict == "extra":
                return False
            if verdict == "serve":
                self.layout.advance(key)
                return True
            if self.layout.separate_cfg and self.layout.next_slot == 1:
                # The second stream never came: treat the rest of the run as one call per step.
                self._single_stream_seen = True
        self._start_context(step, key)
        self.layout.advance(key)
        return True

    def _start_context(self, step: int, key: StreamKey):
        """A fresh cache context from ``step`` on, configured for the layout of this call."""
        import cache_dit

        mode = _cfg_mode(key.branches, self.conds_per_step)
        split = mode == "split" and not self._single_stream_seen
        if mode == "split" and not split:
            mode = "none"
        self.layout = CallLayout(mode=mode, streams=[key, None] if split else [key], start_step=step)
        if self.first_layout is None:
            self.first_layout = self.layout
        else:
            logger.info("Krea-2 Cache-DiT: call layout changed at step %d (%s); starting a fresh cache there.",
                        step, mode)
        self.contexts += 1
        self._context_starts.append(step)
        with quiet_cache_dit():
            cache_dit.refresh_context(self.target.module, **self._cache_configs(step, split))

    def _trace_for(self, key: StreamKey) -> StreamTrace:
        trace_key = (self.contexts, key)
        if trace_key not in self._traces:
            self._traces[trace_key] = StreamTrace(key.branches, self.contexts - 1, self._context_starts[-1])
        return self._traces[trace_key]

    def _cache_configs(self, start_step: int, separate_cfg: bool) -> dict:
        import cache_dit

        configs = {"cache_config": cache_dit.DBCacheConfig(**self.plan.db_cache_kwargs(start_step, separate_cfg))}
        calibrator = calibrator_config(self.plan.settings)
        if calibrator is not None:
            configs["calibrator_config"] = calibrator
        return configs

    # --- block hooks --------------------------------------------------------------
    def _install_block_hooks(self):
        blocks = self._original_blocks
        for index, block in enumerate(blocks):
            self._hooks.append(block.register_forward_pre_hook(
                functools.partial(self._before_block, index), with_kwargs=True))
        last_fn = blocks[self.plan.settings.Fn_compute_blocks - 1]
        self._hooks.append(last_fn.register_forward_hook(self._after_fn_blocks))

    @torch.compiler.disable
    def _before_block(self, index, module, args, kwargs):
        # Count what really ran, and tell the block its true place in the model: while cache-dit
        # runs, the model's own loop sees one wrapper (index 0 of 1), not the blocks inside it.
        self._blocks_counted += 1
        option_name = self.target.family.block_options_kwarg
        options = kwargs.get(option_name) if option_name else None
        if isinstance(options, dict):
            options["block_index"] = index
            options["total_blocks"] = self.num_blocks
        if index == 0 and self._tracing is not None:
            self._fn_input = args[0] if args else kwargs.get("hidden_states")
        return None

    @torch.compiler.disable
    def _after_fn_blocks(self, module, args, output):
        if self._tracing is None or self._fn_input is None:
            return None
        hidden = output if torch.is_tensor(output) else output[0]
        trace, step = self._tracing
        trace.observe(step, hidden - self._fn_input)
        self._fn_input = None
        return None

    # --- stats --------------------------------------------------------------------
    def stream_traces(self) -> list[tuple[StreamTrace, DecisionRules]]:
        """Each stream's trace with the rules of its context (what the advisor replays)."""
        rules = self._context_rules()
        return [(trace, rules[trace.context]) for trace in self._traces.values()]

    def _context_rules(self) -> list[DecisionRules]:
        return [DecisionRules.for_context(self.plan.settings, self.plan.mask_from(start), start)
                for start in self._context_starts]

    def _diagnostics(self, states: list[str]) -> dict:
        steps = self.clock.steps
        diffs: list[float | None] = [None] * steps
        reasons: list[str | None] = [None] * steps
        streams, advisor_input = [], self.stream_traces()
        for trace, rules in advisor_input:
            measured = trace.measured_diffs()
            order = sorted(trace.cached)
            why = rules.explain(order, trace.cached)
            for step in order:
                value = measured.get(step)
                if value is not None and (diffs[step] is None or value > diffs[step]):
                    diffs[step] = value
                # A step's reason is that of a stream whose outcome is the step's outcome.
                if reasons[step] is None or (states[step] != "cached" and not trace.cached[step]):
                    reasons[step] = why[step]
            streams.append({"branches": list(trace.branches), "context": trace.context,
                            "start_step": trace.start_step,
                            "residual_diffs": [_round(measured.get(s)) for s in order], "steps": order,
                            "cached_steps": [s for s in order if trace.cached[s]],
                            "step_reasons": [why[s] for s in order]})
        return {"residual_diffs": [_round(d) for d in diffs], "step_reasons": reasons,
                "streams": streams, "threshold_suggestions": suggest_thresholds(advisor_input)}

    def _make_record(self, status: str, duration: float) -> RunRecord:
        states, cached, partial = summarize_steps(self.outcomes, self.clock.steps)
        layout = self.first_layout
        settings = dataclasses.asdict(self.plan.settings)
        diagnostics = self._diagnostics(states)
        calls = [(key, served, was_cached, timer.seconds()) for key, served, was_cached, timer in self._timings]
        estimate = estimate_uncached_seconds(duration, calls)
        return RunRecord(
            node_id=str(self.node_id), prompt_id=str(self.prompt_id), model=self.target.family.name,
            steps_mask=self.plan.settings.steps_mask, mask=list(self.plan.mask) if self.plan.mask else None,
            steps=self.clock.steps, sigmas=[round(v, 6) for v in self.clock.sigmas],
            cfg=self.cfg, guidance=self.guidance, cfg_mode=layout.mode if layout else None,
            has_separate_cfg=bool(layout and layout.separate_cfg), settings=settings,
            cached_steps=cached, partial_steps=partial, step_states=states,
            calls=len(self.outcomes), extra_calls=sum(not o.served_by_cache_dit for o in self.outcomes),
            cache_contexts=self.contexts,
            call_log=[[o.step, list(o.branches), o.served_by_cache_dit, o.blocks_run, o.sigma] for o in self.outcomes],
            block_evals=sum(o.blocks_run for o in self.outcomes),
            block_evals_uncached=len(self.outcomes) * self.num_blocks,
            status=status, warnings=list(self._warnings),
            duration_s=round(duration, 4),
            estimated_uncached_s=round(estimate, 4),
            residual_diffs=diagnostics["residual_diffs"], step_reasons=diagnostics["step_reasons"],
            streams=diagnostics["streams"], threshold_suggestions=diagnostics["threshold_suggestions"],
        )


def _round(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else round(value, digits)
