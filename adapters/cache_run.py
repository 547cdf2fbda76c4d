"""cache-dit on one transformer for exactly one sampling run: a composition of parts with one job each.

Data path: the node's OUTER_SAMPLE wrapper opens a ``CacheRun`` (cache-dit enabled), the
DIFFUSION_MODEL wrapper sends every model call through ``CacheRun.model_call``, and the end of
the sampling run closes it (cache-dit disabled) and takes its ``outcome`` for the record.

The parts:
- ``CachedModule`` (``cache_dit_bridge``): cache-dit's lifetime on the module, its contexts, and
  calls computed around it;
- ``CallRouter`` (``call_router``): each call's step and CFG stream, and whether the cache serves
  it, with a fresh context whenever the call layout changes;
- ``BlockProbe`` (``block_probe``): what the blocks did per call, and the Fn residual for the
  stream's trace (``TraceBook``, ``residual_trace``);
- ``TextPathReuse`` (``text_path``) and ``ForeignServeWatch`` (``foreign_serves``).
"""

from __future__ import annotations

import contextlib
import threading

import torch

from .block_probe import BlockIndexTeller, BlockProbe, ModulationSlices
from .cache_dit_bridge import CachedModule, ListToCache, context_configs
from .calibrators import calibrator_config
from .call_router import CallLayout, CallRouter, StreamKey
from .decision_rules import DecisionRules, TracedStream
from .foreign_serves import ForeignServeWatch
from .observation import Call, CallTimer, RunObservation, RunOutcome, exit_status
from .paired_hidden import PairedHidden
from .registry import ResolvedTransformer
from .residual_trace import StreamTrace, TraceBook
from .settings import RunPlan
from .step_clock import StepClock
from .text_path import TextPathReuse


class CacheRun:
    """cache-dit enabled on ``target`` for one sampling run; use as a context manager.

    ``node_name`` is the node the user placed, which the run's log lines speak for. ``host`` is the
    module the sampler calls (the transformer, or a module around it); calls into any other module
    (e.g. a copy on another GPU) are not this run's.
    """

    parallel = None  # only a run on several devices (``MultiDeviceRun``) has a ParallelOutcome

    def __init__(self, target: ResolvedTransformer, plan: RunPlan, clock: StepClock, conds_per_step: int, *,
                 node_name: str, host=None, tell_block_index: BlockIndexTeller | None = None,
                 text_reuse_off: str | None = None):
        self.target, self.plan, self.clock = target, plan, clock
        self.host = host if host is not None else target.module
        lists, modules = target.block_lists, target.block_modules
        self.cache = CachedModule(target.module,
                                  [ListToCache(entry.attr, blocks, entry.forward_pattern)
                                   for entry, blocks in zip(lists, modules)],
                                  target.family.check_forward_pattern,
                                  keep_wrappers=any(entry.hidden_kwargs or entry.hidden_pair for entry in lists))
        self.router = CallRouter(conds_per_step, self._start_context, node_name)
        settings = plan.settings
        modulation = target.family.modulation
        self.probe = BlockProbe(lists, modules, settings.Fn_compute_blocks, settings.Bn_compute_blocks,
                                tell_block_index,
                                ModulationSlices(target.module, modulation, lists) if modulation else None)
        # A list whose blocks take a (video, audio) pair: one tensor for cache-dit, the pair for the blocks.
        self.pairs = PairedHidden(lists, modules) if PairedHidden.needed(lists) else None
        self.traces = TraceBook([entry.attr for entry in lists])
        self.foreign_serves = ForeignServeWatch()
        text_path = target.family.text_path   # computed once per batch of conds (None: the family has none)
        self.text_path = TextPathReuse(target.module, text_path, off=text_reuse_off) if text_path else None
        self._list_names = tuple(entry.attr for entry in lists)
        self.calls: list[Call] = []
        self.warnings: list[str] = []   # the run's own; the plan's are the plan's
        self.observation: RunObservation | None = None

    @property
    def num_blocks(self) -> int:
        return self.probe.num_blocks

    # --- lifetime -----------------------------------------------------------------
    def __enter__(self) -> "CacheRun":
        self.cache.enable(self._configs(start_step=0, separate_cfg=False))
        self.probe.install(self.cache.wrappers)
        if self.pairs is not None:
            self.pairs.install(self.cache.wrappers)   # after the probe's hooks: see ``PairedHidden.install``
        if self.text_path is not None:
            self.text_path.__enter__()
        return self

    def __exit__(self, exc_type, exc, tb):
        try:
            if self.text_path is not None:
                self.text_path.__exit__(exc_type, exc, tb)
            self.probe.remove()
            if self.pairs is not None:
                self.pairs.remove()
            self.cache.disable()
        finally:
            self.traces.release()
            self.observation = self._observe(exit_status(exc_type))
        return False

    @property
    def observations(self) -> list[RunObservation]:
        """This run's observation, as the one device of a run (see ``MultiDeviceRun``); none before it ended."""
        return [self.observation] if self.observation is not None else []

    def outcome(self) -> RunOutcome:
        """What the record is built from (``run_record.build``), once the run has ended."""
        return RunOutcome(self.plan, self.clock, self.target.family.name, tuple(self.observations), self.parallel)

    def _observe(self, status: str) -> RunObservation:
        layout = self.router.first_layout
        return RunObservation(
            status=status, num_blocks=self.num_blocks, module_id=id(self.host), calls=tuple(self.calls),
            block_lists=tuple(zip(self._list_names, self.probe.sizes)) if len(self._list_names) > 1 else (),
            cfg_mode=layout.mode if layout else None, has_separate_cfg=bool(layout and layout.separate_cfg),
            cache_contexts=self.router.contexts, streams=tuple(self.stream_accounts()), warnings=tuple(self.warnings),
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
        served = not self.foreign_serves.seen and self.router.route(step, key)
        traces = self.traces.traces_for(self.router.contexts, self.router.context_starts[-1], key) if served else None
        self.probe.begin(served, traces, step)
        timer = CallTimer(device)
        text_call = self.text_path.call(*text) if self.text_path is not None and text else contextlib.nullcontext()
        try:
            with text_call, (contextlib.nullcontext() if served else self.cache.bypassed()):
                yield served
        finally:
            counted = self.probe.end()
        timer.stop()
        self._record_call(step, key, served, counted, traces, sigma, timer)

    def _record_call(self, step, key: StreamKey, served: bool, counted: list[int], traces, sigma, timer):
        # A list is cached only when cache-dit served the call: it always runs the first Fn blocks itself.
        skipped = tuple(served and 0 < ran < size for ran, size in zip(counted, self.probe.sizes))
        # The call is cached when every list skipped its middle blocks: a step reported cached then had
        # every list's change below the threshold (the diagnostics' view). A call where only some lists
        # skipped is counted per list (``list_cached``) and in ``blocks_run``, never as cached.
        blocks_run = sum(counted)
        if self.foreign_serves.observe(step, served, blocks_run) and self.foreign_serves.calls == 1:
            self.warnings.append(self.foreign_serves.warning())
        for trace, list_skipped in zip(traces or (), skipped):
            trace.finish(step, list_skipped)
        self.calls.append(Call(step, key.branches, key, served, all(skipped), blocks_run, sigma, timer,
                               threading.current_thread().name, skipped if len(skipped) > 1 else ()))

    def warn_once(self, warning: str):
        if warning not in self.warnings:
            self.warnings.append(warning)

    def uncached(self):
        """A call computed with the original blocks and forward, outside cache-dit's state."""
        return self.cache.bypassed()

    def _start_context(self, step: int, layout: CallLayout):
        """A fresh cache context from ``step`` on, configured for ``layout`` (the router's call)."""
        self.cache.refresh(self._configs(step, layout.separate_cfg))

    def _configs(self, start_step: int, separate_cfg: bool) -> dict:
        return context_configs(self.plan.db_cache_kwargs(start_step, separate_cfg), calibrator_config(self.plan.settings))

    # --- what the run saw -----------------------------------------------------------
    def stream_accounts(self) -> list[TracedStream]:
        """Each stream's trace with the rules of its context (what the record reads and the advisor replays)."""
        rules = [DecisionRules.for_context(self.plan.settings, self.plan.mask_from(start), start)
                 for start in self.router.context_starts]
        return [TracedStream(trace, rules[trace.context]) for trace in self.traces.all()]

    def stream_traces(self) -> list[tuple[StreamTrace, DecisionRules]]:
        """Each stream's trace with the rules of its context (what the advisor replays)."""
        return [account.advisor_input for account in self.stream_accounts()]
