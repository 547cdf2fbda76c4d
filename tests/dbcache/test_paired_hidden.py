"""The engine on a model whose blocks take a (video, audio) pair of two widths, against real cache-dit.

A small model with LTX-2's loop: one list of blocks called ``block((video, audio), context=...)``, each
updating both tensors in place and returning the pair. cache-dit gets the pair as one tensor
(``adapters/dbcache/paired_hidden.py``); a twin whose blocks compute the same numbers out of place is the
reference, and a cached step must give the Fn output plus the last computed step's residual for both
streams, with a batch of two (views of each stream stay contiguous).
"""

from __future__ import annotations

import contextlib

import torch
from cache_runs import FAST, FAST_MASK_CACHED, NODE, OFF

from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
from krea2_cachedit.adapters.families.registry import BlockList, ResolvedTransformer, TransformerFamily
from krea2_cachedit.adapters.record.run_record import RunMeta, build
from krea2_cachedit.adapters.dbcache.settings import plan_run
from krea2_cachedit.adapters.sampling.step_clock import StepClock

STEPS, BLOCKS, VIDEO, AUDIO = 8, 4, 16, 8   # widths of the two streams
SIGMAS = torch.linspace(1.0, 0.0, STEPS + 1)


class PairBlock(torch.nn.Module):
    def __init__(self, in_place: bool):
        super().__init__()
        self.in_place = in_place
        self.video, self.audio = torch.nn.Linear(VIDEO + AUDIO, VIDEO), torch.nn.Linear(VIDEO + AUDIO, AUDIO)

    def forward(self, x, context=None, transformer_options=None):
        vx, ax = x
        mixed = torch.tanh(torch.cat((vx, ax.mean(1, keepdim=True).expand(-1, vx.shape[1], -1)), -1) + context)
        video_add = self.video(mixed)
        audio_add = self.audio(mixed).mean(1, keepdim=True).expand(-1, ax.shape[1], -1)
        if self.in_place:
            vx.add_(video_add)
            ax.add_(audio_add)
            return vx, ax
        return vx + video_add, ax + audio_add


class PairLoop(torch.nn.Module):
    def __init__(self, in_place: bool = True):
        super().__init__()
        torch.manual_seed(0)
        self.transformer_blocks = torch.nn.ModuleList(PairBlock(in_place) for _ in range(BLOCKS))
        self.finals: list[torch.Tensor] = []   # each call's last hidden pair, flat (the final layers' input)

    def forward(self, vx, ax, sigma):
        vx, ax = vx.clone(), ax.clone()
        for block in self.transformer_blocks:
            vx, ax = block((vx, ax), context=sigma, transformer_options={})
        self.finals.append(torch.cat([vx.reshape(-1), ax.reshape(-1)]).clone())
        return vx, ax


def family(in_place: bool = True) -> TransformerFamily:
    return TransformerFamily(name="pair", model="pair", class_path=f"{__name__}.PairLoop", check_forward_pattern=False,
                             block_lists=(BlockList("transformer_blocks", "Pattern_3", adds_in_place=in_place,
                                                    hidden_pair=True),))


def sample(model, settings, family_entry=None, cached=True, batch=2):
    """8 Euler steps of a batch of two, one call per step: the outputs and the run (None without the cache)."""
    g = torch.Generator().manual_seed(1)
    vx, ax = torch.randn(batch, 6, VIDEO, generator=g), torch.randn(batch, 3, AUDIO, generator=g)
    outputs = []
    target = ResolvedTransformer(family_entry or family(), model)
    run = CacheRun(target, plan_run(settings, STEPS, target.cacheable_blocks, NODE), StepClock(SIGMAS),
                   conds_per_step=1, node_name=NODE) if cached else None
    with torch.no_grad(), run or contextlib.nullcontext():   # the sampler runs without autograd
        for i in range(STEPS):
            with run.model_call(SIGMAS[i], [0] * batch, [vx.shape, ax.shape]) if cached else contextlib.nullcontext():
                v_out, a_out = model(vx, ax, SIGMAS[i])
            outputs.append((v_out, a_out))
            vx, ax = vx + (SIGMAS[i + 1] - SIGMAS[i]) * v_out, ax + (SIGMAS[i + 1] - SIGMAS[i]) * a_out
    return outputs, run


def test_blocks_that_update_the_pair_in_place_get_what_out_of_place_blocks_get():
    in_place, run = sample(PairLoop(in_place=True), FAST)
    reference, _ = sample(PairLoop(in_place=False), FAST, family(in_place=False))
    assert build(run.outcome(), RunMeta(node_name=NODE)).cached_steps == FAST_MASK_CACHED
    for step, (got, expected) in enumerate(zip(in_place, reference)):
        for part in (0, 1):
            torch.testing.assert_close(got[part], expected[part], rtol=0, atol=0, msg=f"step {step}")
    assert not run.pairs._hooks and not run.probe.installed, "every hook removed after the run"


def test_a_cached_step_adds_one_residual_over_video_and_audio():
    """The cached step's hidden pair is block 0's output plus the residual (final - block 0 output) of the
    last computed step, on both streams: one residual of the video and the audio values together."""
    model = PairLoop()
    fn_out = []
    hook = model.transformer_blocks[0].register_forward_hook(
        lambda module, args, output: fn_out.append(torch.cat([t.reshape(-1) for t in output]).clone()
                                                   if isinstance(output, tuple) else output.reshape(-1).clone()))
    sample(model, FAST)
    hook.remove()
    cached = FAST_MASK_CACHED[0]
    residual = model.finals[cached - 1] - fn_out[cached - 1]
    split = 2 * 6 * VIDEO
    assert residual[:split].abs().mean() > 0 and residual[split:].abs().mean() > 0
    torch.testing.assert_close(model.finals[cached], fn_out[cached] + residual, rtol=0, atol=1e-6)


def test_caching_off_is_bit_identical_to_the_plain_model():
    plain, _ = sample(PairLoop(), FAST, cached=False)
    off, run = sample(PairLoop(), OFF)
    assert build(run.outcome(), RunMeta(node_name=NODE)).block_evals == STEPS * BLOCKS
    for got, expected in zip(off, plain):
        assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])
