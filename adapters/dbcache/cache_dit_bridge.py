"""cache-dit on one module, and the one place that knows more of cache-dit than its documented calls.

cache-dit's interface (``BlockAdapter``, ``enable_cache``, ``refresh_context``, ``disable_cache``,
``DBCacheConfig``, the calibrator configs) turns a cache on and off. The pack leans on a few things
behind it; each is used here only, named in ``HOOKS`` with the feature that needs it, and checked by
one test each (``tests/dbcache/test_cache_dit_bridge.py``) against the release in ``CHECKED_WITH``. When a
cache-dit release changes one, that test says which feature broke.
"""

from __future__ import annotations

import contextlib
import dataclasses
import types
from typing import Callable

import torch

from .cache_dit_logs import quiet_cache_dit

CHECKED_WITH = "1.5.3"

# What the pack relies on inside cache-dit -> the feature that breaks without it.
HOOKS = {
    "enabled_marker": "a run that finds the shared model still cached (an earlier run that died) starts from the "
                      "plain model: cache-dit marks the module it patched and ignores a second enable_cache on it, "
                      "which would keep the earlier run's settings",
    "wrapper_builder": "Flux's keyword block calls: CachedAdapter.collect_unified_blocks builds the wrapper cache-dit "
                       "runs in place of each block list, and the pack puts a pre-hook on it that moves the "
                       "keyword hidden states into place",
    "forward_swap": "calls computed in full around the cache (extra calls of multi-call samplers, patched calls): "
                    "enable_cache patches forward on the instance, and that forward swaps the wrappers in for the "
                    "call only, so the class's forward runs the original blocks",
    "leftover_forward": "a model that ran is freed without a full garbage collection: disable_cache leaves a bound "
                        "forward on the instance (a reference cycle), which the pack removes",
    "empty_block_lists": "models built with an empty block list (HunyuanVideo 1.5 has no single-stream blocks): "
                         "disable_cache walks every ModuleList attribute of the module (BlockAdapter.find_blocks) "
                         "and reads its first block, so the pack sets empty lists aside while cache-dit runs",
    "decision_point": "multi-GPU sampling's one decision per step and block list for all devices: the module's "
                      "context manager answers can_cache once per block list and call, in that list's context (named "
                      "in the module's context names, in list order), and the pack routes that answer",
}


@dataclasses.dataclass(frozen=True)
class ListToCache:
    """One block list as cache-dit gets it: the attribute, the list itself, its ForwardPattern name."""

    attr: str
    blocks: torch.nn.ModuleList
    forward_pattern: str


def is_enabled(module: torch.nn.Module) -> bool:
    import cache_dit

    return bool(cache_dit.BlockAdapter.is_cached(module))   # HOOKS["enabled_marker"]


def context_configs(db_cache_kwargs: dict, calibrator) -> dict:
    """``enable_cache`` / ``refresh_context`` keyword arguments: a DBCache config and a calibrator, if any."""
    import cache_dit

    configs = {"cache_config": cache_dit.DBCacheConfig(**db_cache_kwargs)}
    if calibrator is not None:
        configs["calibrator_config"] = calibrator
    return configs


class CachedModule:
    """cache-dit enabled on ``module`` from ``enable`` to ``disable``, its contexts refreshed in between."""

    def __init__(self, module: torch.nn.Module, lists: list[ListToCache], check_forward_pattern: bool,
                 keep_wrappers: bool = False):
        self.module = module
        self.lists = lists
        self.check_forward_pattern = check_forward_pattern
        self.keep_wrappers = keep_wrappers
        self.wrappers: list[torch.nn.Module] = []   # cache-dit's wrapper of each list (``keep_wrappers`` only)
        # The lists cache-dit's forward swaps in for each call, the wrapper in each (``keep_wrappers`` only).
        self.swapped_lists: list[torch.nn.ModuleList] = []
        self._adapter = None
        self._own_forward = None   # the instance's own forward before cache-dit patched it (normally none)
        self._manager = None       # the context manager whose decision is routed (``route_decisions``)

    # --- lifetime -----------------------------------------------------------------
    def enable(self, configs: dict) -> None:
        import cache_dit

        with quiet_cache_dit():
            adapter = cache_dit.BlockAdapter(**self._adapter_lists(cache_dit), transformer=self.module,
                                             check_forward_pattern=self.check_forward_pattern,
                                             has_separate_cfg=False)  # the real value is in each context's config
            with self._empty_lists_aside():
                if is_enabled(self.module):
                    cache_dit.disable_cache(self.module)
                self._own_forward = self.module.__dict__.get("forward")
                try:
                    with self._keeping_wrappers():
                        cache_dit.enable_cache(adapter, **configs)
                except Exception:
                    cache_dit.disable_cache(self.module)  # never leave a half-patched shared module
                    self._restore_own_forward()
                    raise
        self._adapter = adapter

    def refresh(self, configs: dict) -> None:
        """A fresh cache context (every list's) from now on, with these configs."""
        import cache_dit

        with quiet_cache_dit():
            cache_dit.refresh_context(self.module, **configs)

    def disable(self) -> None:
        import cache_dit

        self.restore_decisions()
        with quiet_cache_dit():
            # Through the adapter, which names the blocks: given the bare module, cache-dit scans every
            # attribute of the model for block lists, six times (milliseconds).
            with self._empty_lists_aside():
                cache_dit.disable_cache(self._adapter)
        self._restore_own_forward()
        self.wrappers = []
        self.swapped_lists = []

    @contextlib.contextmanager
    def _empty_lists_aside(self):
        """HOOKS["empty_block_lists"]: each empty ModuleList child of the module replaced, in its place, by a
        plain module while cache-dit runs (its scan for block lists reads every list's first block), then put back."""
        children = self.module._modules
        empty = {name: child for name, child in children.items()
                 if isinstance(child, torch.nn.ModuleList) and len(child) == 0}
        for name in empty:
            children[name] = torch.nn.Module()
        try:
            yield
        finally:
            for name, child in empty.items():
                children[name] = child

    def _restore_own_forward(self) -> None:
        # HOOKS["leftover_forward"]: what disable_cache leaves there is the class's forward bound to the module.
        if self._own_forward is None:
            self.module.__dict__.pop("forward", None)
        else:
            self.module.forward = self._own_forward

    def _adapter_lists(self, cache_dit) -> dict:
        """BlockAdapter's block arguments: a one-list model as cache-dit's own adapters name it, several
        lists as its Flux adapters do."""
        patterns = [getattr(cache_dit.ForwardPattern, entry.forward_pattern) for entry in self.lists]
        if len(self.lists) == 1:
            return {"blocks": self.lists[0].blocks, "blocks_name": self.lists[0].attr, "forward_pattern": patterns[0]}
        return {"blocks": [entry.blocks for entry in self.lists], "blocks_name": [entry.attr for entry in self.lists],
                "forward_pattern": patterns}

    @contextlib.contextmanager
    def _keeping_wrappers(self):
        """While enabling: keep the wrappers cache-dit builds around each list (it keeps them to itself)."""
        if not self.keep_wrappers:
            yield
            return
        from cache_dit.caching.cache_adapters.cache_adapter import CachedAdapter  # HOOKS["wrapper_builder"]

        build = CachedAdapter.__dict__["collect_unified_blocks"]

        def build_and_keep(cls, block_adapter, contexts_kwargs):
            built = build.__func__(cls, block_adapter, contexts_kwargs)
            for per_transformer in built:
                self.wrappers.extend(wrapper for wrappers in per_transformer.values() for wrapper in wrappers)
                self.swapped_lists.extend(per_transformer.values())
            return built

        CachedAdapter.collect_unified_blocks = classmethod(build_and_keep)
        try:
            yield
        finally:
            CachedAdapter.collect_unified_blocks = build

    # --- per call -----------------------------------------------------------------
    @contextlib.contextmanager
    def bypassed(self):
        """One call with the original blocks and forward, outside cache-dit's state (HOOKS["forward_swap"]).

        Between calls each attribute holds the original list; the patched forward swaps the wrappers in
        for its call. The class's forward, put on the instance for the call, runs the blocks as they are.
        """
        module = self.module
        patched_forward = module.__dict__.get("forward")
        held = [getattr(module, entry.attr) for entry in self.lists]
        for entry in self.lists:
            setattr(module, entry.attr, entry.blocks)
        module.forward = types.MethodType(type(module).forward, module)
        try:
            yield
        finally:
            for entry, blocks in zip(self.lists, held):
                setattr(module, entry.attr, blocks)
            if patched_forward is None:
                del module.forward
            else:
                module.forward = patched_forward

    def route_decisions(self, decide: Callable[..., bool]) -> None:
        """cache-dit's own per-list decision goes through ``decide(own_decision, block_list, *args, **kwargs)``
        until ``disable`` (HOOKS["decision_point"]); ``block_list`` is the position of the list whose
        decision it is, in ``lists`` order."""
        manager = self.module._context_manager
        lists = {name: position for position, name in enumerate(self.module._context_names)}
        own = manager.can_cache

        @torch.compiler.disable
        def routed(*args, **kwargs):
            return decide(own, lists[manager.current_context.name], *args, **kwargs)

        manager.can_cache = routed
        self._manager = manager

    def restore_decisions(self) -> None:
        if self._manager is not None:
            self._manager.__dict__.pop("can_cache", None)
            self._manager = None
