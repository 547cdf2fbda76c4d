"""Test-only ComfyUI nodes, loaded only by the test servers.

- ``Krea2TestConditioning``: seeded-random conditioning in place of the Krea-2 text encoder;
- ``Krea2TestAttentionProbe``: real attention patches (``attn1_patch``, ``attn1_output_patch``)
  that record the block index and block count each block reports, and can scale one block's
  attention output, as patches that act on chosen blocks do.

Krea-2's text encoder (Qwen3-VL-4B) has a fixed multi-GB architecture, so tests
cannot generate a small one. This node stands in for CLIPLoader + CLIPTextEncode
and yields seeded-random conditioning of the shape the native ``krea2`` text
encoder produces: ``(1, tokens, txtlayers * txtdim)``.

Its optional ``nonce`` changes nothing in the output, only ComfyUI's cache key:
a prompt with a new nonce samples again even when an identical graph ran before
(ComfyUI would otherwise serve the sampler's output from its cache).
"""

import torch


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
        }, "optional": {
            "nonce": ("INT", {"default": 0, "min": 0, "max": 2**62}),
        }}

    def make(self, seed, tokens, features, nonce=0):
        generator = torch.Generator().manual_seed(seed)
        context = torch.randn((1, tokens, features), generator=generator)
        return ([[context, {}]],)


class Krea2TestAttentionProbe:
    """Adds attention patches to a MODEL clone; they append what each block call sees to a file."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "model": ("MODEL",),
            "log_path": ("STRING", {"default": ""}),
            "scale_block": ("INT", {"default": -1, "min": -1, "max": 1000}),
            "scale": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 10.0, "step": 0.01}),
        }}

    def patch(self, model, log_path, scale_block, scale):
        import json

        def record(kind, options):
            with open(log_path, "a") as log:
                log.write(json.dumps({"kind": kind, "block_index": options.get("block_index"),
                                      "total_blocks": options.get("total_blocks"),
                                      "sigma": float(options["sigmas"].flatten()[0])}) + "\n")

        def before_attention(q, k, v, extra_options=None, **kwargs):
            record("attn1_patch", extra_options)
            return {"q": q, "k": k, "v": v}

        def after_attention(out, extra_options):
            record("attn1_output_patch", extra_options)
            return out * scale if extra_options.get("block_index") == scale_block else out

        patched = model.clone()
        patched.set_model_attn1_patch(before_attention)
        patched.set_model_attn1_output_patch(after_attention)
        return (patched,)


NODE_CLASS_MAPPINGS = {"Krea2TestConditioning": Krea2TestConditioning,
                       "Krea2TestAttentionProbe": Krea2TestAttentionProbe}
