"""Test-only ComfyUI nodes (and measurement routes), loaded only by the test and benchmark servers.

Krea-2's text encoder (Qwen3-VL-4B) has a fixed multi-GB architecture, so tests
cannot generate a small one. This node stands in for CLIPLoader + CLIPTextEncode
and yields seeded-random conditioning of the shape the native ``krea2`` text
encoder produces: ``(1, tokens, txtlayers * txtdim)``.
"""

import torch
from server import PromptServer

from .measurement import register as register_measurement_routes


class Krea2TestConditioning:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "seed": ("INT", {"default": 0, "min": 0, "max": 2**31}),
            "tokens": ("INT", {"default": 8, "min": 1, "max": 4096}),
            "features": ("INT", {"default": 120, "min": 1, "max": 1 << 20}),
        }}

    def make(self, seed, tokens, features):
        generator = torch.Generator().manual_seed(seed)
        context = torch.randn((1, tokens, features), generator=generator)
        return ([[context, {}]],)


NODE_CLASS_MAPPINGS = {"Krea2TestConditioning": Krea2TestConditioning}

register_measurement_routes(PromptServer.instance.routes)
