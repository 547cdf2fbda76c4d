"""ComfyUI's side of Krea-2 GGUF files: quantized Linear layers that ComfyUI can offload and patch.

A quantized weight stays a diffusers ``GGUFParameter`` (the file's bytes) wherever model
management puts it; the layer dequantizes it on the input's device at each call. LoRAs
and other weight patches cannot be baked into quantized bytes, so they are applied to the
dequantized weight at use, the way ComfyUI applies them to offloaded (lowvram) layers:
the patched model holds the file's size, and a step that Cache-DiT serves from its
cache dequantizes nothing.
"""

from __future__ import annotations

import comfy.lora
import comfy.model_patcher
import comfy.ops
import torch

from ..adapters.krea2_loader import krea2_gguf


def is_quantized(tensor) -> bool:
    return hasattr(tensor, "quant_type")


def quantized_linear_class(operations) -> type:
    """A Linear of ``operations`` (so model management treats it as castable) holding a GGUF weight."""

    class GGUFLinear(operations.Linear):
        def __init__(self, in_features, out_features, bias=True, compute_dtype=None):
            super().__init__(in_features, out_features, bias=bias, dtype=compute_dtype)
            self.compute_dtype = compute_dtype
            self.gguf_weight_patch = None

        def forward(self, input):
            run_every_op = getattr(comfy.ops, "run_every_op", None)
            if run_every_op is not None:
                run_every_op()
            weight = krea2_gguf.dequantize(self.weight.to(input.device), input.dtype)
            for function in self.weight_patches():  # LoRAs, on the dequantized weight
                weight = function(weight)
            bias = None
            if self.bias is not None:
                bias = self.bias.to(device=input.device, dtype=input.dtype)
                for function in self.bias_function:
                    bias = function(bias)
            return torch.nn.functional.linear(input, weight, bias)

        def weight_patches(self) -> list:
            # ComfyUI gives an offloaded layer its patches as a LowVramPatch weight function; a fully
            # loaded one keeps them in gguf_weight_patch, which ComfyUI's reloads do not wipe.
            functions = list(self.weight_function)
            if self.gguf_weight_patch is not None and not any(
                    getattr(function, "is_lowvram_patch", False) for function in functions):
                functions.insert(0, self.gguf_weight_patch)
            return functions

    return GGUFLinear


def quantized_linear_factory(operations):
    linear_class = quantized_linear_class(operations)

    def make(in_features: int, out_features: int, bias: bool, compute_dtype: torch.dtype) -> torch.nn.Module:
        return linear_class(in_features, out_features, bias, compute_dtype)
    return make


class GGUFPatching:
    """ModelPatcher behaviour for quantized weights: patches are applied at use, never baked.

    A patched quantized weight gets a ``LowVramPatch`` (ComfyUI's patch-at-use, as for offloaded
    layers) in its layer's ``gguf_weight_patch``; unpatching removes it again.
    """

    def patch_weight_to_device(self, key, device_to=None, inplace_update=False, return_weight=False,
                               force_cast=False):
        module_name, _, leaf = key.rpartition(".")
        module = self.get_model_object(module_name) if module_name else None
        weight = getattr(module, leaf, None) if module is not None else None
        if not is_quantized(weight):
            return super().patch_weight_to_device(key, device_to, inplace_update, return_weight, force_cast)
        if return_weight:  # e.g. saving a merged model: the patched weight in full precision
            value = krea2_gguf.dequantize(weight, torch.float32)
            return comfy.lora.calculate_weight(self.patches[key], value, key) if key in self.patches else value
        module.gguf_weight_patch = comfy.model_patcher.LowVramPatch(key, self.patches) if key in self.patches else None
        return None

    def unpatch_model(self, device_to=None, unpatch_weights=True):
        if unpatch_weights:
            for module in self.model.modules():
                if hasattr(module, "gguf_weight_patch"):
                    module.gguf_weight_patch = None
        return super().unpatch_model(device_to, unpatch_weights)
