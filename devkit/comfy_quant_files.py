"""Checkpoints in ComfyUI's own quantized format (``comfy_quant`` layers), written by ComfyUI's own code.

ComfyUI reads a layer as quantized when the file holds ``<layer>.comfy_quant`` (the layer's format as JSON, e.g.
``{"format": "int8_tensorwise", "convrot": true, "convrot_groupsize": 256}``) beside its quantized ``weight`` and
scales (``comfy.ops._load_quantized_module``; ``comfy.utils.detect_layer_quantization`` turns ComfyUI's
mixed-precision layers on for the whole model). Comfy-Org's ``*_int8_convrot`` files, the ones the Krea-2 Turbo
and Z-Image Turbo int8 templates load, are such files. ComfyUI writes the same keys itself when it saves a model
holding quantized layers (``MixedPrecisionOps.Linear.state_dict``, ``comfy.ops._quantized_weight_state_dict``), so
that is the writer used here: each chosen Linear weight of a full-precision checkpoint is quantized by the
comfy-kitchen layout ComfyUI names for the format (``QUANT_ALGOS[format]["comfy_tensor_layout"]``,
``QuantizedTensor.from_float``), set on ComfyUI's mixed-precision ``Linear`` and saved by it; every other tensor
is kept as it is. Made with ComfyUI's python and kept in the checkpoint cache (``devkit/checkpoint_cache.py``).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

from devkit.checkpoint_cache import cache_key, cached_checkpoint, comfyui_identity
from devkit.comfy_harness import comfyui_python

# File format -> (its ``comfy_quant`` format, the layout's quantize options). "int8" is one scale per tensor;
# "int8_convrot" the Comfy-Org int8 files' kind: a scale per output row of the weight rotated by ConvRot's
# Hadamard groups of 256 (comfy-kitchen takes convrot only with per-channel scales). The rest are the other
# formats ComfyUI 0.33 lists in ``comfy.quant_ops.QUANT_ALGOS``, each with its layout's default options.
COMFY_QUANT = {
    "int8": ("int8_tensorwise", {}),
    "int8_convrot": ("int8_tensorwise", {"per_channel": True, "convrot": True, "convrot_groupsize": 256}),
    "float8_e4m3fn": ("float8_e4m3fn", {"scale": "recalculate"}),
    "float8_e5m2": ("float8_e5m2", {"scale": "recalculate"}),
    "nvfp4": ("nvfp4", {}),
    "mxfp8": ("mxfp8", {}),
    "convrot_w4a4": ("convrot_w4a4", {"convrot_groupsize": 256}),
    "asym_w4a8_int8": ("asym_w4a8_int8", {}),
}

_COMFY_QUANT_SCRIPT = """
import fnmatch, json, sys
source, quant_format, options, patterns, out_path = sys.argv[-5:]
options, patterns = json.loads(options), json.loads(patterns)
sys.argv = ["make_comfy_quant", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.ops, torch
from comfy.quant_ops import QUANT_ALGOS, QuantizedTensor
from safetensors import safe_open
from safetensors.torch import save_file

layout = QUANT_ALGOS[quant_format]["comfy_tensor_layout"]
operations = comfy.ops.mixed_precision_ops({})
state, quantized = {}, []
with safe_open(source, "pt") as checkpoint:
    metadata = checkpoint.metadata()
    for key in checkpoint.keys():
        tensor = checkpoint.get_tensor(key)
        layer = key[:-len(".weight")]
        if key.endswith(".weight") and tensor.ndim == 2 and any(fnmatch.fnmatchcase(layer, p) for p in patterns):
            rows, columns = tensor.shape
            # The bias stays the checkpoint's own: the layer is made without one, so its state dict has none.
            linear = operations.Linear(columns, rows, bias=False, device="cpu")
            linear.quant_format = quant_format
            weight = QuantizedTensor.from_float(tensor.float(), layout, **options)
            linear.weight = torch.nn.Parameter(weight, requires_grad=False)
            state.update(linear.state_dict(prefix=f"{layer}."))
            quantized.append(layer)
        else:
            state[key] = tensor
assert quantized, f"no Linear weight matches {patterns}"
save_file({key: tensor.contiguous() for key, tensor in state.items()}, out_path, metadata=metadata)
print(json.dumps({"format": quant_format, "layers": quantized}))
"""


def file_digest(path: Path) -> str:
    with open(path, "rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()


def make_comfy_quant_checkpoint(comfy_root: Path, source: Path, path: Path, file_format: str,
                                layers: tuple[str, ...]) -> Path:
    """``path`` holds ``source`` (a full-precision checkpoint) with its Linear weights named by ``layers``
    (fnmatch patterns of the layer names, e.g. ``blocks.*.attn.wq``) in the ``COMFY_QUANT`` format
    ``file_format``, written by ComfyUI's own mixed-precision layers; cached under ``path``'s name."""
    quant_format, options = COMFY_QUANT[file_format]
    args = [str(Path(source).resolve()), quant_format, json.dumps(options, sort_keys=True), json.dumps(list(layers))]

    def make(out: Path):
        done = subprocess.run([comfyui_python(comfy_root), "-c", _COMFY_QUANT_SCRIPT, *args, str(out)],
                              cwd=comfy_root, capture_output=True, text=True, timeout=900)
        if done.returncode != 0:
            raise RuntimeError(f"writing {file_format} from {source} failed:\n{done.stderr[-4000:]}")

    key = cache_key(_COMFY_QUANT_SCRIPT, file_digest(source), *args[1:], comfyui_identity(comfy_root))
    return cached_checkpoint(path, Path(path).stem, key, make)
