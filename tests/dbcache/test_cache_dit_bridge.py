"""What the pack relies on inside cache-dit (``adapters/cache_dit_bridge.HOOKS``), one test each, on real cache-dit.

Each test names the cache-dit release it runs against and the one the bridge was checked with, and
fails with the feature that depends on the hook, so a cache-dit upgrade that changes one says what broke.
"""

from __future__ import annotations

import gc
import weakref

import cache_dit
import pytest
import torch

from two_lists import DOUBLE, SIGMAS, SINGLE, STEPS, WIDTH, TwoLists, family

from krea2_cachedit.adapters.dbcache.cache_dit_bridge import CHECKED_WITH, HOOKS, CachedModule, ListToCache, context_configs
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run

NODE = "Cache-DiT DBCache"
FAST = DBCacheSettings(steps_mask="fast")
FAST_CACHED = [3, 5, 6]


def depends(hook: str) -> str:
    return f"cache-dit {cache_dit.__version__} (the bridge was checked with {CHECKED_WITH}) broke {hook}: {HOOKS[hook]}"


def test_every_hook_has_its_test():
    tested = {name.removeprefix("test_hook_") for name in globals() if name.startswith("test_hook_")}
    assert tested == set(HOOKS), f"hooks without a test: {set(HOOKS) - tested}; tests without a hook: {tested - set(HOOKS)}"


def cached_module(model: TwoLists, keep_wrappers: bool = True) -> CachedModule:
    lists = [ListToCache(entry.attr, getattr(model, entry.attr), entry.forward_pattern) for entry in family().block_lists]
    return CachedModule(model, lists, check_forward_pattern=False, keep_wrappers=keep_wrappers)


def configs(settings: DBCacheSettings) -> dict:
    plan = plan_run(settings, STEPS, min(DOUBLE, SINGLE), NODE)
    return context_configs(plan.db_cache_kwargs(0, separate_cfg=False), None)


def blocks_run_per_step(model: TwoLists, cache: CachedModule | None = None) -> list[int]:
    """8 steps of one call each (the double list's hidden states passed positionally); blocks run per step."""
    g = torch.Generator().manual_seed(1)
    img, txt = torch.randn(1, 6, WIDTH, generator=g), torch.randn(1, 4, WIDTH, generator=g)
    per_step = []
    for i in range(STEPS):
        model.seen.clear()
        out = model(img, txt, SIGMAS[i])
        per_step.append(len(model.seen))
        img = img + (SIGMAS[i + 1] - SIGMAS[i]) * out
    return per_step


class PositionalTwoLists(TwoLists):
    """The same model with a loop that passes the double blocks' hidden states positionally (cache-dit's own way)."""

    def forward(self, img, txt, sigma):
        options = {"seen": self.seen, "block_index": 0, "total_blocks": 0, "block_type": "any"}
        vec = sigma * torch.ones(WIDTH)
        img, txt = img.clone(), txt.clone()
        for block in self.double_blocks:
            img, txt = block(img, txt, vec=vec, transformer_options=options)
        x = torch.cat((txt, img), 1)
        for block in self.single_blocks:
            x = block(x, vec=vec, transformer_options=options)
        return x[:, txt.shape[1]:]


def cached_steps(per_step: list[int]) -> list[int]:
    return [step for step, ran in enumerate(per_step) if ran < DOUBLE + SINGLE]


def test_hook_enabled_marker():
    """A module left cached by an earlier run starts plain: its new settings (caching off) apply."""
    model = PositionalTwoLists(in_place=False)
    left_over = cached_module(model)
    left_over.enable(configs(FAST))          # a run that died without disabling
    fresh = cached_module(model)
    fresh.enable(configs(DBCacheSettings(residual_diff_threshold=0.0)))
    try:
        assert cached_steps(blocks_run_per_step(model)) == [], depends("enabled_marker")
    finally:
        fresh.disable()


def test_hook_wrapper_builder():
    """One wrapper per list is kept, and it is what cache-dit runs in place of that list."""
    model = PositionalTwoLists(in_place=False)
    cache = cached_module(model)
    cache.enable(configs(FAST))
    try:
        assert len(cache.wrappers) == 2, depends("wrapper_builder")
        entered = []
        hooks = [wrapper.register_forward_pre_hook(lambda module, args, i=i: entered.append(i))
                 for i, wrapper in enumerate(cache.wrappers)]
        blocks_run_per_step(model)
        for hook in hooks:
            hook.remove()
        assert entered == [0, 1] * STEPS, depends("wrapper_builder")
    finally:
        cache.disable()


def test_hook_forward_swap():
    """Between calls the attributes hold the original lists; the class's forward then runs every block."""
    model = PositionalTwoLists(in_place=False)
    originals = [model.double_blocks, model.single_blocks]
    cache = cached_module(model, keep_wrappers=False)
    cache.enable(configs(FAST))
    try:
        assert "forward" in model.__dict__, depends("forward_swap")
        assert [model.double_blocks, model.single_blocks] == originals, depends("forward_swap")
        assert cached_steps(blocks_run_per_step(model)) == FAST_CACHED, "the mask caches through the patched forward"
        with cache.bypassed():
            assert cached_steps(blocks_run_per_step(model)) == [], depends("forward_swap")
        assert "forward" in model.__dict__ and [model.double_blocks, model.single_blocks] == originals
    finally:
        cache.disable()


def test_hook_leftover_forward():
    """After ``disable`` the module is as it was: no attribute left on it, freed without a full collection."""
    model = PositionalTwoLists(in_place=False)
    before = {name: set(module.__dict__) for name, module in model.named_modules()}
    cache = cached_module(model)
    cache.enable(configs(FAST))
    blocks_run_per_step(model)
    cache.disable()
    after = {name: set(module.__dict__) for name, module in model.named_modules()}
    assert after == before, depends("leftover_forward")
    ref = weakref.ref(model)
    gc.disable()
    try:
        del model, cache
        assert ref() is None, depends("leftover_forward")
    finally:
        gc.enable()


class WithEmptyList(PositionalTwoLists):
    """The same model built with an empty third list its loop never runs (HunyuanVideo 1.5's single_blocks)."""

    def __init__(self):
        super().__init__(in_place=False)
        self.extra_blocks = torch.nn.ModuleList()


def test_hook_empty_block_lists():
    """A model with an empty block list is cached, and disabled, with that list back on it."""
    model = WithEmptyList()
    before = dict(model._modules)
    plain = blocks_run_per_step(model)
    cache = cached_module(model)
    cache.enable(configs(FAST))
    try:
        assert cached_steps(blocks_run_per_step(model)) == FAST_CACHED, depends("empty_block_lists")
    finally:
        cache.disable()
    assert dict(model._modules) == before, depends("empty_block_lists")   # the same children, by name
    assert blocks_run_per_step(model) == plain


@pytest.mark.parametrize("lists_allowed", [(0, 1), (), (1,)])
def test_hook_decision_point(lists_allowed):
    """cache-dit's decision is asked once per list and served call, in list order, each time saying which
    list; the routed answer is what that list does (here: only the lists in ``lists_allowed`` may cache)."""
    model = PositionalTwoLists(in_place=False)
    cache = cached_module(model)
    cache.enable(configs(FAST))
    asked = []

    def decide(own, block_list, *args, **kwargs):
        asked.append((block_list, bool(own(*args, **kwargs))))
        return block_list in lists_allowed and asked[-1][1]

    cache.route_decisions(decide)
    try:
        per_step = blocks_run_per_step(model)
    finally:
        cache.disable()
    assert [entry[0] for entry in asked] == [0, 1] * STEPS, depends("decision_point")   # every call, per list
    # Fn 1, Bn 0: a list that caches runs its first block only.
    expected = [DOUBLE + SINGLE - sum(size - 1 for position, size in enumerate((DOUBLE, SINGLE))
                                      if position in lists_allowed and step in FAST_CACHED) for step in range(STEPS)]
    assert per_step == expected, depends("decision_point")
    assert "can_cache" not in vars(type(model)) and not hasattr(model, "_context_manager"), "restored by disable"

