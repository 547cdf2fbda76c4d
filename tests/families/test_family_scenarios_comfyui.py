"""The scenario set every family runs in the real server (Krea-2 through its own node, the others through
CacheDiTDBCache): each scenario on every family whose harness (tests/support/family_harness.py) has its capability,
checking every output the family's graph saves (LTX-2's and MiniMax H3's video and audio).

- the CFG layouts ComfyUI gives the family (CFG 1, batched, split), each with the step mask cached: the calls,
  each list's cached steps and the blocks each call ran; at CFG 1, where the harness says so, the cached run
  close to (not equal to) no node;
- each block's attention seeing its true index, list size and type, on computed steps and on cached ones (where
  the first block and the last Bn run);
- caching off bit-identical to the graph without the node, and caching on changing every output; a cached run
  leaving the model as it was; cache-dit's "medium" mask;
- threshold caching: a step cached exactly when its measured change is below the threshold;
- EasyCache on the same model leaves the run to it;
- patches the loop applies by block index (a ``double_block`` patch, a ``patches_replace["dit"]`` block, a
  ControlNet's ``control``, STG's perturbed blocks): such calls computed in full, exactly as without the node;
- heun (a corrector call per step computed beside the cache), and caching off under heun bit-identical;
- a LoRA in the family's own keys changes every output and the mask still caches;
- TorchCompileModel before (and after) the node caches the same steps, close to eager;
- two devices (ComfyUI's multi-GPU CFG split): caching off bit-identical, the mask cached on both, per list;
- the Forecast node: its preset's steps forecast in each CFG layout, a forecast call running no block, and
  forecasting nothing bit-identical to no node; its ``auto`` plan in one layout; or its refusal, naming why.

Each family's server is conftest's session fixture its spec names (one per session, shared with the other test
files); the runs several scenarios compare with (the mask at CFG 1, the graph without the node) are made once per
family (``runs``), the graphs without the node through conftest's ``uncached_latent`` where the harness's graph is
``family_prompt``'s (so the Krea-2 node tests share Krea-2's). Random weights: what was cached and how calls were
routed, never image quality.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_harness import prompt_error
from family_harness import HARNESSES, MASKS, FamilyHarness
from helpers import (EASYCACHE, FAST, OFF, check_left_to_easycache, check_one_stream_per_device,
                     check_threshold_caching, insert_after_loader, write_native_lora)
from devkit.krea2_prompts import with_forecast, with_lora
from krea2_cachedit.adapters.families.registry import SUPPORTED
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run
from record_checks import FORECAST_NOTHING, blocks_seen, check_forecast_layout, check_two_evaluation_record, with_probe

pytestmark = pytest.mark.comfyui

BRANCHES = {"none": [[0]], "batched": [[1, 0]], "split": [[0], [1]]}   # per model call of a step, per layout
MULTI_GPU = {"class_type": "Krea2TestMultiGPU", "inputs": {}}
COMPILE = {"class_type": "TorchCompileModel", "inputs": {"backend": "inductor"}}


def having(capability) -> list:
    """The harnesses with ``capability(harness)``, as parameters named by family."""
    return [pytest.param(harness, id=harness.family) for harness in HARNESSES.values() if capability(harness)]


def per_layout(layouts) -> list:
    """(harness, layout) for each of ``layouts(harness)``, named family-layout."""
    return [pytest.param(harness, layout, id=f"{harness.family}-{layout}")
            for harness in HARNESSES.values() for layout in layouts(harness)]


def equal(outputs, others) -> bool:
    return all(torch.equal(output, other) for output, other in zip(outputs, others, strict=True))


def all_differ(outputs, others) -> bool:
    return all(not torch.equal(output, other) for output, other in zip(outputs, others, strict=True))


def finite(outputs) -> bool:
    return all(torch.isfinite(output).all() for output in outputs)


class Runs:
    """Runs that several scenarios compare with, made once per family the first time one asks."""

    def __init__(self, request, folder):
        self._request, self.folder, self._done = request, folder, {}

    def server(self, harness: FamilyHarness):
        return self._request.getfixturevalue(harness.server_fixture)

    def _once(self, key, make):
        if key not in self._done:
            self._done[key] = make()
        return self._done[key]

    def cached(self, harness: FamilyHarness, layout: str):
        """(outputs, record, blocks seen per call or None) of the mask in ``layout``: at CFG 1 with the attention
        probe after the loader where the harness probes without Bn blocks (it changes no tensor)."""
        def make():
            graph = harness.prompt(layout, cache=FAST, prefix=f"{layout}_cached")
            log = self.folder / f"{harness.family}_attention.jsonl"
            probe = layout == "none" and harness.attention_bn == 0
            outputs, record = harness.run(self.server(harness), with_probe(graph, log) if probe else graph)
            return outputs, record, blocks_seen(log) if probe else None
        return self._once(("cached", harness.family, layout), make)

    def _plain(self, harness: FamilyHarness, layout: str):
        """(outputs, blocks seen per call or None) of the graph without the node in ``layout``: at CFG 1 with the
        attention probe where the harness has it."""
        def make():
            server = self.server(harness)
            if layout == "none" and harness.attention_bn is not None:
                log = self.folder / f"{harness.family}_plain_attention.jsonl"
                graph = with_probe(harness.prompt(layout, prefix=f"{layout}_plain"), log)
                return harness.run(server, graph, node_id=None)[0], blocks_seen(log)
            if harness.shares_uncached_runs:
                uncached_latent = self._request.getfixturevalue("uncached_latent")
                return (uncached_latent(server, harness.family, **harness.prompt_args(layout)),), None
            return harness.run(server, harness.prompt(layout, prefix=f"{layout}_plain"), node_id=None)[0], None
        return self._once(("plain", harness.family, layout), make)

    def plain(self, harness: FamilyHarness, layout: str):
        """The outputs of the graph without the node in ``layout``."""
        return self._plain(harness, layout)[0]

    def plain_blocks_seen(self, harness: FamilyHarness):
        """Per call, the blocks whose attention the probe saw in the graph without the node at CFG 1."""
        return self._plain(harness, "none")[1]

    def lora(self, harness: FamilyHarness) -> str:
        """A rank-4 LoRA on the harness's layers in ComfyUI's native key names, each update about as large as the
        weight it changes (std 1/sqrt(fan_in))."""
        server = self.server(harness)
        return self._once(("lora", harness.family), lambda: write_native_lora(
            server, server.base_dir / "models" / "diffusion_models" / harness.spec.model, harness.lora_layers,
            f"{harness.family}_test_lora.safetensors", prefix=harness.lora_prefix))


@pytest.fixture(scope="module")
def runs(request, tmp_path_factory):
    return Runs(request, tmp_path_factory.mktemp("family_scenarios"))


@pytest.fixture
def server(request, harness):
    return request.getfixturevalue(harness.server_fixture)


@pytest.mark.parametrize("harness, layout", per_layout(lambda harness: harness.layouts))
def test_each_cfg_layout_caches_the_mask(runs, harness, layout):
    outputs, record, _ = runs.cached(harness, layout)
    harness.check_record(record, layout)
    assert record["cfg"] == (1.0 if layout == "none" else 3.5)
    if layout == "none":
        assert all(call[1] == [0] for call in record["call_log"]), "CFG 1 has no uncond pass"
    elif layout == "batched":
        assert record["call_log"][0][1] == [1, 0], "ComfyUI batches uncond first"
    else:
        assert [call[1] for call in record["call_log"][:2]] == [[0], [1]], "shape-forced splits run cond first"
        assert record["extra_calls"] == 0
        # A cache per stream (and per list, where the family has several), each caching the mask.
        lists = len(harness.spec.block_lists)
        assert sorted(stream["branches"] for stream in record["streams"]) == [[0]] * lists + [[1]] * lists
        assert all(stream["cached_steps"] == harness.mask_cached for stream in record["streams"])
    if len(harness.spec.block_lists) == 1:
        assert not any("blocks" in stream for stream in record["streams"]), "one list: no per-list account"
    assert finite(outputs)
    if harness.shapes:
        assert tuple(tuple(output.shape) for output in outputs) == harness.shapes
    if layout == "none" and harness.cfg1_error is not None:
        # The cached step adds the residual the cache kept of the blocks after the first: close to the graph
        # without the node, not equal (were that residual zero, far).
        for cached, plain in zip(outputs, runs.plain(harness, "none"), strict=True):
            error = float((cached - plain).norm() / plain.norm())
            assert 0 < error < harness.cfg1_error, error


@pytest.mark.parametrize("harness", having(lambda harness: harness.attention_bn is not None))
def test_attention_sees_each_blocks_true_index_on_computed_and_cached_steps(runs, server, harness):
    """At CFG 1 an attention override sees, per call, each block's index in its own list, the list's size and its
    type ("double" / "single"), as in the model's own loop: every block on a computed step, on a cached one the
    first of each list and its last Bn (the harness's; Fn 1)."""
    lists, bn, cached = harness.spec.block_lists, harness.attention_bn, harness.mask_cached
    every_block = [(kind, i, size) for kind, size in lists for i in range(size)]
    assert runs.plain_blocks_seen(harness) == [every_block] * harness.steps
    if bn == 0:
        _, record, seen = runs.cached(harness, "none")
    else:
        log = runs.folder / f"{harness.family}_attention_bn.jsonl"
        _, record = harness.run(server, with_probe(harness.prompt(cache={**FAST, "Bn_compute_blocks": bn},
                                                                  prefix="attention_bn"), log))
        seen = blocks_seen(log)
    harness.check_record(record, "none", bn=bn)
    ran_when_cached = [(kind, i, size) for kind, size in lists for i in range(size) if i == 0 or i >= size - bn]
    assert seen == [ran_when_cached if step in cached else every_block for step in range(harness.steps)]


@pytest.mark.parametrize("harness, layout", per_layout(lambda harness: harness.off_layouts))
def test_caching_off_is_bit_identical_to_no_node_and_caching_changes_every_output(runs, server, harness, layout):
    """Every step computed through the cache's wrappers (split CFG: each stream apart) equals the graph without
    the node, bit for bit, in every output; the mask's run differs in every output."""
    spec = harness.spec
    plain = runs.plain(harness, layout)
    off, record = harness.run(server, harness.prompt(layout, cache=OFF, prefix="off"))
    assert record["model"] == spec.name and record["cfg_mode"] == layout
    assert record["cached_steps"] == [] and record["calls"] == harness.calls(layout)
    assert record["block_evals"] == harness.calls(layout) * spec.blocks
    assert equal(off, plain)
    cached, _, _ = runs.cached(harness, layout)
    assert all_differ(cached, plain), "the served residual must change every output, or off says nothing"


@pytest.mark.parametrize("harness", having(lambda harness: harness.after_cached))
def test_a_cached_run_differs_and_the_next_plain_run_is_unchanged(runs, server, harness):
    """Caching changes the result (the served residual is really used), and leaves the shared model clean: the
    graph without the node (as when the node is bypassed) gives the uncached outputs again after it."""
    before = runs.plain(harness, "batched")
    cached, _ = harness.run(server, harness.prompt("batched", cache={"steps_mask": "ultra"}, prefix="ultra"))
    after, _ = harness.run(server, harness.prompt("batched", prefix="after"), node_id=None)
    assert equal(after, before)
    assert all_differ(cached, before) and finite(cached)


@pytest.mark.parametrize("harness", having(lambda harness: bool(harness.medium_mask)))
def test_the_medium_mask_caches_its_steps(server, harness):
    _, record = harness.run(server, harness.prompt(cache={"steps_mask": "medium"}, prefix="medium"))
    assert record["cached_steps"] == list(harness.medium_mask), "cache-dit's 'medium' mask"
    assert all(record["step_reasons"][step] == "mask" for step in harness.medium_mask)


@pytest.mark.parametrize("harness", having(lambda harness: harness.threshold is not None))
def test_threshold_caching_decides_by_the_measured_change(server, harness):
    """Each step after warmup cached exactly when its measured change (over every list, and over video and audio
    tokens together) is below the threshold (``check_threshold_caching``)."""
    threshold = harness.threshold
    check_threshold_caching(lambda value, label: harness.run(server, harness.prompt(
        cache={"residual_diff_threshold": value}, steps=threshold.steps, prefix=f"thr_{label}"))[1],
        steps=threshold.steps, full=threshold.full)


@pytest.mark.parametrize("harness", having(lambda harness: harness.easycache))
def test_easycache_on_the_same_model_leaves_the_run_to_it(server, harness):
    alone, _ = harness.run(server, insert_after_loader(harness.prompt(prefix="easy_alone"), "20", EASYCACHE),
                           node_id=None)
    outputs, record = harness.run(server, insert_after_loader(harness.prompt(cache=FAST, prefix="easy"), "20",
                                                              EASYCACHE))
    check_left_to_easycache(record, outputs, alone)


@pytest.mark.parametrize("harness, patch", [pytest.param(harness, patch, id=f"{harness.family}-{patch.name}")
                                            for harness in HARNESSES.values() for patch in harness.patches])
def test_calls_with_a_patch_the_loop_applies_by_block_index_are_computed_in_full(runs, server, harness, patch):
    """The loop calls a replacement instead of block 1, adds a ControlNet's residual after it, or perturbs its
    self-attention: the cache's wrapper would run block 1 as any other, so such calls run in full, exactly as
    without the node, and the stats say so."""
    plain, _ = harness.run(server, patch.apply(harness.prompt(prefix=f"{patch.name}_plain")), node_id=None)
    assert all_differ(plain, runs.plain(harness, "none")), "the patch must change every output, or the check is void"
    outputs, record = harness.run(server, patch.apply(harness.prompt(cache=FAST, prefix=patch.name)))
    assert equal(outputs, plain)
    assert record["cached_steps"] == [] and record["calls"] == 0
    assert any(patch.named in w and "computed in full" in w for w in record["warnings"]), record["warnings"]


@pytest.mark.parametrize("harness", having(lambda harness: harness.heun is not None))
def test_heun_serves_each_steps_first_evaluation_and_off_is_bit_identical(server, harness):
    """heun calls the model again at each step's next sigma: the calls cache-dit serves go through every list's
    wrappers (a masked step cached in each list), the corrector calls through the original lists; with caching off
    every call is routed the same and the outputs equal the graph without the node."""
    heun, lists = harness.heun, harness.spec.block_lists
    steps = harness.steps
    if heun.cached is not None:
        layout = heun.cached
        _, record = harness.run(server, harness.prompt(layout, sampler="heun", cache=FAST, steps=steps,
                                                       prefix="heun"))
        check_two_evaluation_record(record, harness.family, BRANCHES[layout], layout, steps=steps,
                                    cached_steps=MASKS[steps])
        if len(lists) > 1:
            assert [(blocks["blocks"], blocks["cached_steps"]) for blocks in record["block_lists"]] == [
                (f"{kind}_blocks", MASKS[steps]) for kind, _ in lists]
    if heun.off is None:
        return
    layout = heun.off
    plain, _ = harness.run(server, harness.prompt(layout, sampler="heun", steps=steps, prefix="heun_plain"),
                           node_id=None)
    off, record = harness.run(server, harness.prompt(layout, sampler="heun", cache=OFF, steps=steps,
                                                     prefix="heun_off"))
    check_two_evaluation_record(record, harness.family, BRANCHES[layout], layout, steps=steps, cached_steps=[])
    assert record["block_evals"] == record["calls"] * harness.spec.blocks
    assert equal(off, plain)


@pytest.mark.parametrize("harness", having(lambda harness: bool(harness.lora_layers)))
def test_a_lora_in_native_keys_changes_every_output_and_the_mask_still_caches(runs, server, harness):
    reference, _, _ = runs.cached(harness, "none")   # the same graph without the LoRA
    lora = runs.lora(harness)
    start = len(server.log_text())
    outputs, record = harness.run(server, with_lora(harness.prompt(cache=FAST, prefix="lora"), lora, 1.0,
                                                    "lora_first"))
    harness.check_record(record, "none")
    assert finite(outputs)
    assert all_differ(outputs, reference), "the LoRA must change every output, or the check says nothing"
    # ComfyUI's loader found its keys (an unmatched key is logged and changes nothing).
    assert "lora key not loaded" not in server.log_text()[start:]


@pytest.mark.parametrize("harness, place", [
    pytest.param(harness, place, id=f"{harness.family}-{place}") for harness in HARNESSES.values()
    if harness.compile_tolerance is not None for place in ("before", "after")[:2 if harness.compile_after else 1]])
def test_torch_compile_model_before_or_after_the_node_caches_the_same_steps(runs, server, harness, place):
    reference, eager, _ = runs.cached(harness, "none")
    graph = harness.prompt(cache=FAST, prefix=f"compiled_{place}")
    if place == "before":
        insert_after_loader(graph, "20", COMPILE)
    else:
        graph["20"] = {**COMPILE, "inputs": {"model": ["5", 0], **COMPILE["inputs"]}}
        graph["6"]["inputs"]["model"] = ["20", 0]
    outputs, record = harness.run(server, graph, timeout=harness.timeout + 300)
    harness.check_record(record, "none")
    assert record["block_evals"] == eager["block_evals"]
    for compiled, eager_output in zip(outputs, reference, strict=True):
        assert float((compiled - eager_output).norm() / eager_output.norm()) < harness.compile_tolerance


@pytest.mark.parametrize("harness", having(lambda harness: harness.two_devices))
def test_two_devices_off_is_bit_identical_and_the_mask_caches_on_both(server, harness):
    """Split CFG over two device copies (cond on one, uncond on the other): caching off equals the two-device graph
    without the node; with the mask, one decision per step and list for both devices."""
    def two_devices(cache, prefix):
        return insert_after_loader(harness.prompt("split", cache=cache, prefix=prefix), "20", MULTI_GPU)

    if harness.two_devices_off:
        plain, _ = harness.run(server, two_devices(None, "mgpu_plain"), node_id=None)
        off, off_record = harness.run(server, two_devices(OFF, "mgpu_off"))
        assert off_record["device_count"] == 2 and off_record["cached_steps"] == []
        assert equal(off, plain)
    outputs, record = harness.run(server, two_devices(FAST, "mgpu_fast"))
    harness.check_record(record, "split", devices=2)
    check_one_stream_per_device(record, harness.spec.name, harness.mask_cached)
    assert record["warnings"] == []
    lists = harness.spec.block_lists
    if len(lists) > 1:
        for device in record["devices"]:
            assert [(b["blocks"], b["cached_steps"], b["partial_steps"]) for b in device["block_lists"]] == [
                (f"{kind}_blocks", harness.mask_cached, []) for kind, _ in lists]
    assert finite(outputs)


@pytest.mark.parametrize("harness, layout", per_layout(lambda harness: harness.spectrum))
def test_the_spectrum_node_forecasts_its_presets_steps(server, harness, layout):
    """turbo_5_of_8 at 8 steps: steps 2, 4 and 6 forecast (one history for a batched call, one per stream apart),
    each a call that runs no block; the final layer reads the forecast, so every output is served."""
    outputs, record = harness.run(server, with_forecast(harness.prompt(layout, cache={}, steps=8,
                                                                       prefix=f"spectrum_{layout}")))
    check_forecast_layout(record, harness.family, layout)
    assert finite(outputs)


@pytest.mark.parametrize("harness, layout", per_layout(lambda harness: harness.spectrum))
def test_the_auto_plan_forecasts_between_its_computed_steps(server, harness, layout):
    """``auto`` at speedup 2 over 8 steps: steps 0, 2, 4 and 6 computed, the others forecast, in each CFG layout the
    family forecasts in (split: the plan for each stream), each gap's share on the ramp of a run with one
    conditioning per step (CFG 1) or a guided one."""
    outputs, record = harness.run(server, with_forecast(harness.prompt(layout, cache={}, steps=8,
                                                                       prefix=f"auto_{layout}"), "auto", speedup=2.0))
    method = record["method"]
    assert (method.get("preset"), method.get("computed_steps")) == ("auto", [0, 2, 4, 6]), (record["status"],
                                                                                          record["warnings"])
    assert record["cfg_mode"] == layout and len(method["gap_shares"]) == 4
    planned = plan_forecast_run(ForecastSettings.auto(2.0), 8, record["sigmas"], guided=layout != "none")
    assert method["gap_shares"] == planned.gap_shares(), (layout, record["sigmas"])
    (family,) = [f for f in SUPPORTED if f.name == record["model"]]   # the output where the final layer gives one
    assert method["target"] == ("output" if family.final_output_forecast else "feature")
    assert all(stream["forecast_steps"] == [1, 3, 5, 7] for stream in record["streams"]), record["streams"]
    assert finite(outputs)


@pytest.mark.parametrize("harness", having(lambda harness: harness.forecast_nothing is not None))
def test_forecasting_nothing_is_bit_identical_to_no_node(runs, server, harness):
    """The Forecast node computing every step equals the graph without the node, bit for bit (the same graph as
    caching off's: one run without the node for both)."""
    layout = harness.forecast_nothing
    outputs, record = harness.run(server, with_forecast(harness.prompt(layout, cache={}, prefix="nothing"), "custom",
                                                        **FORECAST_NOTHING))
    assert record["forecast_steps"] == [] and record["method"]["computed_steps"] == list(range(harness.steps))
    assert equal(outputs, runs.plain(harness, layout))


@pytest.mark.parametrize("harness", having(lambda harness: bool(harness.spectrum_refused)))
def test_the_spectrum_node_refuses_it_naming_why(server, harness):
    error = prompt_error(server.run(with_forecast(harness.prompt(cache={}, prefix="spectrum"))))
    assert error is not None and all(word in error for word in harness.spectrum_refused), error
