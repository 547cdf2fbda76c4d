"""MiniMax H3 (audio + video) through CacheDiTDBCache and CacheDiTSpectrum in the real server.

What MiniMax H3's loop does differently, each checked here on a tiny seeded-random checkpoint (4 blocks,
64 wide, detected by ComfyUI's own model detection) at 4 steps, with ComfyUI's own MiniMax H3 latent
(``EmptyMiniMaxH3LatentAV``: a 64x64, 5-frame video latent and its 8-frame stereo audio latent) and the
sampled latent split into its video and audio latents by ComfyUI's ``LTXVSeparateAVLatent``:

- the model is called with a list of latents [video, audio] and packs text, audio and video tokens into
  one sequence of shape (tokens, width), with no batch dimension: ComfyUI never batches its cond and
  uncond (each carries its own packed layout, which no other cond's equals), so CFG > 1 is always split,
  even with prompts of one length, and each stream has its own cache;
- the cached residual is the Fn blocks' residual over that whole sequence (8 text, 16 audio and 8 video
  tokens here): on a cached step the final layer reads one hidden state, the Fn output plus that
  stream's last computed residual, and both outputs (video and audio rows) come from it;
- blocks add into their input in place (the cache hands them a copy where it keeps the input);
- ``patches_replace`` "dit" replacements by block index: such calls are computed in full;
- caching off is bit-identical to the graph without the node, for the video and the audio latent.

Also run on it: threshold caching, EasyCache refused, heun, a LoRA in native keys, TorchCompileModel,
two devices (ComfyUI's multi-GPU CFG split, one copy per cond), the Forecast node split and at CFG 1.
"""

from __future__ import annotations

import pytest
import torch

from family_prompts import FAMILIES, family_prompt
from helpers import (EASYCACHE, FAST, OFF, av_latents_and_record, check_left_to_easycache, check_one_list_record,
                     check_one_stream_per_device, check_threshold_caching, write_native_lora)
from krea2_prompts import with_forecast, with_lora

pytestmark = pytest.mark.comfyui

FAMILY = "minimax_h3"
SPEC = FAMILIES[FAMILY]
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 71
TEXT, AUDIO, VIDEO = slice(0, 8), slice(8, 24), slice(24, 32)   # rows of the packed sequence
LORA_LAYERS = [f"blocks.{block}.{layer}" for block in range(4) for layer in ("attn.out_proj", "mlp.fc2")]


def prompt(cfg=1.0, cache=None, seed=SEED, steps=STEPS, prefix="minimax", **kwargs) -> dict:
    """The family graph with the sampled AV latent split by ComfyUI's node: video saved by "7", audio by "15"."""
    return with_separate_av(family_prompt(FAMILY, cfg=cfg, cache=cache, seed=seed, steps=steps, prefix=prefix,
                                          **kwargs))


def with_separate_av(graph: dict) -> dict:
    """The sampled AV latent split by ComfyUI's ``LTXVSeparateAVLatent`` ("14"): the video latent saved by "7",
    the audio latent by "15"."""
    graph["14"] = {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["6", 0]}}
    graph["7"]["inputs"]["samples"] = ["14", 0]
    prefix = graph["7"]["inputs"]["filename_prefix"]
    graph["15"] = {"class_type": "SaveLatent", "inputs": {"samples": ["14", 1], "filename_prefix": f"{prefix}_audio"}}
    return graph


def after_loader(graph: dict, node_id: str, node: dict) -> dict:
    graph[node_id] = {"class_type": node["class_type"], "inputs": {"model": ["1", 0], **node["inputs"]}}
    graph["5" if "5" in graph else "6"]["inputs"]["model"] = [node_id, 0]
    return graph


def run(server, graph: dict, timeout: float = 600.0):
    """(video latent, audio latent, the record of node "5" of this prompt or None)."""
    return av_latents_and_record(server, graph, timeout=timeout)


def check_record(record: dict, calls: int, mode: str, cached=MASK_CACHED):
    check_one_list_record(record, SPEC.name, SPEC.blocks, STEPS, calls, mode, cached)


@pytest.fixture(scope="module")
def server(minimax_server):
    return minimax_server


@pytest.fixture(scope="module")
def split(server, tmp_path_factory):
    """CFG 3.5 with prompts of one length, the mask, the final-layer probe: (video, audio, record, calls)."""
    log = tmp_path_factory.mktemp("minimax_probe") / "calls.pt"
    graph = after_loader(prompt(cfg=3.5, cache=FAST, prefix="minimax_split"), "20",
                         {"class_type": "Krea2TestFinalLayerProbe", "inputs": {"log_path": str(log)}})
    video, audio, record = run(server, graph)
    return video, audio, record, torch.load(log)


def test_cfg_1_caches_the_mask_with_each_calls_true_block_count(server):
    video, audio, record = run(server, prompt(cache=FAST, prefix="minimax_cfg1"))
    check_record(record, calls=STEPS, mode="none")
    assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()
    assert tuple(video.shape) == (1, 24, 2, 4, 4) and tuple(audio.shape) == (1, 32, 2, 8)


def test_cfg_above_1_is_split_even_with_prompts_of_one_length_and_caches_per_stream(split):
    _, _, record, _ = split
    check_record(record, calls=2 * STEPS, mode="split")
    assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "cond first, then uncond"
    assert sorted(s["branches"] for s in record["streams"]) == [[0], [1]]
    assert all(s["cached_steps"] == MASK_CACHED for s in record["streams"])


def test_a_cached_step_serves_video_and_audio_from_one_hidden_state_per_stream(split):
    """On the cached step each stream's final layer reads its Fn output plus that stream's residual of its
    last computed step, over the whole packed sequence (text, audio and video rows): the video and the
    audio output both come from that one hidden state, and differ from a computed step only through it."""
    _, _, _, calls = split
    assert [c["branches"] for c in calls] == [[0], [1]] * STEPS
    by_step = {(step, branch): calls[2 * step + branch] for step in range(STEPS) for branch in (0, 1)}
    residuals = {}
    for branch in (0, 1):
        computed = by_step[(1, branch)]
        residual = computed["final_in"] - computed["fn_out"]
        for rows in (TEXT, AUDIO, VIDEO):
            assert residual[rows].abs().mean() > 0, "the residual covers every part of the sequence"
        cached = by_step[(2, branch)]
        assert torch.allclose(cached["final_in"], cached["fn_out"] + residual, rtol=0, atol=1e-6)
        # A computed step's final input is not its Fn output plus the previous residual (the check can fail).
        later = by_step[(3, branch)]
        assert not torch.allclose(later["final_in"], later["fn_out"] + residual, rtol=0, atol=1e-3)
        residuals[branch] = residual
        assert tuple(cached["video"].shape) == (8, 96) and tuple(cached["audio"].shape) == (16, 32)
    # Each CFG stream its own cache: cond's and uncond's residuals differ.
    assert not torch.allclose(residuals[0], residuals[1], rtol=0, atol=1e-3)


def test_caching_off_is_bit_identical_to_no_node_for_video_and_audio(server):
    plain_video, plain_audio, _ = run(server, prompt(cfg=3.5, prefix="minimax_plain"))
    video, audio, record = run(server, prompt(cfg=3.5, cache=OFF, prefix="minimax_off"))
    assert record["cfg_mode"] == "split" and record["cached_steps"] == [] and record["calls"] == 2 * STEPS
    assert record["block_evals"] == 2 * STEPS * SPEC.blocks
    assert torch.equal(video, plain_video) and torch.equal(audio, plain_audio)
    cached_video, cached_audio, _ = run(server, prompt(cfg=3.5, cache=FAST, prefix="minimax_cached"))
    assert not torch.equal(cached_video, plain_video) and not torch.equal(cached_audio, plain_audio)


def test_threshold_caching_decides_by_the_measured_change(server):
    """8 steps: at threshold 2 every step the limits allow is cached; just above the smallest measured change
    after warmup, a step is cached exactly when its change is below (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: run(server, prompt(
        steps=8, cache={"residual_diff_threshold": threshold}, prefix=f"minimax_thr_{label}"))[2], full=True)


def test_easycache_on_the_same_model_leaves_the_run_to_it(server):
    alone_video, alone_audio, _ = run(server, after_loader(prompt(prefix="minimax_easy"), "20", EASYCACHE))
    video, audio, record = run(server, after_loader(prompt(cache=FAST, prefix="minimax_easy_node"), "20", EASYCACHE))
    check_left_to_easycache(record, (video, audio), (alone_video, alone_audio))


def test_calls_with_a_dit_block_replacement_are_computed_in_full(server):
    """The loop calls a ``patches_replace["dit"]`` entry in place of block 1 (by index): the cache would
    skip it, so such calls run in full, exactly as without the node, and the stats say so."""
    replace = {"class_type": "Krea2TestBlockReplace", "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}}
    plain_video, plain_audio, _ = run(server, after_loader(prompt(prefix="minimax_replaced"), "20", replace))
    unpatched_video, _, _ = run(server, prompt(prefix="minimax_unreplaced"))
    assert not torch.equal(plain_video, unpatched_video), "the replacement must change the result"
    video, audio, record = run(server, after_loader(prompt(cache=FAST, prefix="minimax_replaced_node"), "20",
                                                    replace))
    assert torch.equal(video, plain_video) and torch.equal(audio, plain_audio)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any("patches_replace.dit" in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


def test_heun_serves_each_steps_first_evaluation_and_off_is_bit_identical(server):
    """Split CFG with heun: each step's first evaluation per stream goes through the cache, the corrector's
    through the model's own loop; the mask's step is cached, and caching off equals no node."""
    *_, record = run(server, prompt(cfg=3.5, sampler="heun", cache=FAST, prefix="minimax_heun"))
    assert record["cfg_mode"] == "split" and record["cached_steps"] == MASK_CACHED
    evaluations = 2 * (2 * STEPS - 1)   # heun's last step has no corrector
    assert record["calls"] == evaluations and record["extra_calls"] == evaluations - 2 * STEPS
    plain = run(server, prompt(cfg=3.5, sampler="heun", prefix="minimax_heun_plain"))
    off = run(server, prompt(cfg=3.5, sampler="heun", cache=OFF, prefix="minimax_heun_off"))
    assert torch.equal(off[0], plain[0]) and torch.equal(off[1], plain[1])


@pytest.fixture(scope="module")
def lora(server):
    """A rank-4 LoRA on every block's attention and MLP output in MiniMax H3's native key names."""
    return write_native_lora(server, server.base_dir / "models" / "diffusion_models" / SPEC.model, LORA_LAYERS,
                             "minimax_h3_test_lora.safetensors")


@pytest.fixture(scope="module")
def eager(server):
    """CFG 1 with the mask, no LoRA, not compiled: (video, audio, record)."""
    return run(server, prompt(cache=FAST, prefix="minimax_eager"))


def test_a_lora_in_native_keys_changes_video_and_audio_and_the_mask_still_caches(server, eager, lora):
    reference_video, reference_audio, _ = eager
    start = len(server.log_text())
    video, audio, record = run(server, with_lora(prompt(cache=FAST, prefix="minimax_lora"), lora, 1.0, "lora_first"))
    check_record(record, calls=STEPS, mode="none")
    assert not torch.equal(video, reference_video) and not torch.equal(audio, reference_audio)
    assert "lora key not loaded" not in server.log_text()[start:]


def test_torch_compile_model_before_the_node_caches_the_same_steps(server, eager):
    reference_video, reference_audio, eager_record = eager
    compile_node = {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}}
    video, audio, record = run(server, after_loader(prompt(cache=FAST, prefix="minimax_compiled"), "20", compile_node),
                               timeout=900)
    check_record(record, calls=STEPS, mode="none")
    assert record["block_evals"] == eager_record["block_evals"]
    for compiled, reference in ((video, reference_video), (audio, reference_audio)):
        assert float((compiled - reference).norm() / reference.norm()) < 1e-3


def test_two_devices_cache_one_stream_each(server):
    """ComfyUI's multi-GPU CFG split applies: the conds never batch, so each device copy runs one stream;
    caching off equals the two-device graph without the node, and the mask caches on both."""
    def two_devices(cache, prefix):
        return after_loader(prompt(cfg=3.5, cache=cache, prefix=prefix), "20",
                            {"class_type": "Krea2TestMultiGPU", "inputs": {}})

    plain_video, plain_audio, _ = run(server, two_devices(None, "minimax_mgpu_plain"))
    off_video, off_audio, off = run(server, two_devices(OFF, "minimax_mgpu_off"))
    assert off["device_count"] == 2 and off["cached_steps"] == []
    assert torch.equal(off_video, plain_video) and torch.equal(off_audio, plain_audio)
    *_, record = run(server, two_devices(FAST, "minimax_mgpu_fast"))
    check_one_stream_per_device(record, SPEC.name, MASK_CACHED)


def test_the_spectrum_node_forecasts_the_hidden_state_both_outputs_read(server):
    """turbo_5_of_8, split CFG and CFG 1: steps 2, 4 and 6 forecast per stream, each a call that runs no block; the
    final layer reads the forecast hidden state of the whole sequence, so video and audio are both served."""
    from test_forecast_comfyui import FORECAST_STEPS, check_forecast

    video, audio, record = run(server, with_forecast(prompt(cfg=3.5, steps=8, cache={}, prefix="minimax_spectrum")))
    check_forecast(record, FAMILY, calls_per_step=2)
    assert (record["cfg_mode"], sorted(s["branches"] for s in record["streams"])) == ("split", [[0], [1]])
    assert all(s["cached_steps"] == FORECAST_STEPS for s in record["streams"]), "a history per stream"
    assert torch.isfinite(video).all() and torch.isfinite(audio).all()
    # CFG 1 (its other layout: ComfyUI never batches MiniMax H3's conds): one stream, the same steps.
    *_, one = run(server, with_forecast(prompt(cfg=1.0, steps=8, cache={}, prefix="minimax_spectrum_cfg1")))
    check_forecast(one, FAMILY, calls_per_step=1)
    assert (one["cfg_mode"], len(one["streams"])) == ("none", 1)
