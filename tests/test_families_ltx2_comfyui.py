"""LTX-2 (audio + video) through CacheDiTDBCache in the real server, with ComfyUI's own LTXV latent nodes.

The checkpoint (4 blocks; video 128 wide, audio 64 wide; detected by ComfyUI's own model detection with
the metadata config real LTX-2 files carry; written only when one of these tests runs) samples, at 4 steps,
a 64x64 9-frame video latent (8 tokens) joined with an 8-frame audio latent (8 tokens) by ComfyUI's
``LTXVConcatAVLatent``; the sampled latent is split by ``LTXVSeparateAVLatent`` and both parts saved.
What LTX-2's loop makes its own, each checked here:

- the blocks take the pair (video tokens, audio tokens) first, two widths, update both in place and
  return them: cache-dit gets the pair as one tensor, so the residual it decides on and adds is the
  video and the audio tokens together; on a cached step the video and the audio final norms read the Fn
  output plus that stream's last computed residual, both parts from one residual, per CFG stream;
- CFG 1, batched and split, each with the step mask cached (Fn 1, Bn 0: a cached call runs block 0);
- caching off bit-identical to the graph without the node, for the video and the audio latent;
- threshold caching: a step cached exactly when its measured change is below the threshold;
- EasyCache on the same model leaves the run to it;
- calls with a ``patches_replace["dit"]`` block, or with ``stg_self_attn_blocks`` naming blocks whose
  self-attention the loop perturbs, computed in full (the loop applies both by block index);
- ComfyUI's own STG guidance node (an extra call per step with blocks perturbed): that call computed in
  full beside the cache, the mask's step still cached, caching off bit-identical;
- heun, a LoRA in LTX-2's native keys, TorchCompileModel, two devices (ComfyUI's multi-GPU CFG split);
- the Forecast node refuses it by name (two final layers: nothing single to forecast).
"""

from __future__ import annotations

import pytest
import torch

from family_prompts import FAMILIES, family_prompt
from helpers import (EASYCACHE, FAST, OFF, av_latents_and_record, check_left_to_easycache, check_one_list_record,
                     check_one_stream_per_device, check_threshold_caching, prompt_error, write_native_lora)
from krea2_prompts import with_forecast, with_lora
from test_families_compat_comfyui import insert_after_loader

pytestmark = pytest.mark.comfyui

FAMILY = "ltx2"
SPEC = FAMILIES[FAMILY]
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 101
VIDEO_VALUES = 8 * 128   # 8 video tokens of width 128, then 8 audio tokens of width 64, in the flat hidden state
AUDIO_VALUES = 8 * 64
LORA_LAYERS = [f"transformer_blocks.{block}.{layer}" for block in range(4)
               for layer in ("attn1.to_out.0", "ff.net.2", "audio_attn1.to_out.0", "audio_ff.net.2")]


@pytest.fixture(scope="module")
def server(ltx2_server):
    return ltx2_server


def with_av_latent(graph: dict) -> dict:
    """A family graph sampling an AV latent: the video latent "4" joined with an 8-frame audio latent ("16")
    by "17", the sampled latent split by "14": video saved by "7", audio by "15"."""
    graph["16"] = {"class_type": "Krea2TestEmptyAudioLatent", "inputs": {"length": 8}}
    graph["17"] = {"class_type": "LTXVConcatAVLatent", "inputs": {"video_latent": ["4", 0], "audio_latent": ["16", 0]}}
    graph["6"]["inputs"]["latent_image"] = ["17", 0]
    graph["14"] = {"class_type": "LTXVSeparateAVLatent", "inputs": {"av_latent": ["6", 0]}}
    graph["7"]["inputs"]["samples"] = ["14", 0]
    prefix = graph["7"]["inputs"]["filename_prefix"]
    graph["15"] = {"class_type": "SaveLatent", "inputs": {"samples": ["14", 1], "filename_prefix": f"{prefix}_audio"}}
    return graph


def prompt(cfg=1.0, neg_tokens=8, cache=None, seed=SEED, steps=STEPS, prefix="ltx2", **kwargs) -> dict:
    return with_av_latent(family_prompt(FAMILY, cfg=cfg, neg_tokens=neg_tokens, cache=cache, seed=seed, steps=steps,
                                        prefix=prefix, **kwargs))


def run(server, graph: dict, timeout: float = 600.0):
    """(video latent, audio latent, the record of node "5" of this prompt or None)."""
    return av_latents_and_record(server, graph, timeout=timeout)


def check_record(record: dict, calls: int, mode: str, cached=MASK_CACHED):
    check_one_list_record(record, SPEC.name, SPEC.blocks, STEPS, calls, mode, cached)


@pytest.fixture(scope="module")
def cfg_1(server):
    """CFG 1 with the mask: (video, audio, record)."""
    return run(server, prompt(cache=FAST, prefix="ltx2_cfg1"))


def test_cfg_1_caches_the_mask_close_to_the_graph_without_the_node(server, cfg_1):
    """The cached step adds the residual the cache kept of blocks 1-3 to video and audio: both close to the
    graph without the node, not equal."""
    video, audio, record = cfg_1
    check_record(record, calls=STEPS, mode="none")
    assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    assert tuple(video.shape) == (1, 128, 2, 2, 2) and tuple(audio.shape) == (1, 8, 8, 16)
    plain_video, plain_audio, _ = run(server, prompt(prefix="ltx2_cfg1_plain"))
    for cached, plain in ((video, plain_video), (audio, plain_audio)):
        error = float((cached - plain).norm() / plain.norm())
        assert 0 < error < 0.1, error


@pytest.mark.parametrize("neg_tokens, mode", [(8, "batched"), (13, "split")])
def test_batched_and_split_cfg_cache_the_mask(server, neg_tokens, mode):
    *_, record = run(server, prompt(cfg=3.5, neg_tokens=neg_tokens, cache=FAST, prefix=f"ltx2_{mode}"))
    if mode == "batched":
        check_record(record, calls=STEPS, mode="batched")
        assert record["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"
    else:
        check_record(record, calls=2 * STEPS, mode="split")
        assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
        assert sorted(s["branches"] for s in record["streams"]) == [[0], [1]]


def test_a_cached_step_serves_video_and_audio_from_one_residual_per_stream(server, tmp_path):
    """Split CFG, the mask, a probe on the model's own first block and final norms. On the cached step each
    stream's video and audio norms read that call's Fn output plus the stream's residual of its last
    computed step, over video and audio tokens together: both parts change through that one residual."""
    log = tmp_path / "calls.pt"
    graph = insert_after_loader(prompt(cfg=3.5, neg_tokens=13, cache=FAST, prefix="ltx2_probe"), "20",
                                {"class_type": "Krea2TestPairedHiddenProbe", "inputs": {"log_path": str(log)}})
    *_, record = run(server, graph)
    check_record(record, calls=2 * STEPS, mode="split")
    calls = torch.load(log)
    assert [c["branches"] for c in calls] == [[0], [1]] * STEPS
    by_step = {(step, branch): calls[2 * step + branch] for step in range(STEPS) for branch in (0, 1)}
    residuals = {}
    for branch in (0, 1):
        computed = by_step[(1, branch)]
        residual = computed["final_in"] - computed["fn_out"]
        assert residual.numel() == VIDEO_VALUES + AUDIO_VALUES
        video_part, audio_part = residual[:VIDEO_VALUES], residual[VIDEO_VALUES:]
        assert video_part.abs().mean() > 0 and audio_part.abs().mean() > 0, "the residual covers both streams"
        cached = by_step[(2, branch)]
        assert torch.allclose(cached["final_in"], cached["fn_out"] + residual, rtol=0, atol=1e-5)
        # A computed step's final input is not its Fn output plus the previous residual (the check can fail).
        later = by_step[(3, branch)]
        assert not torch.allclose(later["final_in"], later["fn_out"] + residual, rtol=0, atol=1e-3)
        residuals[branch] = residual
    # Each CFG stream its own cache: cond's and uncond's residuals differ.
    assert not torch.allclose(residuals[0], residuals[1], rtol=0, atol=1e-3)


def test_caching_off_is_bit_identical_to_no_node_for_video_and_audio(server):
    plain_video, plain_audio, _ = run(server, prompt(cfg=3.5, neg_tokens=13, prefix="ltx2_plain"))
    video, audio, record = run(server, prompt(cfg=3.5, neg_tokens=13, cache=OFF, prefix="ltx2_off"))
    assert record["cfg_mode"] == "split" and record["cached_steps"] == [] and record["calls"] == 2 * STEPS
    assert record["block_evals"] == 2 * STEPS * SPEC.blocks
    assert torch.equal(video, plain_video) and torch.equal(audio, plain_audio)


def test_threshold_caching_decides_by_the_measured_change(server):
    """8 steps (warmup 4): each step after warmup cached exactly when its measured change (of video and audio
    tokens together) is below the threshold (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: run(server, prompt(
        steps=8, cache={"residual_diff_threshold": threshold}, prefix=f"ltx2_thr_{label}"))[2])


def test_easycache_on_the_same_model_leaves_the_run_to_it(server):
    alone_video, alone_audio, _ = run(server, insert_after_loader(prompt(prefix="ltx2_easy"), "20", EASYCACHE))
    video, audio, record = run(server, insert_after_loader(prompt(cache=FAST, prefix="ltx2_easy_node"), "20",
                                                           EASYCACHE))
    check_left_to_easycache(record, (video, audio), (alone_video, alone_audio))


@pytest.mark.parametrize("node, named", [
    ({"class_type": "Krea2TestBlockReplace", "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}},
     "patches_replace.dit"),
    ({"class_type": "Krea2TestTransformerOption", "inputs": {"key": "stg_self_attn_blocks", "blocks": "1"}},
     "stg_self_attn_blocks")], ids=["dit_replace", "stg_blocks"])
def test_calls_the_loop_treats_by_block_index_are_computed_in_full(server, node, named):
    """The loop calls a ``patches_replace["dit"]`` entry instead of block 1, or perturbs block 1's
    self-attention when ``stg_self_attn_blocks`` names it: the cache's wrapper would run block 1 as any
    other, so such calls run in full, exactly as without the node, and the stats say so."""
    unpatched_video, unpatched_audio, _ = run(server, prompt(prefix=f"ltx2_{named}_unpatched"))
    plain_video, plain_audio, _ = run(server, insert_after_loader(prompt(prefix=f"ltx2_{named}_plain"), "20", node))
    assert not torch.equal(plain_video, unpatched_video) and not torch.equal(plain_audio, unpatched_audio), \
        "the patch must change both results, or the check says nothing"
    video, audio, record = run(server, insert_after_loader(prompt(cache=FAST, prefix=f"ltx2_{named}"), "20", node))
    assert torch.equal(video, plain_video) and torch.equal(audio, plain_audio)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any(named in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


def test_stg_guidance_computes_its_extra_call_in_full_and_the_mask_still_caches(server):
    """ComfyUI's ``LTXVSpatioTemporalGuidance`` calls the model once more per step, with block 1's
    self-attention perturbed: that call runs in full beside the cache (the loop perturbs by index), the
    sampler's own calls follow the mask, and caching off equals the graph without the node."""
    stg = {"class_type": "LTXVSpatioTemporalGuidance",
           "inputs": {"scale": 1.0, "blocks": "1", "start_percent": 0.0, "end_percent": 1.0}}
    *_, record = run(server, insert_after_loader(prompt(cache=FAST, prefix="ltx2_stg"), "20", stg))
    assert record["cached_steps"] == MASK_CACHED and record["calls"] == STEPS
    assert any("stg_self_attn_blocks" in w for w in record["warnings"]), record["warnings"]
    plain_video, plain_audio, _ = run(server, insert_after_loader(prompt(prefix="ltx2_stg_plain"), "20", stg))
    video, audio, off = run(server, insert_after_loader(prompt(cache=OFF, prefix="ltx2_stg_off"), "20", stg))
    assert off["cached_steps"] == []
    assert torch.equal(video, plain_video) and torch.equal(audio, plain_audio)


def test_heun_serves_each_steps_first_evaluation_and_off_is_bit_identical(server):
    *_, record = run(server, prompt(cfg=3.5, neg_tokens=13, sampler="heun", cache=FAST, prefix="ltx2_heun"))
    assert record["cfg_mode"] == "split" and record["cached_steps"] == MASK_CACHED
    evaluations = 2 * (2 * STEPS - 1)   # heun's last step has no corrector
    assert record["calls"] == evaluations and record["extra_calls"] == evaluations - 2 * STEPS
    plain = run(server, prompt(sampler="heun", prefix="ltx2_heun_plain"))
    off = run(server, prompt(sampler="heun", cache=OFF, prefix="ltx2_heun_off"))
    assert torch.equal(off[0], plain[0]) and torch.equal(off[1], plain[1])


@pytest.fixture(scope="module")
def lora(server):
    """A rank-4 LoRA on each block's video and audio self-attention and MLP outputs, in LTX-2's native keys."""
    return write_native_lora(server, server.base_dir / "models" / "diffusion_models" / SPEC.model, LORA_LAYERS,
                             "ltx2_test_lora.safetensors")


def test_a_lora_in_native_keys_changes_video_and_audio_and_the_mask_still_caches(server, cfg_1, lora):
    reference_video, reference_audio, _ = cfg_1
    start = len(server.log_text())
    video, audio, record = run(server, with_lora(prompt(cache=FAST, prefix="ltx2_lora"), lora, 1.0, "lora_first"))
    check_record(record, calls=STEPS, mode="none")
    assert not torch.equal(video, reference_video) and not torch.equal(audio, reference_audio)
    assert "lora key not loaded" not in server.log_text()[start:]


def test_torch_compile_model_before_the_node_caches_the_same_steps(server, cfg_1):
    reference_video, reference_audio, eager = cfg_1
    compile_node = {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}}
    video, audio, record = run(server, insert_after_loader(prompt(cache=FAST, prefix="ltx2_compiled"), "20",
                                                           compile_node), timeout=900)
    check_record(record, calls=STEPS, mode="none")
    assert record["block_evals"] == eager["block_evals"]
    for compiled, reference in ((video, reference_video), (audio, reference_audio)):
        assert float((compiled - reference).norm() / reference.norm()) < 1e-3


def test_two_devices_off_is_bit_identical_and_a_mask_caches_on_both(server):
    """Split CFG with a second device copy (ComfyUI's multi-GPU CFG split): cond on one, uncond on the other."""
    def two_devices(cache, prefix):
        return insert_after_loader(prompt(cfg=3.5, neg_tokens=13, cache=cache, prefix=prefix), "20",
                                   {"class_type": "Krea2TestMultiGPU", "inputs": {}})

    plain_video, plain_audio, _ = run(server, two_devices(None, "ltx2_mgpu_plain"))
    off_video, off_audio, off = run(server, two_devices(OFF, "ltx2_mgpu_off"))
    assert off["device_count"] == 2 and off["cached_steps"] == []
    assert torch.equal(off_video, plain_video) and torch.equal(off_audio, plain_audio)
    *_, record = run(server, two_devices(FAST, "ltx2_mgpu_fast"))
    check_one_stream_per_device(record, SPEC.name, MASK_CACHED)


def test_the_spectrum_node_refuses_it_naming_what_it_forecasts(server):
    entry = server.run(with_forecast(prompt(cache={}, prefix="ltx2_spectrum")))
    error = prompt_error(entry)
    assert error is not None and "LTXAVModel" in error and "final layer" in error, error
