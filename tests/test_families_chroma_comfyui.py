"""Chroma through CacheDiTDBCache and CacheDiTSpectrum in the real server: what is Chroma's own.

ComfyUI detects Chroma only at its full width, and every model call recomputes the approximator's
table of 344 modulation rows through 5 layers 5120 wide, whatever the latent (about 90 GFLOP a call per
batch element: several seconds on 2 CPU cores). So Chroma is checked here, at 4 steps on a 32x32 image,
instead of by the shared family checks (``FamilySpec.own_tests``), and the checkpoint is written only
when one of these tests runs (conftest's ``chroma_server``). Each check is what Chroma's loop makes
its own (each block handed its own slice of the table; two lists, as Flux) or what every family must
show on its own model:

- CFG 1, batched and split, each with the step mask cached in both lists; at CFG 1 each block's
  attention sees its true index, list size and type on computed and cached steps;
- caching off bit-identical to the graph without the node (split CFG: every block of every call
  given its own modulation slice under the cache's wrappers);
- calls while a skip list (``skip_mmdit``) names a block computed in full, as without the node;
- a LoRA in Chroma's native keys on both lists changes the image and the mask still caches;
- two devices (split CFG over two copies): the mask cached in both lists on both devices;
- the Forecast node: its preset's steps forecast, a forecast call running no block;
- threshold caching at 4 steps (warmup 2), EasyCache refused, a ``patches_replace["dit"]`` block computed
  in full, heun at CFG 1 (each step's first evaluation served), TorchCompileModel before the node.

Spectrum's batched and split layouts, and heun's caching-off pair, are left to the other families (the
same code path): docs/families.md says so.
"""

from __future__ import annotations

import pytest
import torch

from family_prompts import FAMILIES, family_prompt
from helpers import (EASYCACHE, FAST, OFF, check_left_to_easycache, check_threshold_caching, latent_and_record,
                     write_native_lora)
from krea2_prompts import with_lora
from test_families_comfyui import blocks_seen, with_probe
from test_families_compat_comfyui import insert_after_loader
from test_families_sampling_comfyui import check_two_evaluation_record
from test_forecast_comfyui import check_forecast, forecast_prompt

pytestmark = pytest.mark.comfyui

FAMILY = "chroma"
SPEC = FAMILIES[FAMILY]
STEPS = 4
MASK_CACHED = [2]   # cache-dit's "fast" mask for 4 steps: 1 1 0 1
SEED = 61
LISTS = SPEC.block_lists   # (("double", 2), ("single", 2))
# The weights the test LoRA changes, in Chroma's native names: attention and MLP outputs of both lists.
LORA_LAYERS = [*(f"double_blocks.{block}.img_attn.proj" for block in range(2)),
               *(f"single_blocks.{block}.linear2" for block in range(2))]


def prompt(cfg=1.0, neg_tokens=8, cache=None, seed=SEED, prefix="chroma", **kwargs) -> dict:
    return family_prompt(FAMILY, cfg=cfg, neg_tokens=neg_tokens, cache=cache, seed=seed, steps=STEPS,
                         prefix=prefix, **kwargs)


def check_record(record: dict, calls: int, mode: str, devices: int = 1):
    assert record["status"] == "ok" and record["model"] == SPEC.name and record["steps"] == STEPS
    assert record["node_id"] == "5" and record["cfg_mode"] == mode and record["calls"] == calls
    # Split over several devices, each device is sent one cond: none has separate CFG.
    assert record["has_separate_cfg"] == (mode == "split" and devices == 1)
    assert record["device_count"] == devices
    assert record["cached_steps"] == MASK_CACHED
    assert [(b["blocks"], b["size"], b["cached_steps"]) for b in record["block_lists"]] == [
        ("double_blocks", 2, MASK_CACHED), ("single_blocks", 2, MASK_CACHED)]
    # A computed call runs all 4 blocks, a cached one the first block of each list (Fn 1, Bn 0).
    per_step = calls // STEPS
    assert record["block_evals_uncached"] == calls * SPEC.blocks
    assert record["block_evals"] == per_step * (SPEC.blocks * (STEPS - len(MASK_CACHED)) + 2 * len(MASK_CACHED))


@pytest.fixture(scope="module")
def cfg_1(chroma_server, tmp_path_factory):
    """CFG 1 with the mask, the attention probe after the loader: (latent, record, blocks seen per call)."""
    log = tmp_path_factory.mktemp("chroma_probe") / "attention.jsonl"
    latent, record = latent_and_record(chroma_server, with_probe(prompt(cache=FAST, prefix="chroma_cfg1"), log),
                                       timeout=900)
    return latent, record, blocks_seen(log)


def test_cfg_1_caches_the_mask_and_each_block_sees_its_true_index(cfg_1):
    _, record, seen = cfg_1
    check_record(record, calls=STEPS, mode="none")
    assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    every_block = [(kind, i, size) for kind, size in LISTS for i in range(size)]
    first_of_each = [(kind, 0, size) for kind, size in LISTS]
    assert seen == [first_of_each if step in MASK_CACHED else every_block for step in range(STEPS)]


@pytest.mark.parametrize("neg_tokens, mode", [(8, "batched"), (13, "split")])
def test_batched_and_split_cfg_cache_the_mask(chroma_server, neg_tokens, mode):
    """Conds of 8 tokens batch (uncond first, one table of 2 rows a call); 8 and 13 cannot (cond first)."""
    _, record = latent_and_record(chroma_server, prompt(cfg=3.5, neg_tokens=neg_tokens, cache=FAST,
                                                        prefix=f"chroma_{mode}"), timeout=900)
    if mode == "batched":
        check_record(record, calls=STEPS, mode="batched")
        assert record["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"
    else:
        check_record(record, calls=2 * STEPS, mode="split")
        assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
        assert {s["branches"][0] for s in record["streams"]} == {0, 1}


def test_caching_off_is_bit_identical_to_no_node(chroma_server):
    """Split CFG, every step computed through the cache's wrappers: each block must get its own slice of
    the call's modulation table (the wrapper is called with the first block's), or the latent differs."""
    plain, _ = latent_and_record(chroma_server, prompt(cfg=3.5, neg_tokens=13, prefix="chroma_plain"), timeout=900)
    off, record = latent_and_record(chroma_server, prompt(cfg=3.5, neg_tokens=13, cache=OFF, prefix="chroma_off"),
                                    timeout=900)
    assert record["model"] == SPEC.name and record["cfg_mode"] == "split"
    assert record["cached_steps"] == [] and record["calls"] == 2 * STEPS
    assert record["block_evals"] == 2 * STEPS * SPEC.blocks
    assert torch.equal(off, plain)


def test_calls_while_a_skip_list_names_a_block_are_computed_in_full(chroma_server):
    """Chroma's loop skips the blocks its skip lists name, which the cache's wrapper of the list would run:
    such calls run in full, exactly as without the node, and the stats say so."""
    def skipping(graph):
        graph["20"] = {"class_type": "Krea2TestSkipBlocks",
                       "inputs": {"model": ["1", 0], "skip_list": "skip_mmdit", "block": 1}}
        graph["5" if "5" in graph else "6"]["inputs"]["model"] = ["20", 0]
        return graph

    plain, _ = latent_and_record(chroma_server, skipping(prompt(prefix="chroma_skip_plain")), timeout=900)
    latent, record = latent_and_record(chroma_server, skipping(prompt(cache=FAST, prefix="chroma_skip")), timeout=900)
    assert torch.equal(latent, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any("skip_mmdit" in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


@pytest.fixture(scope="module")
def lora(chroma_server):
    """A rank-4 LoRA on ``LORA_LAYERS`` in ComfyUI's native key names, each update about as large as the
    weight it changes (std 1/sqrt(fan_in))."""
    return write_native_lora(chroma_server, chroma_server.base_dir / "models" / "diffusion_models" / SPEC.model,
                             LORA_LAYERS, "chroma_test_lora.safetensors")


def test_a_lora_in_chromas_own_keys_changes_the_image_and_the_mask_still_caches(chroma_server, cfg_1, lora):
    reference, _, _ = cfg_1   # the same graph without the LoRA (the attention probe changes no tensor)
    start = len(chroma_server.log_text())
    latent, record = latent_and_record(chroma_server, with_lora(prompt(cache=FAST, prefix="chroma_lora"), lora, 1.0,
                                                                "lora_first"), timeout=900)
    check_record(record, calls=STEPS, mode="none")
    assert torch.isfinite(latent).all()
    assert not torch.equal(latent, reference), "the LoRA must change the result, or the check says nothing"
    # ComfyUI's loader found its keys (an unmatched key is logged and changes nothing).
    assert "lora key not loaded" not in chroma_server.log_text()[start:]


def test_two_devices_cache_the_mask_in_both_lists_on_both(chroma_server):
    """Split CFG over two device copies (cond on one, uncond on the other, each block given its own slice of
    its copy's table): each list is cached on the mask's steps on both devices, one decision per step and list."""
    graph = prompt(cfg=3.5, neg_tokens=13, cache=FAST, prefix="chroma_mgpu")
    graph["20"] = {"class_type": "Krea2TestMultiGPU", "inputs": {"model": ["1", 0]}}
    graph["5"]["inputs"]["model"] = ["20", 0]
    latent, record = latent_and_record(chroma_server, graph, timeout=900)
    check_record(record, calls=2 * STEPS, mode="split", devices=2)
    assert record["warnings"] == []
    for device, branch in zip(record["devices"], (0, 1)):
        assert {tuple(entry[1]) for entry in device["call_log"]} == {(branch,)}
        assert [(b["blocks"], b["cached_steps"], b["partial_steps"]) for b in device["block_lists"]] == [
            ("double_blocks", MASK_CACHED, []), ("single_blocks", MASK_CACHED, [])]
    assert torch.isfinite(latent).all()


def test_the_spectrum_node_forecasts_its_presets_steps(chroma_server):
    """turbo_5_of_8 at CFG 1: steps 2, 4 and 6 forecast, each a call that runs no block."""
    _, record = latent_and_record(chroma_server, forecast_prompt(FAMILY, cfg=1.0, seed=SEED, prefix="chroma_spectrum"),
                                  timeout=900)
    check_forecast(record, FAMILY, calls_per_step=1)
    assert (record["cfg_mode"], len(record["streams"])) == ("none", 1)


def test_threshold_caching_decides_by_the_measured_change(chroma_server):
    """4 steps, warmup 2: each step after warmup cached exactly when its measured change (the cache's, over both
    lists) is below the threshold (``check_threshold_caching``)."""
    check_threshold_caching(lambda threshold, label: latent_and_record(chroma_server, prompt(
        cache={"residual_diff_threshold": threshold, "max_warmup_steps": 2}, prefix=f"chroma_thr_{label}"),
        timeout=900)[1], steps=STEPS, warmup=2)


def test_easycache_on_the_same_model_leaves_the_run_to_it(chroma_server):
    alone, _ = latent_and_record(chroma_server, insert_after_loader(prompt(prefix="chroma_easy_alone"), "14",
                                                                    EASYCACHE), timeout=900)
    latent, record = latent_and_record(chroma_server, insert_after_loader(prompt(cache=FAST, prefix="chroma_easy"),
                                                                          "14", EASYCACHE), timeout=900)
    check_left_to_easycache(record, (latent,), (alone,))


def test_calls_with_a_block_replaced_by_index_are_computed_in_full(chroma_server, cfg_1):
    """Chroma's loop calls a ``patches_replace["dit"]`` entry ("double_block", 1) instead of that block, which the
    cache's wrapper of the list would run: such calls run in full, exactly as without the node."""
    unpatched, _, _ = cfg_1   # the graph without the replacement (the attention probe changes no tensor)
    replace = {"class_type": "Krea2TestBlockReplace", "inputs": {"kind": "double_block", "block": 1, "scale": 0.5}}
    plain, _ = latent_and_record(chroma_server, insert_after_loader(prompt(prefix="chroma_replace_plain"), "20",
                                                                    replace), timeout=900)
    assert not torch.equal(plain, unpatched), "the replacement must change the result, or the check says nothing"
    latent, record = latent_and_record(chroma_server, insert_after_loader(prompt(cache=FAST, prefix="chroma_replace"),
                                                                          "20", replace), timeout=900)
    assert torch.equal(latent, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any("patches_replace.dit" in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


def test_heun_serves_each_steps_first_evaluation(chroma_server):
    _, record = latent_and_record(chroma_server, prompt(sampler="heun", cache=FAST, prefix="chroma_heun"), timeout=900)
    check_two_evaluation_record(record, FAMILY, [[0]], "none", steps=STEPS, cached_steps=MASK_CACHED)


def test_torch_compile_model_before_the_node_caches_the_same_steps(chroma_server, cfg_1):
    reference, eager, _ = cfg_1
    graph = insert_after_loader(prompt(cache=FAST, prefix="chroma_compiled"), "20",
                                {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}})
    compiled, record = latent_and_record(chroma_server, graph, timeout=1200)
    check_record(record, calls=STEPS, mode="none")
    assert record["block_evals"] == eager["block_evals"]
    assert float((compiled - reference).norm() / reference.norm()) < 1e-2
