"""Krea-2 at its real size with only the block count cut to 2: the model, its prompt and its server.

The real architecture (width 6144, 48 heads / 12 KV heads, text 12 x 2560) with two blocks, bf16
weights written tensor by tensor (3 GB), sampled at 1024x1024 (4096 image tokens). One Fn residual
of such a call holds 1 x 4112 x 6144 = 25M values (``FN_RESIDUAL_VALUES``), above 2**24, where
float32 index arithmetic breaks. The realshape test tier (``tests/realshape/test_realshape_comfyui.py``) and
the memory benchmark (``benchmarks/realshape_memory.py``) run it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from devkit import krea2_synthetic
from devkit.checkpoint_cache import cache_key, cached_checkpoint
from devkit.comfy_harness import ComfyServer
from devkit.krea2_prompts import krea2_prompt
from devkit.krea2_synthetic import FULL_SIZE, write_native_checkpoint

# The real architecture with two blocks: Fn=1 computes block 0, a cached step skips block 1.
REALSHAPE = dataclasses.replace(FULL_SIZE, layers=2)
REALSHAPE_MODEL = "krea2_realshape.safetensors"
REALSHAPE_SIZE, REALSHAPE_TOKENS, REALSHAPE_STEPS = 1024, 16, 2
FN_RESIDUAL_VALUES = (REALSHAPE_SIZE // 16) ** 2 * REALSHAPE.features + REALSHAPE_TOKENS * REALSHAPE.features


def realshape_prompt(cache: dict | None, seed: int = 0) -> dict:
    prompt = krea2_prompt(steps=REALSHAPE_STEPS, cfg=1.0, size=REALSHAPE_SIZE, model=REALSHAPE_MODEL,
                          pos_tokens=REALSHAPE_TOKENS, neg_tokens=REALSHAPE_TOKENS, cache=cache, seed=seed,
                          prefix="krea2_realshape")
    for node in ("2", "3"):
        prompt[node]["inputs"]["features"] = REALSHAPE.context_features
    return prompt


def start_realshape_server(comfy_root, base) -> ComfyServer:
    """A server with the two-block real-size Krea-2 (bf16, 3 GB): drawn tensor by tensor into the checkpoint
    cache once, copied from it after."""
    base = ComfyServer.prepare_base_dir(base)
    key = cache_key(Path(krea2_synthetic.__file__).read_text(), repr(REALSHAPE), "seed 0", "bfloat16")
    cached_checkpoint(base / "models" / "diffusion_models" / REALSHAPE_MODEL, "krea2_realshape", key,
                      lambda out: write_native_checkpoint(out, REALSHAPE, seed=0, dtype=torch.bfloat16))
    return ComfyServer(comfy_root, base).start(timeout=300)
