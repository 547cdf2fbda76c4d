"""The Fn residual and cache-dit's threshold decision at real sizes of Wan, Z-Image, HunyuanVideo 1.5, MiniMax H3
and ERNIE-Image (no ComfyUI).

What the pack does with a Fn residual does not depend on the family: its block hooks see each
family's stack as (batch, tokens, width), as Krea-2's (checked at small size in the comfyui tier).
What differs at real size is how large that residual gets:
- Wan 2.1 at 480p, 81 frames: latent 104x60x21, patch 1x2x2, so 52 x 30 x 21 = 32760 video
  tokens; 50M values at the 1.3B's width 1536, 168M at the 14B's 5120 (twice that with cond and
  uncond batched).
- Z-Image at 1024x1024: 64 x 64 = 4096 image tokens and the caption, padded to a multiple of 32, at
  width 3840: 15.9M values with a caption of up to 32 tokens, *below* 2**24; above it with a
  caption of more than 272 tokens (17.7M at 512) or cond and uncond batched (31.7M).
- HunyuanVideo 1.5 at 720p, 121 frames (width 2048, patch 1, its VAE 16x spatial and 4x temporal):
  31 x 45 x 80 = 111600 video tokens, 229M values: the largest stack here.
- MiniMax H3 at its latent node's default 1344x768, 124 frames (width 5376, patch 1x2x2, video latent
  37 x 48 x 84; stereo audio latent at 40 per second): 37296 video, 414 audio and (say) 256 text tokens
  in one packed sequence of shape (tokens, width), with no batch dimension: 204M values.
- ERNIE-Image at 1024x1024 (width 4096, Flux.2's latent 16x smaller, patch 1): 4096 image tokens and (say) 256
  text tokens in one joint sequence: 17.8M values, above 2**24 with any prompt (the image tokens alone are 2**24).
Each case traces two steps' residuals as a run does, and hands the same pair to cache-dit's own
comparison (``CachedContextManager.similarity``, what decides a cached step), at thresholds just
above and just below the change the pack reports.
"""

from __future__ import annotations

import math

import pytest
import torch

from cache_runs import cache_dit_change, held_residuals
from krea2_cachedit.adapters.dbcache.residual_trace import SAMPLE_SIZE, StreamTrace, sample_index

pytestmark = pytest.mark.tier("realshape")

WAN_480P_81_TOKENS = (104 // 2) * (60 // 2) * 21
ZIMAGE_1024_IMAGE_TOKENS = (1024 // 16) ** 2
HUNYUAN15_720P_121_TOKENS = ((121 - 1) // 4 + 1) * (720 // 16) * (1280 // 16)
# MiniMax H3, 124 frames at 24 fps: latent frames ((124 - 5) // 17) * 5 + 2 = 37, each 768/16 x 1344/16 latent
# cells in 2x2 patches; audio round(124 / 24 * 40) = 207 latent frames per channel, 2 channels; 256 text tokens.
MINIMAX_H3_768P_124_TOKENS = 37 * (768 // 32) * (1344 // 32) + 2 * 207 + 256
ERNIE_IMAGE_1024_TOKENS = (1024 // 16) ** 2 + 256


def zimage_tokens(caption_tokens: int) -> int:
    return ZIMAGE_1024_IMAGE_TOKENS + -(-caption_tokens // 32) * 32


SHAPES = {  # (batch, tokens, width), and the dtype a real run computes it in
    "wan14b_480p81_bf16": ((1, WAN_480P_81_TOKENS, 5120), torch.bfloat16),
    "wan1.3b_480p81_batched_bf16": ((2, WAN_480P_81_TOKENS, 1536), torch.bfloat16),
    "wan1.3b_480p81_fp32": ((1, WAN_480P_81_TOKENS, 1536), torch.float32),
    "zimage_1024_batched_bf16": ((2, zimage_tokens(32), 3840), torch.bfloat16),
    "zimage_1024_caption512_fp32": ((1, zimage_tokens(512), 3840), torch.float32),
    "hunyuanvideo15_720p121_bf16": ((1, HUNYUAN15_720P_121_TOKENS, 2048), torch.bfloat16),
    # One packed sequence, no batch dimension (ComfyUI never batches MiniMax H3's conds).
    "minimax_h3_768p124_unbatched_bf16": ((MINIMAX_H3_768P_124_TOKENS, 5376), torch.bfloat16),
    "ernie_image_1024_bf16": ((1, ERNIE_IMAGE_1024_TOKENS, 4096), torch.bfloat16),
}


def numel(shape) -> int:
    return math.prod(shape)


def test_the_real_sizes_are_where_float32_index_arithmetic_breaks():
    assert WAN_480P_81_TOKENS == 32760
    assert (HUNYUAN15_720P_121_TOKENS, MINIMAX_H3_768P_124_TOKENS) == (111600, 37966)
    assert all(numel(shape) > 2 ** 24 for shape, _ in SHAPES.values())
    # One short-caption Z-Image 1024x1024 call alone stays below: only batching or a long caption crosses.
    assert numel((1, zimage_tokens(32), 3840)) < 2 ** 24 < numel((1, zimage_tokens(288), 3840))


@pytest.mark.parametrize("name", list(SHAPES))
def test_sample_positions_stay_inside_the_residual(name):
    shape, _ = SHAPES[name]
    index = sample_index(numel(shape))
    assert index.dtype == torch.int64 and index.numel() == SAMPLE_SIZE
    assert int(index[0]) == 0 and int(index[-1]) == numel(shape) - 1
    assert bool((index[1:] > index[:-1]).all())


def cache_dit_decides(reference: torch.Tensor, current: torch.Tensor, threshold: float) -> tuple[bool, float]:
    """cache-dit's own comparison of two Fn residuals: (cached?, the change it recorded)."""
    import cache_dit
    from cache_dit.caching.cache_contexts.cache_manager import CachedContextManager

    manager = CachedContextManager("realshape")
    manager.new_context(name="stream", cache_config=cache_dit.DBCacheConfig(residual_diff_threshold=threshold))
    manager.set_context("stream")
    cached = manager.similarity(reference, current, threshold=threshold)
    [recorded] = manager.get_residual_diffs().values()
    return cached, recorded


@pytest.mark.parametrize("name", list(SHAPES))
def test_the_traced_change_is_the_one_cache_dit_decides_on(name):
    shape, dtype = SHAPES[name]
    generator = torch.Generator().manual_seed(0)
    first = torch.randn(shape, generator=generator, dtype=dtype)
    second = first + 0.05 * torch.randn(shape, generator=generator, dtype=dtype)
    trace = StreamTrace((1, 0) if len(shape) == 3 and shape[0] == 2 else (0,), context=0, start_step=0)
    trace.observe(0, first)
    trace.finish(0, cached=False)
    trace.observe(1, second)
    change = trace.measured_diffs()[1]
    assert 0.03 < change < 0.07
    flat = second.reshape(-1)
    assert float(trace.samples[1][-1]) == float(flat[-1]), "the last sample is the residual's last value"
    del flat
    # cache-dit, given the same pair: the very value the pack reports, cached just above it and not below.
    above, recorded = cache_dit_decides(first, second, threshold=change * 1.01)
    below, _ = cache_dit_decides(first, second, threshold=change * 0.99)
    assert recorded == change == float(cache_dit_change(first, second))
    assert (above, below) == (True, False)
    trace.finish(1, cached=True)
    trace.release()
    assert held_residuals(trace) == 0
