"""MiniMax H3 (audio + video) through CacheDiTDBCache in the real server: what is MiniMax H3's own.

A tiny seeded-random checkpoint (4 blocks, 64 wide, detected by ComfyUI's own model detection) at 4 steps, with
ComfyUI's own MiniMax H3 latent (``EmptyMiniMaxH3LatentAV``: a 64x64, 5-frame video latent and its 8-frame stereo
audio latent) and the sampled latent split into its video and audio latents by ComfyUI's ``LTXVSeparateAVLatent``.
It runs the family scenario set on both outputs
(tests/families/test_family_scenarios_comfyui.py, its harness in tests/support/family_harness.py): its CFG layouts are CFG 1 and
split, split even with prompts of one length (the model packs text, audio and video tokens into one sequence with
no batch dimension, so ComfyUI never batches its cond and uncond); caching off, threshold caching, EasyCache, a
``patches_replace["dit"]`` block computed in full, heun, a LoRA, TorchCompileModel, two devices, the Forecast node
split and at CFG 1.

What its loop makes its own is here: the cached residual is the Fn blocks' residual over that whole sequence
(8 text, 16 audio and 8 video tokens): on a cached step the final layer reads one hidden state, the Fn output plus
that stream's last computed residual, and both outputs (video and audio rows) come from it.
"""

from __future__ import annotations

import pytest

from family_harness import MINIMAX, check_served_from_one_residual, probed_split_calls

pytestmark = pytest.mark.comfyui

TEXT, AUDIO, VIDEO = slice(0, 8), slice(8, 24), slice(24, 32)   # rows of the packed sequence


def test_a_cached_step_serves_video_and_audio_from_one_hidden_state_per_stream(minimax_server, tmp_path):
    """CFG 3.5 with prompts of one length, the mask, the final-layer probe. On the cached step each stream's final
    layer reads its Fn output plus that stream's residual of its last computed step, over the whole packed sequence
    (text, audio and video rows): the video and the audio output both come from that one hidden state, and differ
    from a computed step only through it."""
    by_step = probed_split_calls(MINIMAX, minimax_server, "Krea2TestFinalLayerProbe", tmp_path / "calls.pt")
    check_served_from_one_residual(by_step, {"text rows": TEXT, "audio rows": AUDIO, "video rows": VIDEO}, atol=1e-6)
    for branch in (0, 1):
        cached = by_step[(2, branch)]
        assert tuple(cached["video"].shape) == (8, 96) and tuple(cached["audio"].shape) == (16, 32)
