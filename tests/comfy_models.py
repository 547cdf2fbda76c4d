"""Small real models for the ComfyUI server tests, built with the ComfyUI under test."""

from __future__ import annotations

import subprocess
from pathlib import Path

from comfy_harness import comfyui_python

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
