"""What the ComfyUI tests share: the cache node's settings for the usual cases, running a prompt, and a
LoRA for a family's own checkpoint.

The settings are the node's inputs over ``krea2_prompt``'s defaults (``CACHE_NODE_DEFAULTS``); the
runners queue a prompt on a test server, wait for it and fail, with the server's log, when it failed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from devkit.comfy_harness import ComfyServer, prompt_error

FAST = {"steps_mask": "fast"}
FAST_8_CACHED = [3, 5, 6]   # cache-dit's "fast" mask for 8 steps: 1 1 1 0 1 0 0 1
OFF = {"residual_diff_threshold": 0.0, "steps_mask": "none"}   # the node on the model, caching nothing
# ComfyUI's own step cache on the same model, which the cache node leaves the run to.
EASYCACHE = {"class_type": "EasyCache", "inputs": {"reuse_threshold": 1.5, "start_percent": 0.15, "end_percent": 0.95,
                                                   "verbose": False}}


def run_ok(server: ComfyServer, prompt: dict, timeout: float = 600.0) -> dict:
    """The history entry of ``prompt``, which must succeed."""
    entry = server.run(prompt, timeout)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    return entry


def outputs_and_record(server: ComfyServer, prompt: dict, outputs: tuple[str, ...] = ("7",), node_id: str | None = "5",
                       timeout: float = 600.0):
    """(the latents ``prompt``'s SaveLatent nodes ``outputs`` saved, in order; the stats record its node ``node_id``
    published: exactly one when the prompt has that node, None when it has none or ``node_id`` is None)."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id, timeout)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    record = server.stats_for(prompt_id, node_id)[0] if node_id is not None and node_id in prompt else None
    return tuple(server.saved_latent(entry, output) for output in outputs), record


def latent_and_record(server: ComfyServer, prompt: dict, node_id: str | None = "5", timeout: float = 600.0):
    """The latent ``prompt`` saved (SaveLatent "7") and the stats record its node ``node_id`` published
    (``outputs_and_record``)."""
    (latent,), record = outputs_and_record(server, prompt, ("7",), node_id, timeout)
    return latent, record


def insert_after_loader(prompt: dict, node_id: str, node: dict) -> dict:
    """``node`` (its "model" input left out) between the loader and the next node."""
    consumer = "5" if "5" in prompt else "6"
    prompt[node_id] = {**node, "inputs": {"model": prompt[consumer]["inputs"]["model"], **node["inputs"]}}
    prompt[consumer]["inputs"]["model"] = [node_id, 0]
    return prompt


def write_native_lora(server: ComfyServer, checkpoint: Path, layers, name: str, prefix: str = "diffusion_model.") \
        -> str:
    """A rank-4 LoRA on ``layers`` of ``checkpoint`` (their names in its keys), written as ``name`` into
    ``server``'s loras folder under ``prefix`` (ComfyUI's native key names by default). Each update is about
    as large as the weight it changes (std 1/sqrt(fan_in)); seeded, so the same layers give the same file."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(13)
    weights = {}
    with safe_open(str(checkpoint), "pt") as stored:
        for layer in layers:
            rows, cols = stored.get_slice(f"{layer}.weight").get_shape()
            scale = (0.5 / cols ** 0.5) ** 0.5
            weights[f"{prefix}{layer}.lora_A.weight"] = torch.randn(4, cols, generator=generator) * scale
            weights[f"{prefix}{layer}.lora_B.weight"] = torch.randn(rows, 4, generator=generator) * scale
    save_file(weights, str(server.base_dir / "models" / "loras" / name))
    return name


def check_left_to_easycache(record: dict, outputs: tuple, alone: tuple):
    """The node on a model that ComfyUI's EasyCache also caches steps aside: its record says "skipped" and names
    EasyCache, and each output (a latent) equals the same graph's with EasyCache alone, bit for bit."""
    assert record["status"] == "skipped" and "EasyCache" in " ".join(record["warnings"])
    assert all(torch.equal(out, ref) for out, ref in zip(outputs, alone, strict=True))


def check_threshold_caching(record_of: Callable[[float, str], dict], steps: int = 8, warmup: int = 4,
                            full: bool = False):
    """Threshold caching decides by the measured change: ``record_of(threshold, label)`` samples ``steps``
    steps with the node at that threshold and returns the prompt's stats record.

    At threshold 0 every step after ``warmup`` measures its change and none is cached. cache-dit compares
    only thresholds below 1 (1 or more caches every step), so the threshold then is one between the two
    smallest changes after warmup; the run is the same up to the first of them, so some step caches, and
    each step after warmup is cached exactly when its change is below the threshold. ``full``: first, at
    threshold 2 every step the limits allow is cached (warmup, then at most 3 in a row).
    """
    if full:
        record = record_of(2.0, "full")
        assert record["cached_steps"] == [4, 5, 6]
        assert [record["step_reasons"][s] for s in range(steps)] == \
            ["warmup"] * 4 + ["threshold"] * 3 + ["max_continuous"] * (steps - 7)
    off = record_of(0.0, "off")
    diffs = sorted(d for d in off["residual_diffs"][warmup:] if d is not None)
    assert off["cached_steps"] == [] and len(diffs) == steps - warmup and diffs[0] < 0.9, \
        f"every step after warmup measures its change, some below 0.9: {off['residual_diffs']}"
    threshold = round(min(0.95, (diffs[0] + diffs[1]) / 2), 4)
    mid = record_of(threshold, "mid")
    assert mid["cached_steps"], (threshold, off["residual_diffs"])
    for step in range(warmup, steps):
        reason, diff = mid["step_reasons"][step], mid["residual_diffs"][step]
        if step in mid["cached_steps"]:
            assert reason == "threshold" and diff < threshold, (step, diff, threshold)
        elif reason == "threshold":
            assert diff >= threshold, (step, diff, threshold)


def check_one_stream_per_device(record: dict, name: str, cached: list[int]):
    """A split-CFG run of node "5" on two device copies (ComfyUI's multi-GPU CFG split): cond on "cpu", uncond on
    "cpu:1", two modules, each caching ``cached`` as one device would."""
    devices = {d["device"]: d for d in record["devices"]}
    assert list(devices) == ["cpu", "cpu:1"] and record["model"] == name
    assert len({d["module_id"] for d in devices.values()}) == 2
    for label, branch in (("cpu", 0), ("cpu:1", 1)):
        assert devices[label]["cached_steps"] == cached
        assert {tuple(entry[1]) for entry in devices[label]["call_log"]} == {(branch,)}
    assert record["cached_steps"] == cached and record["cfg_mode"] == "split"
