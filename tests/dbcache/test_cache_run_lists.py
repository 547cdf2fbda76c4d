"""The engine on a model with two block lists, against real cache-dit (no ComfyUI).

A small model with Flux's loop: double blocks called with keywords (``block(img=..., txt=...)``),
returning (img, txt) (cache-dit's Pattern_0), then single blocks on cat(txt, img) (Pattern_3), each
told its index, the list's size and type through ``transformer_options``. Its blocks add into their
inputs in place, as Flux's do; a twin whose blocks add out of place computes the same numbers, and
cache-dit handles it as designed, so it is the reference for what a cached step must give.
"""

from __future__ import annotations

import pytest
import torch
from cache_runs import FAST, FAST_MASK_CACHED, NODE, OFF
from two_lists import DOUBLE, SIGMAS, SINGLE, STEPS, WIDTH, DoubleBlock, TwoLists, family
from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
from krea2_cachedit.adapters.families.registry import BlockList, BlockModulation, ResolvedTransformer, TransformerFamily
from krea2_cachedit.adapters.record.run_record import RunMeta, build
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run
from krea2_cachedit.adapters.sampling.step_clock import StepClock


def tell(index, total, kwargs, block_type):
    kwargs["transformer_options"].update(block_index=index, total_blocks=total, block_type=block_type)


def sample(model, settings, family_entry=None, cached=True):
    """8 Euler steps, one call per step; the outputs and the run (None without the cache)."""
    g = torch.Generator().manual_seed(1)
    img, txt = torch.randn(1, 6, WIDTH, generator=g), torch.randn(1, 4, WIDTH, generator=g)
    outputs = []
    target = ResolvedTransformer(family_entry or family(), model)
    clock = StepClock(SIGMAS)
    context = CacheRun(target, plan_run(settings, STEPS, target.cacheable_blocks, NODE), clock, conds_per_step=1,
                       node_name=NODE, tell_block_index=tell) if cached else None
    with context or torch.no_grad():
        for i in range(STEPS):
            with context.model_call(SIGMAS[i], [0], [img.shape]) if cached else torch.no_grad():
                out = model(img, txt, SIGMAS[i])
            outputs.append(out)
            img = img + (SIGMAS[i + 1] - SIGMAS[i]) * out
    return outputs, context


def record(run: CacheRun):
    return build(run.outcome(), RunMeta(node_name=NODE))


def per_call(seen: list) -> list[list]:
    calls = [[]]
    for entry in seen:
        if calls[-1] and entry == ("double", 0, DOUBLE):
            calls.append([])
        calls[-1].append(entry)
    return calls


def test_the_mask_skips_the_middle_of_both_lists_and_each_block_sees_its_place():
    model = TwoLists()
    _, run = sample(model, FAST)
    result = record(run)
    assert result.cached_steps == FAST_MASK_CACHED
    assert [(b["blocks"], b["size"], b["cached_steps"]) for b in result.block_lists] == [
        ("double_blocks", DOUBLE, FAST_MASK_CACHED), ("single_blocks", SINGLE, FAST_MASK_CACHED)]
    assert result.block_evals == 5 * (DOUBLE + SINGLE) + 3 * 2
    every = [("double", i, DOUBLE) for i in range(DOUBLE)] + [("single", i, SINGLE) for i in range(SINGLE)]
    first = [("double", 0, DOUBLE), ("single", 0, SINGLE)]
    assert per_call(model.seen) == [first if step in FAST_MASK_CACHED else every for step in range(STEPS)]
    assert {s["blocks"] for s in result.streams} == {"double_blocks", "single_blocks"}
    assert not hasattr(model, "_is_cached") and not run.probe.installed, "cache-dit off and every hook removed after the run"


def test_blocks_that_add_in_place_get_what_out_of_place_blocks_get():
    """cache-dit keeps each list's input to subtract residuals from: blocks that add into it in place
    would make every kept residual zero, so a cached step would lose its middle blocks' contribution."""
    in_place, _ = sample(TwoLists(in_place=True), FAST)
    reference, _ = sample(TwoLists(in_place=False), FAST, family(in_place=False))
    for step, (got, expected) in enumerate(zip(in_place, reference)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"step {step}")
    plain, _ = sample(TwoLists(in_place=False), FAST, cached=False)
    assert not torch.equal(in_place[FAST_MASK_CACHED[0]], plain[FAST_MASK_CACHED[0]]), "a cached step is served"


def test_caching_off_is_bit_identical_to_the_plain_model():
    plain, _ = sample(TwoLists(), FAST, cached=False)
    off, run = sample(TwoLists(), OFF)
    assert record(run).cached_steps == [] and record(run).block_evals == STEPS * (DOUBLE + SINGLE)
    for got, expected in zip(off, plain):
        torch.testing.assert_close(got, expected, rtol=0, atol=0)


def test_fn_and_bn_must_leave_blocks_to_cache_in_the_shortest_list():
    target = ResolvedTransformer(family(), TwoLists())
    assert (target.num_blocks, target.cacheable_blocks) == (DOUBLE + SINGLE, DOUBLE)
    with pytest.raises(ValueError, match="less than"):
        plan_run(DBCacheSettings(Fn_compute_blocks=2, Bn_compute_blocks=1), STEPS, target.cacheable_blocks, NODE)


# --- a modulation slice per block (Chroma's loop) ---------------------------------------------------

class ModulatedDoubleBlock(DoubleBlock):
    def forward(self, img, txt, vec, transformer_options={}):
        img_vec, txt_vec = vec
        return super().forward(img, txt, img_vec + 2 * txt_vec, transformer_options)


class ModulatedTwoLists(TwoLists):
    """Chroma's loop on TwoLists' blocks: one table per call, each block passed its own slice of it."""

    def __init__(self):
        super().__init__()
        self.double_blocks = torch.nn.ModuleList(ModulatedDoubleBlock(True) for _ in range(DOUBLE))
        self.approximator = torch.nn.Linear(1, WIDTH)

    def get_modulations(self, table, kind, *, idx=0):
        offset = {"single": 0, "double_img": SINGLE, "double_txt": SINGLE + DOUBLE}[kind]
        return table[offset + idx]

    def forward(self, img, txt, sigma):
        options = {"seen": self.seen}
        rows = torch.arange(SINGLE + 2 * DOUBLE, dtype=img.dtype)[:, None]
        table = self.approximator(sigma * rows)   # every row different
        img, txt = img.clone(), txt.clone()
        options.update(total_blocks=len(self.double_blocks), block_type="double")
        for i, block in enumerate(self.double_blocks):
            options["block_index"] = i
            vec = (self.get_modulations(table, "double_img", idx=i), self.get_modulations(table, "double_txt", idx=i))
            img, txt = block(img=img, txt=txt, vec=vec, transformer_options=options)
        x = torch.cat((txt, img), 1)
        options.update(total_blocks=len(self.single_blocks), block_type="single")
        for i, block in enumerate(self.single_blocks):
            options["block_index"] = i
            x = block(x, vec=self.get_modulations(table, "single", idx=i), transformer_options=options)
        return x[:, txt.shape[1]:]


def modulated_family() -> TransformerFamily:
    return TransformerFamily(
        name="modulated lists", model="modulated lists", class_path=f"{__name__}.ModulatedTwoLists",
        check_forward_pattern=False,
        block_lists=(BlockList("double_blocks", "Pattern_0", "double", ("img", "txt"), adds_in_place=True,
                               modulation_kinds=("double_img", "double_txt"), arguments=("vec",)),
                     BlockList("single_blocks", "Pattern_3", "single", adds_in_place=True, modulation_kinds=("single",),
                               arguments=("vec",))),
        block_options_kwarg="transformer_options",
        modulation=BlockModulation(table="approximator", slicer="get_modulations", kwarg="vec"))


def test_each_block_gets_its_own_modulation_slice_under_the_cache():
    """cache-dit's wrapper is called with the first block's slice; each block must still get its own:
    caching off is the plain model bit for bit, and a cached run computes its computed steps exactly."""
    plain, _ = sample(ModulatedTwoLists(), FAST, cached=False)
    off, run = sample(ModulatedTwoLists(), OFF, modulated_family())
    assert record(run).cached_steps == [] and not run.probe.installed
    for step, (got, expected) in enumerate(zip(off, plain)):
        torch.testing.assert_close(got, expected, rtol=0, atol=0, msg=f"step {step}")
    cached, run = sample(ModulatedTwoLists(), FAST, modulated_family())
    assert record(run).cached_steps == FAST_MASK_CACHED
    for step in range(FAST_MASK_CACHED[0]):
        torch.testing.assert_close(cached[step], plain[step], rtol=0, atol=0, msg=f"step {step}")
