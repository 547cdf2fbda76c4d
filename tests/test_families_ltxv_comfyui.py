"""LTXV through CacheDiTDBCache and CacheDiTSpectrum in the real server, with ComfyUI's own LTXV nodes.

The checkpoint (4 blocks 128 wide, written only when a test asks for ``ltxv_server``) samples
a 9-frame 64x64 video from ``EmptyLTXVLatentVideo`` with the conditioning through ``LTXVConditioning``
(its frame rate), at 4 steps. What LTXV's loop makes its own, or every family must show on its model:

- CFG 1, batched and split, each with the step mask cached (Fn 1, Bn 0: a cached call runs block 0);
  at CFG 1 the cached step close to the graph without the node (the blocks add into their input in
  place: the cache must keep copies of it, or the residual it adds is zero and the step far off);
- caching off bit-identical to the graph without the node;
- threshold caching: a step cached exactly when its measured change is below the threshold;
- EasyCache on the same model leaves the run to it;
- calls with a ``patches_replace["dit"]`` block (the loop calls it by index) computed in full;
- heun (a corrector call per step computed beside the cache), off bit-identical;
- a LoRA in LTXV's native keys changes the image and the mask still caches;
- TorchCompileModel before the node caches the same steps;
- two devices (one list: the shared decision works): off bit-identical, the mask cached on both;
- the Spectrum node: its preset's steps forecast at CFG 1, batched and split, a forecast call running no block.
- LTX-2 (`LTXAVModel`, a subclass with a loop of its own) resolves to its own entry, never LTXV's.
"""

from __future__ import annotations

import pytest
import torch

from family_prompts import FAMILIES, family_prompt
from helpers import (EASYCACHE, FAST, OFF, check_left_to_easycache, check_one_stream_per_device,
                     check_threshold_caching, latent_and_record, write_native_lora)
from krea2_prompts import with_lora
from test_families_compat_comfyui import insert_after_loader
from test_forecast_comfyui import check_every_cfg_layout
from test_families_sampling_comfyui import check_two_evaluation_record

pytestmark = pytest.mark.comfyui

FAMILY = "ltxv"
SPEC = FAMILIES[FAMILY]
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 91
# The weights the test LoRA changes, in LTXV's native names: each block's self-attention and MLP outputs.
LORA_LAYERS = [f"transformer_blocks.{block}.{layer}" for block in range(4) for layer in ("attn1.to_out.0", "ff.net.2")]


def with_ltxv_conditioning(graph: dict, frame_rate: float = 25.0) -> dict:
    """ComfyUI's ``LTXVConditioning`` ("9") between the conditioning (with its attention mask: ``family_prompt``
    adds it) and the sampler."""
    graph["9"] = {"class_type": "LTXVConditioning",
                  "inputs": {"positive": ["2", 0], "negative": ["3", 0], "frame_rate": frame_rate}}
    graph["6"]["inputs"]["positive"], graph["6"]["inputs"]["negative"] = ["9", 0], ["9", 1]
    return graph


def prompt(cfg=1.0, neg_tokens=8, cache=None, seed=SEED, prefix="ltxv", steps=STEPS, **kwargs) -> dict:
    return with_ltxv_conditioning(family_prompt(FAMILY, cfg=cfg, neg_tokens=neg_tokens, cache=cache, seed=seed,
                                                steps=steps, prefix=prefix, **kwargs))


def check_record(record: dict, calls: int, mode: str):
    assert record["status"] == "ok" and record["model"] == SPEC.name and record["steps"] == STEPS
    assert record["node_id"] == "5" and record["cfg_mode"] == mode and record["calls"] == calls
    assert record["has_separate_cfg"] == (mode == "split")
    assert record["cached_steps"] == MASK_CACHED
    assert record["block_lists"] == [], "one list: the record's per-list account is for several"
    # A computed call runs all 4 blocks, a cached one block 0 only (Fn 1, Bn 0).
    per_step = calls // STEPS
    assert record["block_evals_uncached"] == calls * SPEC.blocks
    assert record["block_evals"] == per_step * (SPEC.blocks * (STEPS - len(MASK_CACHED)) + len(MASK_CACHED))
    # Which blocks each call ran: a cached step's calls the first block only.
    assert [call[3] for call in record["call_log"]] == [
        1 if call[0] in MASK_CACHED else SPEC.blocks for call in record["call_log"]]


@pytest.fixture(scope="module")
def cfg_1(ltxv_server):
    """CFG 1 with the mask: (latent, record)."""
    return latent_and_record(ltxv_server, prompt(cache=FAST, prefix="ltxv_cfg1"))


def test_cfg_1_caches_the_mask_with_the_residual_of_the_cached_blocks(ltxv_server, cfg_1):
    """The cached step adds the residual the cache kept of blocks 1-3: close to the graph without the node,
    not equal. Were that residual zero (blocks adding into the input the cache keeps), it would be far."""
    latent, record = cfg_1
    check_record(record, calls=STEPS, mode="none")
    assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    assert latent.shape[1:3] == (128, 2) and torch.isfinite(latent).all()
    plain, _ = latent_and_record(ltxv_server, prompt(prefix="ltxv_cfg1_plain"))
    error = float((latent - plain).norm() / plain.norm())
    assert 0 < error < 0.04, error   # 0.022 here; 0.073 with zero residuals


@pytest.mark.parametrize("neg_tokens, mode", [(8, "batched"), (13, "split")])
def test_batched_and_split_cfg_cache_the_mask(ltxv_server, neg_tokens, mode):
    _, record = latent_and_record(ltxv_server, prompt(cfg=3.5, neg_tokens=neg_tokens, cache=FAST,
                                                      prefix=f"ltxv_{mode}"))
    if mode == "batched":
        check_record(record, calls=STEPS, mode="batched")
        assert record["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"
    else:
        check_record(record, calls=2 * STEPS, mode="split")
        assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
        assert {s["branches"][0] for s in record["streams"]} == {0, 1}


def test_caching_off_is_bit_identical_to_no_node(ltxv_server):
    plain, _ = latent_and_record(ltxv_server, prompt(cfg=3.5, neg_tokens=13, prefix="ltxv_plain"))
    off, record = latent_and_record(ltxv_server, prompt(cfg=3.5, neg_tokens=13, cache=OFF, prefix="ltxv_off"))
    assert record["model"] == SPEC.name and record["cfg_mode"] == "split"
    assert record["cached_steps"] == [] and record["calls"] == 2 * STEPS
    assert record["block_evals"] == 2 * STEPS * SPEC.blocks
    assert torch.equal(off, plain)


def test_threshold_caching_decides_by_the_measured_change(ltxv_server):
    """8 steps (warmup 4): each step after warmup cached exactly when its measured change is below the
    threshold, one between the two smallest changes after warmup (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: latent_and_record(ltxv_server, prompt(
        cache={"residual_diff_threshold": threshold}, steps=8, prefix=f"ltxv_thr_{label}"))[1])


def test_easycache_on_the_same_model_leaves_the_run_to_it(ltxv_server):
    def with_easycache(graph):
        return insert_after_loader(graph, "14", EASYCACHE)

    alone, _ = latent_and_record(ltxv_server, with_easycache(prompt(prefix="ltxv_easy_alone")))
    latent, record = latent_and_record(ltxv_server, with_easycache(prompt(cache=FAST, prefix="ltxv_easy")))
    check_left_to_easycache(record, (latent,), (alone,))


def test_calls_with_a_block_replaced_by_index_are_computed_in_full(ltxv_server):
    """LTXV's loop calls a ``patches_replace["dit"]`` entry ("double_block", i) instead of block i, which
    the cache's wrapper would run: such calls run in full, exactly as without the node."""
    def replacing(graph):
        return insert_after_loader(graph, "20", {"class_type": "Krea2TestBlockReplace",
                                                 "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}})

    unpatched, _ = latent_and_record(ltxv_server, prompt(prefix="ltxv_unpatched"))
    plain, _ = latent_and_record(ltxv_server, replacing(prompt(prefix="ltxv_replace_plain")))
    assert not torch.equal(plain, unpatched), "the replacement must change the result, or the check says nothing"
    latent, record = latent_and_record(ltxv_server, replacing(prompt(cache=FAST, prefix="ltxv_replace")))
    assert torch.equal(latent, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any("patches_replace.dit" in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


def test_heun_serves_first_evaluations_and_off_is_bit_identical(ltxv_server):
    _, record = latent_and_record(ltxv_server, prompt(cfg=3.5, neg_tokens=13, sampler="heun", cache=FAST,
                                                      prefix="ltxv_heun"))
    check_two_evaluation_record(record, FAMILY, [[0], [1]], "split", steps=STEPS, cached_steps=MASK_CACHED)
    plain, _ = latent_and_record(ltxv_server, prompt(sampler="heun", prefix="ltxv_heun_plain"))
    off, record = latent_and_record(ltxv_server, prompt(sampler="heun", cache=OFF, prefix="ltxv_heun_off"))
    assert record["cached_steps"] == [] and record["block_evals"] == record["calls"] * SPEC.blocks
    assert torch.equal(off, plain)


@pytest.fixture(scope="module")
def lora(ltxv_server):
    """A rank-4 LoRA on ``LORA_LAYERS`` in ComfyUI's native key names, each update about as large as the
    weight it changes (std 1/sqrt(fan_in))."""
    return write_native_lora(ltxv_server, ltxv_server.base_dir / "models" / "diffusion_models" / SPEC.model,
                             LORA_LAYERS, "ltxv_test_lora.safetensors")


def test_a_lora_in_ltxvs_own_keys_changes_the_image_and_the_mask_still_caches(ltxv_server, cfg_1, lora):
    reference, _ = cfg_1
    start = len(ltxv_server.log_text())
    latent, record = latent_and_record(ltxv_server, with_lora(prompt(cache=FAST, prefix="ltxv_lora"), lora, 1.0,
                                                              "lora_first"))
    check_record(record, calls=STEPS, mode="none")
    assert torch.isfinite(latent).all()
    assert not torch.equal(latent, reference), "the LoRA must change the result, or the check says nothing"
    assert "lora key not loaded" not in ltxv_server.log_text()[start:]


def test_torch_compile_model_before_the_node_caches_the_same_steps(ltxv_server, cfg_1):
    reference, eager = cfg_1
    graph = insert_after_loader(prompt(cache=FAST, prefix="ltxv_compiled"), "20",
                                {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}})
    compiled, record = latent_and_record(ltxv_server, graph)
    assert record["cached_steps"] == eager["cached_steps"] == MASK_CACHED
    assert record["block_evals"] == eager["block_evals"]
    assert float((compiled - reference).norm() / reference.norm()) < 1e-3


def two_device_prompt(cache, prefix):
    """Split CFG (8 and 13 caption tokens) with a second device copy: cond on one device, uncond on the other."""
    graph = prompt(cfg=3.5, neg_tokens=13, cache=cache, prefix=prefix)
    return insert_after_loader(graph, "20", {"class_type": "Krea2TestMultiGPU", "inputs": {}})


def test_two_devices_off_is_bit_identical_and_a_mask_caches_on_both(ltxv_server):
    plain, _ = latent_and_record(ltxv_server, two_device_prompt(None, "ltxv_mgpu_plain"), node_id=None)
    off, off_record = latent_and_record(ltxv_server, two_device_prompt(OFF, "ltxv_mgpu_off"))
    assert off_record["device_count"] == 2 and off_record["cached_steps"] == []
    assert torch.equal(off, plain)
    _, record = latent_and_record(ltxv_server, two_device_prompt(FAST, "ltxv_mgpu_fast"))
    check_one_stream_per_device(record, SPEC.name, MASK_CACHED)


def test_the_spectrum_node_forecasts_its_presets_steps_in_every_cfg_layout(ltxv_server):
    """turbo_5_of_8 on ``norm_out``'s input at CFG 1, batched and split: steps 2, 4 and 6 forecast (per stream
    when apart), each a call that runs no block."""
    check_every_cfg_layout(ltxv_server, FAMILY, build=with_ltxv_conditioning, seed=SEED, prefix="ltxv_spectrum")


_LTX2_SCRIPT = """
import sys
devkit = sys.argv[-1]
sys.argv = ["ltx2_resolved", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.ops
sys.path.insert(0, devkit)
from comfy_harness import load_pack
load_pack()
from comfy.ldm.lightricks.av_model import LTXAVModel
from krea2_cachedit.adapters.registry import resolve
print(resolve(LTXAVModel(num_layers=1, device="meta", operations=comfy.ops.disable_weight_init)).family.name)
"""


def test_ltx_2_a_subclass_with_a_loop_of_its_own_is_its_own_family_not_ltxvs(comfy_root):
    """LTX-2's blocks take and return a (video, audio) pair and its loop perturbs blocks by index
    (``stg_self_attn_blocks``): ComfyUI's own ``LTXAVModel``, built on the meta device, resolves to the LTX-2
    entry (tests/test_families_ltx2_comfyui.py), never to LTXV's, whose loop hands blocks one tensor."""
    import subprocess
    from pathlib import Path

    from comfy_harness import comfyui_python

    devkit = str(Path(__file__).resolve().parents[1] / "devkit")
    done = subprocess.run([comfyui_python(comfy_root), "-c", _LTX2_SCRIPT, devkit], cwd=comfy_root,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "LTX-2 (ComfyUI native)", done.stdout
