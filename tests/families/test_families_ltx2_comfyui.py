"""LTX-2 (audio + video) through CacheDiTDBCache in the real server: what is LTX-2's own.

The checkpoint (4 blocks; video 128 wide, audio 64 wide; detected by ComfyUI's own model detection with
the metadata config real LTX-2 files carry; written only when one of these tests runs) samples, at 4 steps,
a 64x64 9-frame video latent (8 tokens) joined with an 8-frame audio latent (8 tokens) by ComfyUI's
``LTXVConcatAVLatent``; the sampled latent is split by ``LTXVSeparateAVLatent`` and both parts saved. It runs the
family scenario set on both outputs (tests/families/test_family_scenarios_comfyui.py,
its harness in tests/support/family_harness.py: the CFG layouts, caching off, threshold caching, EasyCache, calls with a
``patches_replace["dit"]`` block or ``stg_self_attn_blocks`` computed in full, heun, a LoRA, TorchCompileModel,
two devices, the Forecast node's refusal). What LTX-2's loop makes its own is here:

- the blocks take the pair (video tokens, audio tokens) first, two widths, update both in place and
  return them: cache-dit gets the pair as one tensor, so the residual it decides on and adds is the
  video and the audio tokens together; on a cached step the video and the audio final norms read the Fn
  output plus that stream's last computed residual, both parts from one residual, per CFG stream;
- ComfyUI's own STG guidance node (an extra call per step with blocks perturbed): that call computed in
  full beside the cache, the mask's step still cached, caching off bit-identical.
"""

from __future__ import annotations

import pytest
import torch

from family_harness import LTX2, check_served_from_one_residual, probed_split_calls
from helpers import FAST, OFF, insert_after_loader

pytestmark = pytest.mark.comfyui

VIDEO_VALUES = 8 * 128   # 8 video tokens of width 128, then 8 audio tokens of width 64, in the flat hidden state
AUDIO_VALUES = 8 * 64


def test_a_cached_step_serves_video_and_audio_from_one_residual_per_stream(ltx2_server, tmp_path):
    """Split CFG, the mask, a probe on the model's own first block and final norms. On the cached step each
    stream's video and audio norms read that call's Fn output plus the stream's residual of its last
    computed step, over video and audio tokens together: both parts change through that one residual."""
    by_step = probed_split_calls(LTX2, ltx2_server, "Krea2TestPairedHiddenProbe", tmp_path / "calls.pt")
    residuals = check_served_from_one_residual(
        by_step, {"video tokens": slice(None, VIDEO_VALUES), "audio tokens": slice(VIDEO_VALUES, None)}, atol=1e-5)
    assert all(residual.numel() == VIDEO_VALUES + AUDIO_VALUES for residual in residuals.values())


def test_stg_guidance_computes_its_extra_call_in_full_and_the_mask_still_caches(ltx2_server):
    """ComfyUI's ``LTXVSpatioTemporalGuidance`` calls the model once more per step, with block 1's
    self-attention perturbed: that call runs in full beside the cache (the loop perturbs by index), the
    sampler's own calls follow the mask, and caching off equals the graph without the node."""
    stg = {"class_type": "LTXVSpatioTemporalGuidance",
           "inputs": {"scale": 1.0, "blocks": "1", "start_percent": 0.0, "end_percent": 1.0}}
    _, record = LTX2.run(ltx2_server, insert_after_loader(LTX2.prompt(cache=FAST, prefix="stg"), "20", stg))
    assert record["cached_steps"] == LTX2.mask_cached and record["calls"] == LTX2.steps
    assert any("stg_self_attn_blocks" in w for w in record["warnings"]), record["warnings"]
    plain, _ = LTX2.run(ltx2_server, insert_after_loader(LTX2.prompt(prefix="stg_plain"), "20", stg), node_id=None)
    outputs, off = LTX2.run(ltx2_server, insert_after_loader(LTX2.prompt(cache=OFF, prefix="stg_off"), "20", stg))
    assert off["cached_steps"] == []
    assert all(torch.equal(output, reference) for output, reference in zip(outputs, plain, strict=True))
