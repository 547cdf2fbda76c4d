"""Flux through CacheDiTDBCache beyond the family tests: two block lists in the record, the Flux.2
file with a guidance embedding, a ControlNet's ``control``, reference latents, multi-GPU sampling
(two device copies, one decision per step and block list shared by them) (real server, tiny
seeded-random Flux.1 dev, Flux.2 dev and Flux.2 Klein from devkit/comfy_models.py).

The family scenarios (test_family_scenarios_comfyui, harnesses "flux1" and "flux2" = Klein) check CFG modes, the
step mask, the threshold, true block indices and types, EasyCache, loop patches, heun, a LoRA, TorchCompileModel
and the Forecast node.
"""

from __future__ import annotations

import pytest
import torch

from devkit.comfy_models import FAMILY_MODELS
from devkit.family_prompts import family_prompt
from helpers import FAST, FAST_8_CACHED, OFF, insert_after_loader, latent_and_record, run_ok

pytestmark = pytest.mark.comfyui


def test_flux2_with_guidance_embedding_caches_both_lists_and_off_is_exact(family_server):
    """The Flux.2 file with guidance_in (dev) under the same config as Klein: the mask skips the middle
    blocks of both lists on its steps; caching off is bit-identical to no node."""
    dev = FAMILY_MODELS["flux2"]
    plain = run_ok(family_server, family_prompt("flux2", model=dev, cfg=3.5, seed=5, prefix="flux2dev_plain"))
    off, [off_stats] = family_server.run_with_stats(family_prompt("flux2", model=dev, cfg=3.5, seed=5, cache=OFF))
    assert off_stats["cached_steps"] == [] and off_stats["cfg_mode"] == "batched"
    assert torch.equal(family_server.saved_latent(off, "7"), family_server.saved_latent(plain, "7"))
    cached, [stats] = family_server.run_with_stats(family_prompt("flux2", model=dev, cfg=3.5, seed=5, cache=FAST))
    assert stats["cached_steps"] == FAST_8_CACHED
    assert [(b["blocks"], b["size"], b["cached_steps"]) for b in stats["block_lists"]] == [
        ("double_blocks", 2, FAST_8_CACHED), ("single_blocks", 3, FAST_8_CACHED)]
    # Fn 1, Bn 0: a cached call runs the first block of each list, a computed one all 5.
    assert stats["block_evals"] == 5 * 5 + 3 * 2
    latent = family_server.saved_latent(cached, "7")
    assert torch.isfinite(latent).all() and not torch.equal(latent, family_server.saved_latent(plain, "7"))


def test_a_list_that_computes_while_the_other_caches_is_counted_per_list(family_server):
    """Each list is its own cache context with its own residual: at a threshold, one list may skip a
    step the other computes. The run counts such a step as computed (cached_steps: every list skipped),
    the list's own entry counts it, and block_evals counts what ran."""
    _, [stats] = family_server.run_with_stats(family_prompt("flux1", cfg=1.0, seed=8,
                                                             cache={"residual_diff_threshold": 0.77}))
    double, single = (b["cached_steps"] for b in stats["block_lists"])
    assert set(double) != set(single), f"the lists decided alike at this threshold: {double}, {single}"
    assert stats["cached_steps"] == sorted(set(double) & set(single))
    # Fn 1, Bn 0, one call per step: a list that skips runs its first block only.
    ran = sum((1 if step in double else 2) + (1 if step in single else 3) for step in range(8))
    assert stats["block_evals"] == ran
    by_list = {(s["blocks"], tuple(s["cached_steps"])) for s in stats["streams"]}
    assert by_list == {("double_blocks", tuple(double)), ("single_blocks", tuple(single))}


def test_a_controlnet_control_is_computed_in_full(family_server):
    """A Flux ControlNet's ``control`` adds to the image tokens after chosen blocks in the model's own
    loop (a keyword of the model call, not a patch): calls carrying it run in full, as without the node."""
    def with_control(prompt):
        prompt["21"] = {"class_type": "Krea2TestBlockControl", "inputs": {"conditioning": ["2", 0], "block": 1,
                                                                         "features": 128, "scale": 0.5}}
        prompt["6"]["inputs"]["positive"] = ["21", 0]
        return prompt

    without = run_ok(family_server, family_prompt("flux1", seed=9, prefix="flux_nocontrol"))
    plain = run_ok(family_server, with_control(family_prompt("flux1", seed=9, prefix="flux_control")))
    assert not torch.equal(family_server.saved_latent(plain, "7"), family_server.saved_latent(without, "7")), \
        "the control must change the result, or the check says nothing"
    entry, [stats] = family_server.run_with_stats(with_control(family_prompt("flux1", seed=9, cache=FAST)))
    assert torch.equal(family_server.saved_latent(entry, "7"), family_server.saved_latent(plain, "7"))
    assert stats["cached_steps"] == [] and stats["calls"] == 0
    assert any("control" in w and "computed in full" in w for w in stats["warnings"]), stats["warnings"]


@pytest.mark.parametrize("method", ["offset", "index_timestep_zero"])
def test_reference_latents_are_cached(family_server, method):
    """Kontext / Flux.2 edit: reference latents join the image tokens ("offset"), or also get a zero
    timestep of their own (``timestep_zero_index``: the blocks take per-token modulation dims). Both
    are cached like any call: the reference tokens are part of each list's residual."""
    def with_reference(prompt):
        prompt["22"] = {"class_type": "EmptyFlux2LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}
        prompt["23"] = {"class_type": "ReferenceLatent", "inputs": {"conditioning": ["2", 0], "latent": ["22", 0]}}
        prompt["24"] = {"class_type": "FluxKontextMultiReferenceLatentMethod",
                        "inputs": {"conditioning": ["23", 0], "reference_latents_method": method}}
        prompt["6"]["inputs"]["positive"] = ["24", 0]
        return prompt

    plain = run_ok(family_server, with_reference(family_prompt("flux2", seed=10, prefix=f"flux_ref_{method}")))
    off, [off_stats] = family_server.run_with_stats(with_reference(family_prompt("flux2", seed=10, cache=OFF)))
    assert torch.equal(family_server.saved_latent(off, "7"), family_server.saved_latent(plain, "7"))
    cached, [stats] = family_server.run_with_stats(with_reference(family_prompt("flux2", seed=10, cache=FAST)))
    assert stats["cached_steps"] == FAST_8_CACHED and torch.isfinite(family_server.saved_latent(cached, "7")).all()


# --- multi-GPU: one decision per step and block list, shared by the devices ----------------------------------

def two_devices(prompt: dict) -> dict:
    """A second device key on the CPU (``Krea2TestMultiGPU``, as ``MultiGPU CFG Split`` builds it) after the loader."""
    return insert_after_loader(prompt, "20", {"class_type": "Krea2TestMultiGPU", "inputs": {}})


def split_prompt(cache, prefix: str, devices: int = 2) -> dict:
    """Flux.1 at CFG 3.5 with 8 and 13 caption tokens: split CFG, on two devices cond on one and uncond on the other."""
    prompt = family_prompt("flux1", cfg=3.5, neg_tokens=13, seed=12, cache=cache, prefix=prefix)
    return two_devices(prompt) if devices == 2 else prompt


def per_list(record: dict) -> list[tuple]:
    return [(b["blocks"], b["size"], b["cached_steps"], b["partial_steps"]) for b in record["block_lists"]]


def check_two_devices(record: dict) -> dict[str, dict]:
    """Cond ran on one copy and uncond on the other, each on its own thread, every step, each list counted per
    device; the run's lists are the devices' (a list is cached in a step on every device or on none)."""
    assert record["status"] == "ok" and record["device_count"] == 2, record["warnings"]
    assert record["warnings"] == [] and record["cfg_mode"] == "split" and record["calls"] == 16
    devices = {d["device"]: d for d in record["devices"]}
    assert list(devices) == ["cpu", "cpu:1"] and len({d["module_id"] for d in devices.values()}) == 2
    assert devices["cpu"]["threads"] != devices["cpu:1"]["threads"]
    for label, branch in (("cpu", 0), ("cpu:1", 1)):
        assert [(entry[0], entry[1]) for entry in devices[label]["call_log"]] == [(step, [branch]) for step in range(8)]
        assert per_list(devices[label]) == per_list(record)
    assert all(b["partial_steps"] == [] for b in record["block_lists"])
    return devices


def test_two_devices_cache_each_list_on_the_steps_one_device_does_and_off_is_exact(family_server):
    """Off on two devices is bit-identical to one device without the node; the mask caches each list on
    every device on the steps it caches on one device."""
    plain, _ = latent_and_record(family_server, split_prompt(None, "flux_mgpu_plain", devices=1))
    off, off_record = latent_and_record(family_server, split_prompt(OFF, "flux_mgpu_off"))
    check_two_devices(off_record)
    assert off_record["cached_steps"] == [] and off_record["block_evals"] == 16 * 5
    assert torch.equal(off, plain)
    _, single = latent_and_record(family_server, split_prompt(FAST, "flux_mgpu_one", devices=1))
    assert (single["cfg_mode"], single["device_count"]) == ("split", 1)
    _, record = latent_and_record(family_server, split_prompt(FAST, "flux_mgpu_fast"))
    check_two_devices(record)
    assert per_list(record) == per_list(single) == [("double_blocks", 2, FAST_8_CACHED, []),
                                                    ("single_blocks", 3, FAST_8_CACHED, [])]
    assert record["cached_steps"] == single["cached_steps"] == FAST_8_CACHED
    assert record["block_evals"] == single["block_evals"] == 2 * (5 * 5 + 3 * 2)


def test_with_the_threshold_each_list_is_cached_on_every_device_or_on_none(family_server):
    """At the first step after warmup, a threshold between the two devices' changes on one list and above
    both on the other: the first list computes on both devices (the calm device's stream says another
    device decided) while the other list is cached on both, in the same step."""
    def threshold(value, prefix):
        return split_prompt({"residual_diff_threshold": value, "max_warmup_steps": 2,
                             "max_continuous_cached_steps": -1}, prefix)

    _, measured = latent_and_record(family_server, threshold(1e-9, "flux_mgpu_measure"))
    check_two_devices(measured)
    assert measured["cached_steps"] == []
    step = 2
    changes: dict[str, dict[str, float]] = {}   # list -> device -> its change at ``step``
    for stream in measured["streams"]:
        change = stream["residual_diffs"][stream["steps"].index(step)]
        changes.setdefault(stream["blocks"], {})[stream["device"]] = change
    assert set(changes) == {"double_blocks", "single_blocks"} and all(len(c) == 2 for c in changes.values())
    # The list whose larger change is the largest decides by its devices' disagreement, the other is cached.
    split_list = max(changes, key=lambda name: max(changes[name].values()))
    [calm_list] = set(changes) - {split_list}
    low, high = sorted(changes[split_list].values())
    assert max(changes[calm_list].values()) < high, changes
    value = (max(low, max(changes[calm_list].values())) + high) / 2
    calm_device = min(changes[split_list], key=changes[split_list].get)

    _, record = latent_and_record(family_server, threshold(value, "flux_mgpu_threshold"))
    devices = check_two_devices(record)
    lists = {b["blocks"]: b["cached_steps"] for b in record["block_lists"]}
    assert step in lists[calm_list] and step not in lists[split_list], (value, changes, lists)
    assert record["cached_steps"] == sorted(set(lists[calm_list]) & set(lists[split_list]))
    # The device that would have cached the split list says another device computed it; its other list cached.
    reasons = {(s["device"], s["blocks"]): s["step_reasons"][s["steps"].index(step)] for s in record["streams"]}
    assert reasons[calm_device, split_list] == "other_device", reasons
    assert reasons[calm_device, calm_list] == "threshold" and all(
        reasons[label, calm_list] == "threshold" for label in devices), reasons
