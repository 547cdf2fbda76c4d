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

# Told each block's true place before it runs: (index, blocks in its list, the block's keyword
# arguments, the list's block type or None).
BlockIndexTeller = Callable[[int, int, dict, "str | None"], None]

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
        # Read once: while cache-dit runs, each block list of the module is its single wrapper.
        # Several lists (Flux: double, then single blocks) each get their own cache-dit context.
        self._lists = target.family.block_lists
        self._original_lists = target.block_lists
        self._sizes = [len(blocks) for blocks in self._original_lists]
        self.num_blocks = sum(self._sizes)
        self._blocks_counted = [0] * len(self._lists)   # per list, in the current call
        self._hooks: list = []
        self._adapter = None   # cache-dit's BlockAdapter while the run is on
        self._own_forward = None   # the instance's own forward before cache-dit patched it (see __enter__)
        self._wrappers: list[torch.nn.Module] = []   # cache-dit's wrapper of each list (several lists only)
        self.warnings: list[str] = []   # the run's own; the plan's are the plan's
        # Per list, the first block only a computed call runs (a cached one skips to the Bn blocks), if any.
        middle, last = plan.settings.Fn_compute_blocks, plan.settings.Bn_compute_blocks
        self._first_middle_block = [middle if middle < size - last else None for size in self._sizes]
        # Per list, the blocks whose input cache-dit keeps (the Fn, Mn and Bn blocks' first): blocks that
        # add into their input in place get a copy there on calls cache-dit serves.
        self._copy_input_at = [{0, middle, size - last} if blocks.adds_in_place else set()
                               for blocks, size in zip(self._lists, self._sizes)]
        self._serving = False
        # Diagnostics: one trace per (context, stream, list), fed by the block hooks while a call runs.
        self._traces: dict[tuple[int, StreamKey, int], StreamTrace] = {}
        self._context_starts: list[int] = []
        self._tracing: tuple[list[StreamTrace], int] | None = None
        self._fn_input: list[torch.Tensor | None] = [None] * len(self._lists)
        self.foreign_serves = ForeignServeWatch()
        # The family's text path, computed once per batch of conds (None: the family has none).
        text_path = target.family.text_path
        self.text_path = TextPathReuse(target.module, text_path, off=text_reuse_off) if text_path else None

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> "CacheRun":
        import cache_dit

        with quiet_cache_dit():
            # Named, not found: cache-dit otherwise scans every attribute of the model for the list.
            adapter = cache_dit.BlockAdapter(**self._adapter_lists(cache_dit),
                transformer=self.target.module,
                check_forward_pattern=self.target.family.check_forward_pattern,
                has_separate_cfg=False,  # the real value goes into each context's DBCacheConfig
            )
            if getattr(self.target.module, "_is_cached", False):
                # A cached module silently ignores a new config: start from the plain module.
                cache_dit.disable_cache(self.target.module)
            # What the instance's own ``forward`` was before cache-dit patched it (normally none):
            # ``disable_cache`` leaves a bound method there, which ties the module to itself in a cycle
            # that only a full garbage collection frees, so ``__exit__`` puts back what was here.
            self._own_forward = self.target.module.__dict__.get("forward")
            try:
                with self._capturing_wrappers():
                    cache_dit.enable_cache(adapter, **self._cache_configs(start_step=0, separate_cfg=False))
            except Exception:
                cache_dit.disable_cache(self.target.module)  # never leave a half-patched shared module
                self._restore_own_forward()
                raise
        self._adapter = adapter
        self._install_block_hooks()
        self._install_wrapper_hooks()
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
            self._restore_own_forward()
        finally:
            for trace in self._traces.values():
                trace.release()
            self.observation = self._observe(exit_status(exc_type))
        return False

    def _restore_own_forward(self):
        module = self.target.module
        if self._own_forward is None:
            module.__dict__.pop("forward", None)
        else:
            module.forward = self._own_forward

    def _adapter_lists(self, cache_dit) -> dict:
        """BlockAdapter's block arguments: one list as before, several as cache-dit's own Flux adapters."""
        patterns = [getattr(cache_dit.ForwardPattern, blocks.forward_pattern) for blocks in self._lists]
        if len(self._lists) == 1:
            return {"blocks": self._original_lists[0], "blocks_name": self._lists[0].attr,
                    "forward_pattern": patterns[0]}
        return {"blocks": list(self._original_lists), "blocks_name": [blocks.attr for blocks in self._lists],
                "forward_pattern": patterns}

    @contextlib.contextmanager
    def _capturing_wrappers(self):
        """Keep the wrappers cache-dit builds around each list (it keeps them to itself): a list whose
        blocks the model's loop calls with keywords needs a hook on its wrapper (``_install_wrapper_hooks``)."""
        if not any(blocks.hidden_kwargs for blocks in self._lists):
            yield
            return
        from unittest import mock

        from cache_dit.caching.cache_adapters.cache_adapter import CachedAdapter

        collect = CachedAdapter.collect_unified_blocks

        def collect_and_keep(block_adapter, contexts_kwargs):
            built = collect(block_adapter, contexts_kwargs)
            for per_transformer in built:
                self._wrappers.extend(wrapper for wrappers in per_transformer.values() for wrapper in wrappers)
            return built

        with mock.patch.object(CachedAdapter, "collect_unified_blocks", collect_and_keep):
            yield

    @property
    def observations(self) -> list[RunObservation]:
        """This run's observation, as the one device of a run (see ``MultiDeviceRun``); none before it ended."""
        return [self.observation] if self.observation is not None else []

    def _observe(self, status: str) -> RunObservation:
        layout = self.first_layout
        return RunObservation(
            status=status, num_blocks=self.num_blocks, module_id=id(self.host), calls=tuple(self.calls),
            block_lists=tuple(zip((b.attr for b in self._lists), self._sizes)) if len(self._lists) > 1 else (),
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
        traces = self._traces_for(key) if served else None
        self._blocks_counted = [0] * len(self._lists)
        self._tracing, self._fn_input = ((traces, step) if traces else None), [None] * len(self._lists)
        self._serving = served
        timer = CallTimer(device)
        text_call = self.text_path.call(*text) if self.text_path is not None and text else contextlib.nullcontext()
        try:
            with text_call, (contextlib.nullcontext() if served else self.uncached()):
                yield served
        finally:
            self._tracing, self._fn_input = None, [None] * len(self._lists)
            self._serving = False
        timer.stop()
        # A list is cached only when cache-dit served the call: it always runs the first Fn blocks itself.
        skipped = tuple(served and 0 < ran < size for ran, size in zip(self._blocks_counted, self._sizes))
        # The call is cached when every list skipped its middle blocks: a step reported cached then had
        # every list's change below the threshold (the diagnostics' view). A call where only some lists
        # skipped is counted per list (``list_cached``) and in ``blocks_run``, never as cached.
        cached = all(skipped)
        blocks_run = sum(self._blocks_counted)
        if self.foreign_serves.observe(step, served, blocks_run) and self.foreign_serves.calls == 1:
            self.warnings.append(self.foreign_serves.warning())
        for trace, list_skipped in zip(traces or (), skipped):
            trace.finish(step, list_skipped)
        self.calls.append(Call(step, key.branches, key, served, cached, blocks_run, sigma, timer,
                               threading.current_thread().name, skipped if len(self._lists) > 1 else ()))

    def warn_once(self, warning: str):
        if warning not in self.warnings:
            self.warnings.append(warning)

    @contextlib.contextmanager
    def uncached(self):
        """Run a call with the original blocks and forward, outside cache-dit's state.

        cache-dit replaced each of the module's block lists with its wrapper and patched ``forward``
        on the instance: all are swapped back for the call and restored after it.
        """
        module = self.target.module
        cached_lists = [getattr(module, blocks.attr) for blocks in self._lists]
        patched_forward = module.__dict__.get("forward")
        for blocks, original in zip(self._lists, self._original_lists):
            setattr(module, blocks.attr, original)
        module.forward = types.MethodType(type(module).forward, module)
        try:
            yield
        finally:
            for blocks, cached in zip(self._lists, cached_lists):
                setattr(module, blocks.attr, cached)
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

    def _traces_for(self, key: StreamKey) -> list[StreamTrace]:
        """The stream's trace in the current context, one per block list (each list is its own cache context)."""
        traces = []
        for position, blocks in enumerate(self._lists):
            trace_key = (self.contexts, key, position)
            if trace_key not in self._traces:
                self._traces[trace_key] = StreamTrace(key.branches, self.contexts - 1, self._context_starts[-1],
                                                      blocks=blocks.attr if len(self._lists) > 1 else None)
            traces.append(self._traces[trace_key])
        return traces

    def _cache_configs(self, start_step: int, separate_cfg: bool) -> dict:
        import cache_dit

        configs = {"cache_config": cache_dit.DBCacheConfig(**self.plan.db_cache_kwargs(start_step, separate_cfg))}
        calibrator = calibrator_config(self.plan.settings)
        if calibrator is not None:
            configs["calibrator_config"] = calibrator
        return configs

    # --- block hooks --------------------------------------------------------------
    def _install_block_hooks(self):
        for position, blocks in enumerate(self._original_lists):
            for index, block in enumerate(blocks):
                self._hooks.append(block.register_forward_pre_hook(
                    functools.partial(self._before_block, position, index), with_kwargs=True))
            last_fn = blocks[self.plan.settings.Fn_compute_blocks - 1]
            self._hooks.append(last_fn.register_forward_hook(functools.partial(self._after_fn_blocks, position)))

    def _install_wrapper_hooks(self):
        """cache-dit's wrapper takes the hidden states positionally; a loop that passes them by keyword
        (Flux: ``block(img=..., txt=..., ...)``) gets them moved into place, without touching the model."""
        for blocks, wrapper in zip(self._lists, self._wrappers):
            if blocks.hidden_kwargs:
                self._hooks.append(wrapper.register_forward_pre_hook(
                    functools.partial(_hidden_states_first, blocks.hidden_kwargs), with_kwargs=True))

    @torch.compiler.disable
    def _before_block(self, position, index, module, args, kwargs):
        self._blocks_counted[position] += 1  # what really ran
        if self._tell_block_index is not None:
            self._tell_block_index(index, self._sizes[position], kwargs, self._lists[position].block_type)
        if self._tracing is not None:
            if index == 0:  # every forward pattern takes the hidden (image) stream first
                self._fn_input[position] = args[0] if args else kwargs.get("hidden_states")
            elif index == self._first_middle_block[position]:
                traces, step = self._tracing
                traces[position].computing(step)  # known to compute: drop the old reference before the middle blocks
        if self._serving and index in self._copy_input_at[position]:
            count = self._lists[position].hidden_args
            return (*(a.clone() if torch.is_tensor(a) else a for a in args[:count]), *args[count:]), kwargs
        return None

    @torch.compiler.disable
    def _after_fn_blocks(self, position, module, args, output):
        fn_input = self._fn_input[position]
        if self._tracing is None or fn_input is None:
            return None
        hidden = output if torch.is_tensor(output) else output[self._lists[position].hidden_output_index]
        traces, step = self._tracing
        traces[position].observe(step, hidden - fn_input)
        self._fn_input[position] = None
        return None

    # --- what the run saw -----------------------------------------------------------
    def stream_traces(self) -> list[tuple[StreamTrace, DecisionRules]]:
        """Each stream's trace with the rules of its context (what the advisor replays)."""
        rules = self._context_rules()
        return [(trace, rules[trace.context]) for trace in self._traces.values()]

    def _context_rules(self) -> list[DecisionRules]:
        return [DecisionRules.for_context(self.plan.settings, self.plan.mask_from(start), start)
                for start in self._context_starts]


@torch.compiler.disable
def _hidden_states_first(names: tuple[str, ...], module, args, kwargs):
    """Forward pre-hook: the keyword arguments ``names`` become the leading positional arguments."""
    if not all(name in kwargs for name in names):
        return None
    kwargs = dict(kwargs)
    return (*(kwargs.pop(name) for name in names), *args), kwargs
