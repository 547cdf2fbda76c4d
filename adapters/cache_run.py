"""cache-dit on one transformer for exactly one sampling run.

Data path: the node's OUTER_SAMPLE wrapper opens a ``CacheRun`` (enable
cache-dit), the DIFFUSION_MODEL wrapper sends every model call through
``CacheRun.model_call`` (route it), and the ``finally`` of the sampling run
closes it (disable cache-dit) and builds the record from the run's
``observation`` (``run_record.build``).

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
import threading
import types
from typing import Callable

import torch

from .cache_dit_logs import quiet_cache_dit
from .calibrators import calibrator_config
from .diagnostics import DecisionRules, StreamTrace
from .foreign_serves import ForeignServeWatch
from .observation import Call, CallTimer, RunObservation, exit_status
from .registry import KREA2_SCOPE, ResolvedTransformer
from .settings import RunPlan
from .step_clock import StepClock
from .text_path import TextPathReuse

# Told each block's true place before it runs: (index, total blocks, the block's keyword arguments).
BlockIndexTeller = Callable[[int, int, dict], None]

logger = logging.getLogger(__name__)


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


class CacheRun:
    """cache-dit enabled on ``target`` for one sampling run; use as a context manager."""

    parallel = None  # only a run on several devices (``MultiDeviceRun``) has a ParallelOutcome

    def __init__(self, target: ResolvedTransformer, plan: RunPlan, clock: StepClock, conds_per_step: int,
                 host=None, tell_block_index: BlockIndexTeller | None = None, text_reuse_off: str | None = None,
                 log_name: str = KREA2_SCOPE.node_name):
        self.target = target
        self.log_name = log_name  # the node the user placed, which this run's log lines speak for
        # The module the sampler calls (the transformer, or a module around it); calls into any
        # other module (e.g. a copy on another GPU) are not this run's.
        self.host = host if host is not None else target.module
        self.plan = plan
        self.clock = clock
        # How many conds the guider evaluates per step (1 without an uncond pass).
        self.conds_per_step = int(conds_per_step)
        # While cache-dit runs, the model's own loop sees one wrapper (index 0 of 1), not the blocks
        # inside it: the host may want each block told its true place (e.g. for attention patches).
        self._tell_block_index = tell_block_index
        self.layout: CallLayout | None = None
        self.first_layout: CallLayout | None = None
        self.contexts = 0
        self.calls: list[Call] = []
        self.observation: RunObservation | None = None
        self._single_stream_seen = self.conds_per_step < 2
        # Read once: while cache-dit runs, the module's block list is its single wrapper.
        self._original_blocks = target.blocks
        self.num_blocks = len(self._original_blocks)
        self._blocks_counted = 0
        self._hooks: list = []
        self._adapter = None   # cache-dit's BlockAdapter while the run is on
        self.warnings: list[str] = []   # the run's own; the plan's are the plan's
        # The first block only a computed call runs (a cached one skips to the Bn blocks), if any.
        middle = plan.settings.Fn_compute_blocks
        self._first_middle_block = middle if middle < self.num_blocks - plan.settings.Bn_compute_blocks else None
        # Diagnostics: one trace per (context, stream), fed by the block hooks while a call runs.
        self._traces: dict[tuple[int, StreamKey], StreamTrace] = {}
        self._context_starts: list[int] = []
        self._tracing: tuple[StreamTrace, int] | None = None
        self._fn_input: torch.Tensor | None = None
        self.foreign_serves = ForeignServeWatch()
        # The family's text path, computed once per batch of conds (None: the family has none).
        text_path = target.family.text_path
        self.text_path = TextPathReuse(target.module, text_path, off=text_reuse_off) if text_path else None

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> "CacheRun":
        import cache_dit

        with quiet_cache_dit():
            # Named, not found: cache-dit otherwise scans every attribute of the model for the list.
            adapter = cache_dit.BlockAdapter(
                transformer=self.target.module,
                blocks=self._original_blocks,
                blocks_name=self.target.family.blocks_attr,
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
        self._adapter = adapter
        self._install_block_hooks()
        if self.text_path is not None:
            self.text_path.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        import cache_dit

        try:
            if self.text_path is not None:
                self.text_path.__exit__(exc_type, exc, tb)
            for hook in self._hooks:
                hook.remove()
            self._hooks = []
            with quiet_cache_dit():
                # Through the adapter, which names the blocks: given the bare module, cache-dit
                # scans every attribute of the model for block lists, six times (milliseconds).
                cache_dit.disable_cache(self._adapter)
        finally:
            for trace in self._traces.values():
                trace.release()
            self.observation = self._observe(exit_status(exc_type))
        return False

    @property
    def observations(self) -> list[RunObservation]:
        """This run's observation, as the one device of a run (see ``MultiDeviceRun``); none before it ended."""
        return [self.observation] if self.observation is not None else []

    def _observe(self, status: str) -> RunObservation:
        layout = self.first_layout
        return RunObservation(
            status=status, num_blocks=self.num_blocks, module_id=id(self.host), calls=tuple(self.calls),
            cfg_mode=layout.mode if layout else None, has_separate_cfg=bool(layout and layout.separate_cfg),
            cache_contexts=self.contexts, traces=tuple(self.stream_traces()), warnings=tuple(self.warnings),
            text_path=self.text_path.counts() if self.text_path is not None else None)

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def model_call(self, sigma, branches, shapes, device=None, text=None):
        """Wrap one transformer call: route it through cache-dit or around it, and count its blocks.

        ``sigma`` may stay on the device: it is read only when the clock needs it, and for the
        record at the end of the run. ``text``: (identity, tensor) of the call's conditioning when
        the host vouches it is the same whenever the identity is (see ``text_path``), else None.
        """
        key = StreamKey(tuple(int(b) for b in branches), tuple(tuple(s) for s in shapes))
        if torch.is_tensor(sigma):
            sigma = sigma.detach()
        step = self.clock.step_of(sigma, key)
        # Once another cache answered a call, cache-dit's count of calls is off: route around it.
        served = not self.foreign_serves.seen and self._route(step, key)
        trace = self._trace_for(key) if served else None
        self._blocks_counted = 0
        self._tracing, self._fn_input = ((trace, step) if trace else None), None
        timer = CallTimer(device)
        text_call = self.text_path.call(*text) if self.text_path is not None and text else contextlib.nullcontext()
        try:
            with text_call, (contextlib.nullcontext() if served else self.uncached()):
                yield served
        finally:
            self._tracing, self._fn_input = None, None
        timer.stop()
        # Cached only when cache-dit served it: it always runs the first Fn blocks itself.
        cached = served and 0 < self._blocks_counted < self.num_blocks
        if self.foreign_serves.observe(step, served, self._blocks_counted) and self.foreign_serves.calls == 1:
            self.warnings.append(self.foreign_serves.warning())
        if trace is not None:
            trace.finish(step, cached)
        self.calls.append(Call(step, key.branches, key, served, cached, self._blocks_counted, sigma, timer,
                               threading.current_thread().name))

    def warn_once(self, warning: str):
        if warning not in self.warnings:
            self.warnings.append(warning)

    @contextlib.contextmanager
    def uncached(self):
        """Run a call with the original blocks and forward, outside cache-dit's state.

        cache-dit replaced the module's block list with its wrapper and patched ``forward`` on
        the instance: both are swapped back for the call and restored after it.
        """
        module, blocks_attr = self.target.module, self.target.family.blocks_attr
        cached_blocks = getattr(module, blocks_attr)
        patched_forward = module.__dict__.get("forward")
        setattr(module, blocks_attr, self._original_blocks)
        module.forward = types.MethodType(type(module).forward, module)
        try:
            yield
        finally:
            setattr(module, blocks_attr, cached_blocks)
            if patched_forward is None:
                del module.forward
            else:
                module.forward = patched_forward

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
            logger.info("%s: call layout changed at step %d (%s); starting a fresh cache there.", self.log_name,
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
        self._blocks_counted += 1  # what really ran
        if self._tell_block_index is not None:
            self._tell_block_index(index, self.num_blocks, kwargs)
        if self._tracing is not None:
            if index == 0:
                self._fn_input = args[0] if args else kwargs.get("hidden_states")
            elif index == self._first_middle_block:
                trace, step = self._tracing
                trace.computing(step)  # known to compute: drop the old reference before the middle blocks
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

    # --- what the run saw -----------------------------------------------------------
    def stream_traces(self) -> list[tuple[StreamTrace, DecisionRules]]:
        """Each stream's trace with the rules of its context (what the advisor replays)."""
        rules = self._context_rules()
        return [(trace, rules[trace.context]) for trace in self._traces.values()]

    def _context_rules(self) -> list[DecisionRules]:
        return [DecisionRules.for_context(self.plan.settings, self.plan.mask_from(start), start)
                for start in self._context_starts]
