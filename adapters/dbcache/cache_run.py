"""DBCache on one transformer for exactly one sampling run: cache-dit's part of a ``SamplingRun``.

The run opens with cache-dit enabled on the module and closes with it disabled; every call the
router gives it is served through cache-dit (which decides per block list whether to skip the
middle blocks), every other call is computed with cache-dit bypassed.

The parts:
- ``CachedModule`` (``cache_dit_bridge``): cache-dit's lifetime on the module, its contexts, and
  calls computed around it;
- ``BlockProbe`` (``block_probe``): what the blocks did per call, and the Fn residual for the
  stream's trace (``TraceBook``, ``residual_trace``);
- ``PairedHidden`` (``paired_hidden``): a (video, audio) pair as one tensor for cache-dit;
- and, shared with every method (``sampling_run``): ``CallRouter``, ``TextPathReuse``, ``ForeignServeWatch``.
"""

from __future__ import annotations

import contextlib

from ..families.registry import ResolvedTransformer
from ..sampling.call_router import CallLayout, StreamKey
from ..sampling.sampling_run import CallWork, SamplingRun, Vote
from ..sampling.step_clock import StepClock
from .block_contract import BlockContract
from .block_probe import BlockIndexTeller, BlockProbe, ModulationSlices
from .cache_dit_bridge import CachedModule, ListToCache, context_configs
from .cache_dit_logs import quiet_cache_dit
from .calibrators import calibrator_config
from .decision_rules import DecisionRules, TracedStream
from .paired_hidden import PairedHidden
from .residual_trace import StreamTrace, TraceBook
from .settings import DBCachePlan


class CacheRun(SamplingRun):
    """cache-dit's DBCache enabled on ``target`` for one sampling run; use as a context manager."""

    def __init__(self, target: ResolvedTransformer, plan: DBCachePlan, clock: StepClock, conds_per_step: int, *,
                 node_name: str, host=None, tell_block_index: BlockIndexTeller | None = None,
                 text_reuse_off: str | None = None):
        super().__init__(target, plan, clock, conds_per_step, node_name=node_name, host=host,
                         text_reuse_off=text_reuse_off)
        lists, modules = target.block_lists, target.block_modules
        self.cache = CachedModule(target.module,
                                  [ListToCache(entry.attr, blocks, entry.forward_pattern)
                                   for entry, blocks in zip(lists, modules)],
                                  target.family.check_forward_pattern,
                                  # A forward that runs no wrappers calls the loop outside the pack's call: the
                                  # first call's check watches the lists cache-dit swaps in (``first_call``).
                                  keep_wrappers=(any(entry.hidden_kwargs or entry.hidden_pair for entry in lists)
                                                 or not target.family.forward_runs_wrappers))
        settings = plan.settings
        modulation = target.family.modulation
        self.probe = BlockProbe(lists, modules, settings.Fn_compute_blocks, settings.Bn_compute_blocks,
                                tell_block_index,
                                ModulationSlices(target.module, modulation, lists) if modulation else None)
        # A list whose blocks take a (video, audio) pair: one tensor for cache-dit, the pair for the blocks.
        self.pairs = PairedHidden(lists, modules) if PairedHidden.needed(lists) else None
        self.traces = TraceBook([entry.attr for entry in lists])
        self._list_names = tuple(entry.attr for entry in lists)
        self._quiet = quiet_cache_dit()
        self.contract = BlockContract(target)

    @property
    def num_blocks(self) -> int:
        return self.probe.num_blocks

    @property
    def ballots(self) -> tuple[str | None, ...]:
        # Each block list is its own cache context and decides apart: a ballot each (one list: the call's).
        return self._list_names if len(self._list_names) > 1 else (None,)

    # --- lifetime -----------------------------------------------------------------
    def _loop_mismatch(self) -> str | None:
        return self.contract.signature_mismatch()

    def _first_call(self):
        return self.contract.first_call(self.cache.swapped_lists)

    def _open(self) -> None:
        # Quiet for the whole run, not only around its own calls into cache-dit: on several devices each
        # refreshes its contexts on its own thread.
        self._quiet.__enter__()
        try:
            self.cache.enable(self._configs(start_step=0, separate_cfg=False))   # undoes itself when it fails
        except BaseException:
            self._quiet.__exit__(None, None, None)
            raise
        try:
            self.probe.install(self.cache.wrappers)
            if self.pairs is not None:
                self.pairs.install(self.cache.wrappers)   # after the probe's hooks: see ``PairedHidden.install``
        except BaseException:
            self._close()   # never leave a half-opened run on the shared module
            raise

    def _close(self) -> None:
        try:
            self.probe.remove()
            if self.pairs is not None:
                self.pairs.remove()
            self.cache.disable()
        finally:
            self.traces.release()
            self._quiet.__exit__(None, None, None)

    def _observed(self) -> dict:
        return {"block_lists": tuple(zip(self._list_names, self.probe.sizes)) if len(self._list_names) > 1 else ()}

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def _call(self, step: int, key: StreamKey, routed: bool):
        traces = self.traces.traces_for(self.router.contexts, self.router.context_starts[-1], key) if routed else None
        self.probe.begin(routed, traces, step)
        work = CallWork()
        try:
            with contextlib.nullcontext() if routed else self.cache.bypassed():
                yield work
        finally:
            counted = self.probe.end()
        # A list is cached only when cache-dit served the call: it always runs the first Fn blocks itself.
        skipped = tuple(routed and 0 < ran < size for ran, size in zip(counted, self.probe.sizes))
        # The call is cached when every list skipped its middle blocks: a step reported cached then had
        # every list's change below the threshold (the diagnostics' view). A call where only some lists
        # skipped is counted per list (``list_skipped``) and in ``blocks_run``, never as cached.
        for trace, list_skipped in zip(traces or (), skipped):
            trace.finish(step, list_skipped)
        work.blocks_run = work.evidence_ran = sum(counted)
        work.skipped = all(skipped)
        work.list_skipped = skipped if len(skipped) > 1 else ()

    def uncached(self):
        """A call computed with the original blocks and forward, outside cache-dit's state."""
        return self.cache.bypassed() if self.opened else contextlib.nullcontext()

    def _start_context(self, step: int, layout: CallLayout):
        """A fresh cache context from ``step`` on, configured for ``layout``."""
        self.cache.refresh(self._configs(step, layout.separate_cfg))

    def _configs(self, start_step: int, separate_cfg: bool) -> dict:
        return context_configs(self.plan.db_cache_kwargs(start_step, separate_cfg), calibrator_config(self.plan.settings))

    # --- several devices ------------------------------------------------------------
    def share_decisions(self, vote: Vote) -> None:
        """cache-dit's own decision per call and block list goes through ``vote``."""
        self.cache.route_decisions(lambda own, block_list, *args, **kwargs: vote(bool(own(*args, **kwargs)),
                                                                                 block_list))

    def stop_sharing(self) -> None:
        self.cache.restore_decisions()

    # --- what the run saw -----------------------------------------------------------
    def _streams(self) -> list[TracedStream]:
        return self.stream_accounts()

    def stream_accounts(self) -> list[TracedStream]:
        """Each stream's trace with the rules of its context (what the record reads and the advisor replays)."""
        rules = [DecisionRules.for_context(self.plan.settings, self.plan.mask_from(start), start)
                 for start in self.router.context_starts]
        return [TracedStream(trace, rules[trace.context]) for trace in self.traces.all()]

    def stream_traces(self) -> list[tuple[StreamTrace, DecisionRules]]:
        """Each stream's trace with the rules of its context (what the advisor replays)."""
        return [account.advisor_input for account in self.stream_accounts()]
