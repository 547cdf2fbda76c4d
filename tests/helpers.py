"""What the ComfyUI tests share: the cache node's settings for the usual cases, running a prompt, and a
LoRA for a family's own checkpoint.

The settings are the node's inputs over ``krea2_prompt``'s defaults (``CACHE_NODE_DEFAULTS``); the
runners queue a prompt on a test server, wait for it and fail, with the server's log, when it failed.
"""

from __future__ import annotations

from pathlib import Path

from comfy_harness import ComfyServer, prompt_error

FAST = {"steps_mask": "fast"}
FAST_8_CACHED = [3, 5, 6]   # cache-dit's "fast" mask for 8 steps: 1 1 1 0 1 0 0 1
OFF = {"residual_diff_threshold": 0.0, "steps_mask": "none"}   # the node on the model, caching nothing


def run_ok(server: ComfyServer, prompt: dict, timeout: float = 600.0) -> dict:
    """The history entry of ``prompt``, which must succeed."""
    entry = server.run(prompt, timeout)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    return entry


def latent_and_record(server: ComfyServer, prompt: dict, node_id: str | None = "5", timeout: float = 600.0):
    """The latent ``prompt`` saved (SaveLatent "7") and the stats record its node ``node_id`` published:
    exactly one when the prompt has that node, None when it has none (or ``node_id`` is None)."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id, timeout)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    record = server.stats_for(prompt_id, node_id)[0] if node_id is not None and node_id in prompt else None
    return server.saved_latent(entry, "7"), record


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
