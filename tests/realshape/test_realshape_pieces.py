"""The pack's size-dependent pieces at Krea-2's real shapes, on tensors of the real size.

A Fn residual is (batch, text + image tokens, 6144): 1 x 4224 x 6144 = 26M values for one
1024x1024 image with 128 text tokens, twice that with cond and uncond batched, and 101M / 203M
at 2048x2048, all above 2**24, where float32 stops holding every integer. The residual's dtype is
the model's compute dtype: bf16 on a GPU (bf16 or fp8 weights alike: ComfyUI computes fp8
weights in bf16), float32 on a CPU.
"""

from __future__ import annotations

import pytest
import torch

from cache_runs import cache_dit_change, held_residuals
from krea2_cachedit.adapters.dbcache.decision_rules import DecisionRules
from krea2_cachedit.adapters.dbcache.residual_trace import SAMPLE_SIZE, StreamTrace, sample_index
from krea2_cachedit.adapters.dbcache.threshold_advisor import suggest_thresholds
from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings

pytestmark = pytest.mark.tier("realshape")

WIDTH, TEXT_TOKENS = 6144, 128
TOKENS = {1024: (1024 // 16) ** 2 + TEXT_TOKENS, 2048: (2048 // 16) ** 2 + TEXT_TOKENS}
SHAPES = {f"{side}px_batch{batch}": (batch, tokens, WIDTH) for side, tokens in TOKENS.items() for batch in (1, 2)}


@pytest.mark.parametrize("numel", [2 ** 24 + 1, *(b * t * w for b, t, w in SHAPES.values()), 2 ** 40 + 7],
                         ids=["2^24+1", *SHAPES, "2^40+7"])
def test_sample_positions_stay_inside_any_real_size(numel):
    index = sample_index(numel)
    assert index.dtype == torch.int64 and index.numel() == SAMPLE_SIZE
    assert int(index[0]) == 0 and int(index[-1]) == numel - 1
    assert bool((index[1:] > index[:-1]).all()), "evenly spread, no position twice"


def residuals(shape, dtype, seed=0):
    """Two steps' Fn residuals of a real-size call: the second one a few percent away from the first."""
    generator = torch.Generator().manual_seed(seed)
    first = torch.randn(shape, generator=generator, dtype=dtype)
    return first, first + 0.05 * torch.randn(shape, generator=generator, dtype=dtype)


@pytest.mark.parametrize("name, dtype", [
    ("1024px_batch1", torch.bfloat16), ("1024px_batch2", torch.bfloat16), ("2048px_batch1", torch.bfloat16),
    ("2048px_batch2", torch.bfloat16), ("1024px_batch1", torch.float32), ("1024px_batch2", torch.float32),
])
def test_a_stream_traces_a_real_size_residual(name, dtype):
    first, second = residuals(SHAPES[name], dtype)
    trace = StreamTrace((1, 0), context=0, start_step=0)
    trace.observe(0, first)
    trace.computing(0)
    trace.finish(0, cached=False)
    trace.observe(1, second)
    trace.finish(1, cached=True)
    # The value shown is cache-dit's, in the residual's own dtype.
    expected = cache_dit_change(first, second)
    assert expected.dtype == dtype and trace.measured_diffs() == {0: None, 1: float(expected)}
    assert 0.03 < float(expected) < 0.07
    flat = second.reshape(-1)
    assert trace.samples[1].numel() == SAMPLE_SIZE and float(trace.samples[1][-1]) == float(flat[-1])
    # Kept in the residual's dtype (made float once, after the run).
    assert trace.samples[1].dtype == dtype and torch.equal(trace.samples[1], flat[sample_index(flat.numel())])
    assert held_residuals(trace) == 1, "only the reference: the cached step's residual is dropped"
    del first, second, flat
    # The advisor works on the samples and the exact values alone.
    rules = DecisionRules.for_context(DBCacheSettings(max_warmup_steps=1), None, start_step=0)
    [suggestion] = suggest_thresholds([(trace, rules)])
    assert suggestion["cached_steps"] == [1] and suggestion["range"][0] == pytest.approx(float(expected), abs=1e-6)
    trace.release()
    assert held_residuals(trace) == 0
