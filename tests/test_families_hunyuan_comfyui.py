"""HunyuanVideo 1.5 and HunyuanImage 2.1 through CacheDiTDBCache and CacheDiTSpectrum in the real server.

Both are ComfyUI's one ``HunyuanVideo`` class: Flux's double-stream blocks called by keyword, then Flux's
single-stream blocks, both adding into their input in place. HunyuanVideo 1.5 has no single-stream blocks
(the real one: 54 double + 0 single), so its one cache context is the double list; HunyuanImage 2.1 has both.
Tiny seeded-random checkpoints in ComfyUI's native keys, detected by ComfyUI's own model detection as
``HunyuanVideo15`` and ``HunyuanImage21`` (devkit/comfy_models.py), on a module server of their own (the
checkpoints are 16 and 9 MB: written only when these tests run). HunyuanVideo 1.5 samples a 5-frame 64x64
video latent at 8 steps:

- CFG 1 with the step mask, each block's attention seeing its true index, list size and type on computed
  and cached steps; batched and split CFG with the mask; caching off bit-identical to no node (split CFG);
- threshold caching deciding by the measured change; EasyCache on the same model left to run alone;
- a ``patches_replace`` double block and a ControlNet's ``control`` computed in full, as without the node;
- heun (two evaluations a step) with split CFG, and caching off under heun bit-identical;
- a LoRA in native keys; TorchCompileModel before the node;
- two devices (ComfyUI's MultiGPU CFG split): off bit-identical and the mask cached on both;
- the Forecast node's preset forecasting its steps at CFG 1, batched and split, a forecast call running no block.

HunyuanImage 2.1 (2D latent, two lists): the mask cached in both lists with batched CFG and caching off
bit-identical; on two devices, the mask cached in both lists on both.
"""

from __future__ import annotations

import pytest
import torch

from comfy_harness import ComfyServer
from comfy_models import FAMILY_MODELS, make_family_checkpoint
from family_prompts import FAMILIES, family_prompt
from helpers import (EASYCACHE, FAST, FAST_8_CACHED, OFF, check_left_to_easycache, check_one_stream_per_device,
                     check_threshold_caching, latent_and_record, write_native_lora)
from krea2_prompts import with_lora
from test_families_comfyui import blocks_seen, with_probe
from test_families_compat_comfyui import insert_after_loader
from test_families_sampling_comfyui import check_two_evaluation_record
from test_forecast_comfyui import check_every_cfg_layout

pytestmark = pytest.mark.comfyui

VIDEO, IMAGE = "hunyuan_video15", "hunyuan_image21"
STEPS = 8
SEED = 91
DOUBLE = FAMILIES[VIDEO].blocks   # 3 double blocks, no single ones


@pytest.fixture(scope="module")
def server(comfy_root, tmp_path_factory):
    """A real ComfyUI server with the tiny HunyuanVideo 1.5 and HunyuanImage 2.1."""
    base = ComfyServer.prepare_base_dir(tmp_path_factory.mktemp("comfy_hunyuan"))
    for family in (VIDEO, IMAGE):
        make_family_checkpoint(comfy_root, family, base / "models" / "diffusion_models" / FAMILY_MODELS[family],
                               seed=list(FAMILY_MODELS).index(family))
    server = ComfyServer(comfy_root, base).start()
    yield server
    server.stop()


def prompt(family=VIDEO, cfg=1.0, neg_tokens=8, cache=None, seed=SEED, prefix="hunyuan", **kwargs) -> dict:
    return family_prompt(family, cfg=cfg, neg_tokens=neg_tokens, cache=cache, seed=seed, steps=STEPS,
                         prefix=prefix, **kwargs)


def run(server, graph, node_id="5"):
    return latent_and_record(server, graph, node_id, timeout=600)


def check_record(record: dict, calls: int, mode: str, family=VIDEO, cached=FAST_8_CACHED):
    spec = FAMILIES[family]
    assert record["status"] == "ok" and record["model"] == spec.name and record["steps"] == STEPS
    assert record["node_id"] == "5" and record["cfg_mode"] == mode and record["calls"] == calls
    assert record["has_separate_cfg"] == (mode == "split")
    assert record["cached_steps"] == cached
    # A computed call runs every block, a cached one the first block of each list (Fn 1, Bn 0).
    lists = len(spec.block_lists)
    per_step = calls // STEPS
    assert record["block_evals_uncached"] == calls * spec.blocks
    assert record["block_evals"] == per_step * (spec.blocks * (STEPS - len(cached)) + lists * len(cached))


# --- HunyuanVideo 1.5 ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cfg_1(server, tmp_path_factory):
    """CFG 1 with the mask, the attention probe after the loader: (latent, record, blocks seen per call)."""
    log = tmp_path_factory.mktemp("hunyuan_probe") / "attention.jsonl"
    latent, record = run(server, with_probe(prompt(cache=FAST, prefix="hunyuan_cfg1"), log))
    return latent, record, blocks_seen(log)


def test_cfg_1_caches_the_mask_in_the_one_list_and_each_block_sees_its_true_index(cfg_1):
    _, record, seen = cfg_1
    check_record(record, calls=STEPS, mode="none")
    assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    # The empty single-stream list is no cache context: one list, reported as a one-list model.
    assert record["block_lists"] == [] and not any("blocks" in stream for stream in record["streams"])
    every_block = [("double", i, DOUBLE) for i in range(DOUBLE)]
    assert seen == [[("double", 0, DOUBLE)] if step in FAST_8_CACHED else every_block for step in range(STEPS)]


@pytest.mark.parametrize("neg_tokens, mode", [(8, "batched"), (13, "split")])
def test_batched_and_split_cfg_cache_the_mask(server, neg_tokens, mode):
    _, record = run(server, prompt(cfg=3.5, neg_tokens=neg_tokens, cache=FAST, prefix=f"hunyuan_{mode}"))
    if mode == "batched":
        check_record(record, calls=STEPS, mode="batched")
        assert record["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"
    else:
        check_record(record, calls=2 * STEPS, mode="split")
        assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
        assert {s["branches"][0] for s in record["streams"]} == {0, 1}


def test_caching_off_is_bit_identical_to_no_node(server):
    plain, _ = run(server, prompt(cfg=3.5, neg_tokens=13, prefix="hunyuan_plain"), node_id=None)
    off, record = run(server, prompt(cfg=3.5, neg_tokens=13, cache=OFF, prefix="hunyuan_off"))
    assert record["model"] == FAMILIES[VIDEO].name and record["cfg_mode"] == "split"
    assert record["cached_steps"] == [] and record["calls"] == 2 * STEPS
    assert record["block_evals"] == 2 * STEPS * DOUBLE
    assert torch.equal(off, plain)


def test_threshold_caching_decides_by_the_measured_change(server):
    """Threshold 2 caches every step the limits allow; one just above the smallest measured change after
    warmup caches exactly the steps whose change is below it (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: run(server, prompt(
        cache={"residual_diff_threshold": threshold}, prefix=f"hunyuan_thr_{label}"))[1], steps=STEPS, full=True)


def test_easycache_on_the_same_model_leaves_the_run_to_it(server):
    alone, _ = run(server, insert_after_loader(prompt(prefix="hunyuan_easy_alone"), "14", EASYCACHE), node_id=None)
    latent, record = run(server, insert_after_loader(prompt(cache=FAST, prefix="hunyuan_easy"), "14", EASYCACHE))
    check_left_to_easycache(record, (latent,), (alone,))


def _replace_double_block(graph):
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestBlockReplace",
                                             "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}})


def _control(graph):
    """A ControlNet's residual for double block 1's image tokens (the model call's ``control``)."""
    graph["21"] = {"class_type": "Krea2TestBlockControl",
                   "inputs": {"conditioning": ["2", 0], "block": 1, "features": 128, "scale": 0.5}}
    graph["6"]["inputs"]["positive"] = ["21", 0]
    return graph


@pytest.mark.parametrize("patch, expected", [(_replace_double_block, "patches_replace.dit"), (_control, "control")],
                         ids=["patches_replace", "control"])
def test_calls_with_a_patch_the_block_loop_applies_are_computed_in_full(server, patch, expected):
    """The loop replaces a ``patches_replace`` block and adds a ControlNet's residual after a block, by index:
    under the cache it would see one wrapper, so such calls run in full, exactly as without the node."""
    without, _ = run(server, prompt(seed=41, prefix="hunyuan_unpatched"), node_id=None)
    plain, _ = run(server, patch(prompt(seed=41, prefix="hunyuan_patched")), node_id=None)
    assert not torch.equal(plain, without), "the patch must change the result, or the check says nothing"
    latent, record = run(server, patch(prompt(seed=41, cache=FAST, prefix="hunyuan_patched_cached")))
    assert torch.equal(latent, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any(expected in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


def test_heun_with_split_cfg_serves_first_evaluations_and_off_is_bit_identical(server):
    _, record = run(server, prompt(cfg=3.5, neg_tokens=13, sampler="heun", cache=FAST, prefix="hunyuan_heun"))
    check_two_evaluation_record(record, VIDEO, [[0], [1]], "split")
    plain, _ = run(server, prompt(cfg=3.5, neg_tokens=13, sampler="heun", seed=5, prefix="hunyuan_heun_plain"),
                   node_id=None)
    off, record = run(server, prompt(cfg=3.5, neg_tokens=13, sampler="heun", seed=5, cache=OFF,
                                     prefix="hunyuan_heun_off"))
    assert record["cached_steps"] == [] and record["block_evals"] == record["calls"] * DOUBLE
    assert torch.equal(off, plain)


@pytest.fixture(scope="module")
def lora(server):
    """A rank-4 LoRA on every double block's image attention and MLP output, in ComfyUI's native key names,
    each update about as large as the weight it changes (std 1/sqrt(fan_in))."""
    layers = [f"double_blocks.{block}.{layer}" for block in range(DOUBLE) for layer in ("img_attn.proj", "img_mlp.2")]
    return write_native_lora(server, server.base_dir / "models" / "diffusion_models" / FAMILY_MODELS[VIDEO], layers,
                             "hunyuan_video15_test_lora.safetensors")


def test_a_lora_in_native_keys_changes_the_image_and_the_mask_still_caches(server, cfg_1, lora):
    reference, _, _ = cfg_1   # the same graph without the LoRA (the attention probe changes no tensor)
    start = len(server.log_text())
    latent, record = run(server, with_lora(prompt(cache=FAST, prefix="hunyuan_lora"), lora, 1.0, "lora_first"))
    check_record(record, calls=STEPS, mode="none")
    assert torch.isfinite(latent).all()
    assert not torch.equal(latent, reference), "the LoRA must change the result, or the check says nothing"
    assert "lora key not loaded" not in server.log_text()[start:]


def test_torch_compile_model_before_the_node_caches_the_same_steps(server, cfg_1):
    reference, eager_record, _ = cfg_1
    graph = insert_after_loader(prompt(cache=FAST, prefix="hunyuan_compiled"), "20",
                                {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}})
    compiled, record = run(server, graph)
    check_record(record, calls=STEPS, mode="none")
    assert record["block_evals"] == eager_record["block_evals"]
    assert float((compiled - reference).norm() / reference.norm()) < 1e-3


def two_devices(graph):
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestMultiGPU", "inputs": {}})


def test_two_devices_off_is_bit_identical_and_the_mask_caches_on_both(server):
    """The one block list (the single-stream list is empty) decided once per step for both devices."""
    split = dict(cfg=3.5, neg_tokens=13, seed=71)
    plain, _ = run(server, two_devices(prompt(**split, prefix="hunyuan_mgpu_plain")), node_id=None)
    off, off_record = run(server, two_devices(prompt(**split, cache=OFF, prefix="hunyuan_mgpu_off")))
    assert off_record["device_count"] == 2 and off_record["cached_steps"] == []
    assert torch.equal(off, plain)
    _, record = run(server, two_devices(prompt(**split, cache=FAST, prefix="hunyuan_mgpu_fast")))
    check_one_stream_per_device(record, FAMILIES[VIDEO].name, FAST_8_CACHED)


def test_the_spectrum_node_forecasts_its_presets_steps_in_every_cfg_layout(server):
    check_every_cfg_layout(server, VIDEO, seed=SEED, prefix="hunyuan_spectrum")


# --- HunyuanImage 2.1 ---------------------------------------------------------------------------

def test_hunyuan_image_caches_the_mask_in_both_lists_and_off_is_bit_identical(server):
    plain, _ = run(server, prompt(IMAGE, cfg=3.5, prefix="hunyuan_image_plain"), node_id=None)
    off, off_record = run(server, prompt(IMAGE, cfg=3.5, cache=OFF, prefix="hunyuan_image_off"))
    assert off_record["cached_steps"] == [] and torch.equal(off, plain)
    latent, record = run(server, prompt(IMAGE, cfg=3.5, cache=FAST, prefix="hunyuan_image"))
    check_record(record, calls=STEPS, mode="batched", family=IMAGE)
    assert [(b["blocks"], b["size"], b["cached_steps"]) for b in record["block_lists"]] == [
        ("double_blocks", 2, FAST_8_CACHED), ("single_blocks", 2, FAST_8_CACHED)]
    assert latent.shape == plain.shape and latent.ndim == 4 and torch.isfinite(latent).all()


def test_hunyuan_image_on_two_devices_caches_the_mask_in_both_lists_on_both(server):
    """Split CFG over two device copies (cond on one, uncond on the other): one decision per step and list."""
    latent, record = run(server, two_devices(prompt(IMAGE, cfg=3.5, neg_tokens=13, cache=FAST,
                                                    prefix="hunyuan_image_mgpu")))
    assert record["status"] == "ok" and record["device_count"] == 2 and record["warnings"] == []
    assert record["cached_steps"] == FAST_8_CACHED and record["cfg_mode"] == "split"
    for device, branch in zip(record["devices"], (0, 1)):
        assert {tuple(entry[1]) for entry in device["call_log"]} == {(branch,)}
        assert [(b["blocks"], b["cached_steps"]) for b in device["block_lists"]] == [
            ("double_blocks", FAST_8_CACHED), ("single_blocks", FAST_8_CACHED)]
    assert torch.isfinite(latent).all()
