"""Small real models for the ComfyUI server tests, built with the ComfyUI under test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from comfy_harness import comfyui_python, load_pack

load_pack()
from krea2_synthetic import Krea2Shape, native_state_dict  # noqa: E402

# A one-layer Wan 2.1 transformer: a real, non-Krea MODEL that ComfyUI's UNETLoader detects
# from its shapes. Built with ComfyUI's own class so the key names are exactly its own.
_WAN_SCRIPT = """
import sys
out_path = sys.argv[-1]
sys.argv = ["make_tiny_wan", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.ops, torch
from safetensors.torch import save_file
from comfy.ldm.wan.model import WanModel
model = WanModel(model_type="t2v", patch_size=(1, 2, 2), in_dim=16, dim=128, ffn_dim=256, freq_dim=256,
                 text_dim=4096, out_dim=16, num_heads=1, num_layers=1, operations=comfy.ops.disable_weight_init)
save_file({k: torch.zeros(v.shape) for k, v in model.state_dict().items()}, out_path)
"""


def make_tiny_wan(comfy_root: Path, path: Path) -> Path:
    subprocess.run([comfyui_python(comfy_root), "-c", _WAN_SCRIPT, str(path)], cwd=comfy_root, check=True,
                   capture_output=True, timeout=300)
    return path


def make_lora(shape: Krea2Shape, native_names: bool, rank: int = 4) -> dict[str, torch.Tensor]:
    """A rank-``rank`` LoRA on every block's q projection and MLP down projection, large enough to matter."""
    generator = torch.Generator().manual_seed(11)
    hidden = native_state_dict(shape)["blocks.0.mlp.down.weight"].shape[1]
    targets = {"attn.wq": ("attn.to_q", shape.features, shape.features),
               "mlp.down": ("ff.down", shape.features, hidden)}
    lora = {}
    for block in range(shape.layers):
        for native, (diffusers, rows, cols) in targets.items():
            name = (f"diffusion_model.blocks.{block}.{native}" if native_names
                    else f"transformer.transformer_blocks.{block}.{diffusers}")
            lora[f"{name}.lora_A.weight"] = torch.randn(rank, cols, generator=generator) * 0.3
            lora[f"{name}.lora_B.weight"] = torch.randn(rows, rank, generator=generator) * 0.3
    return lora


# Linear layers of a Krea-2 block that quantized checkpoints store in fp8.
QUANTIZED_LAYERS = ("attn.wq", "attn.wk", "attn.wv", "attn.gate", "attn.wo", "mlp.gate", "mlp.up", "mlp.down")


def fp8_scaled_state_dict(native: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A ``*_fp8_scaled`` checkpoint of a native Krea-2 state dict, in ComfyUI's scaled-fp8 format.

    Block linear weights become float8_e4m3fn with a per-tensor ``scale_weight`` (absmax / 448);
    the ``scaled_fp8`` marker tells ComfyUI's loader to read them as quantized layers.
    """
    out = dict(native)
    for name, tensor in native.items():
        layer = name[:-len(".weight")]
        if name.startswith("blocks.") and name.endswith(".weight") and layer.split(".", 2)[2] in QUANTIZED_LAYERS:
            scale = tensor.abs().max().float() / 448.0
            out[name] = (tensor.float() / scale).to(torch.float8_e4m3fn)
            out[f"{layer}.scale_weight"] = scale.reshape(())
    out["scaled_fp8"] = torch.zeros(2, dtype=torch.float8_e4m3fn)
    return out
