"""Test-only ComfyUI nodes (and measurement routes), loaded only by the test and benchmark servers.

- ``Krea2TestConditioning``: seeded-random conditioning in place of the Krea-2 text encoder;
- ``Krea2TestLatent``: a seeded-random 16-channel latent (Krea-2's Wan 2.1 latent space), e.g. as
  an edit reference without a VAE;
- ``Krea2TestCompileBlocks``: torch.compile per transformer block, the way advanced compile nodes
  do it (``set_torch_compile_wrapper`` with keys ``diffusion_model.blocks.{i}``);
- ``Krea2TestMultiGPU``: ComfyUI's multi-GPU sampling on a machine with one device: a real
  per-device deep clone (``deepclone_multigpu``) attached as the "multigpu" model, so the sampler
  runs model calls in its thread pool on copies of the model;
- ``Krea2TestAttentionProbe``: real attention patches (``attn1_patch``, ``attn1_output_patch``)
  that record the block index and block count each block reports, and can scale one block's
  attention output, as patches that act on chosen blocks do;
- ``Krea2TestProxyDecode``: the latent decoder of the small trained Krea-2 proxy
  (tests/krea2_proxy.py), LATENT -> IMAGE, so images, the compare node and the compare
  template run on it without a VAE.

Krea-2's text encoder (Qwen3-VL-4B) has a fixed multi-GB architecture, so tests
cannot generate a small one. This node stands in for CLIPLoader + CLIPTextEncode
and yields seeded-random conditioning of the shape the native ``krea2`` text
encoder produces: ``(1, tokens, txtlayers * txtdim)``.

Its optional ``nonce`` changes nothing in the output, only ComfyUI's cache key:
a prompt with a new nonce samples again even when an identical graph ran before
(ComfyUI would otherwise serve the sampler's output from its cache).
"""

import importlib.util
import sys
from pathlib import Path

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
        }, "optional": {
            "nonce": ("INT", {"default": 0, "min": 0, "max": 2**62}),
        }}

    def make(self, seed, tokens, features, nonce=0):
        generator = torch.Generator().manual_seed(seed)
        context = torch.randn((1, tokens, features), generator=generator)
        return ([[context, {}]],)


class Krea2TestLatent:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("LATENT",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {
            "seed": ("INT", {"default": 0, "min": 0, "max": 2**31}),
            "width": ("INT", {"default": 64, "min": 16, "max": 4096, "step": 16}),
            "height": ("INT", {"default": 64, "min": 16, "max": 4096, "step": 16}),
        }}

    def make(self, seed, width, height):
        generator = torch.Generator().manual_seed(seed)
        return ({"samples": torch.randn((1, 16, height // 8, width // 8), generator=generator)},)


class Krea2TestCompileBlocks:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "backend": (["inductor", "eager", "aot_eager"],)}}

    def patch(self, model, backend):
        from comfy_api.torch_helpers import set_torch_compile_wrapper

        blocks = len(model.get_model_object("diffusion_model.blocks"))
        patched = model.clone()
        set_torch_compile_wrapper(patched, backend=backend,
                                  keys=[f"diffusion_model.blocks.{i}" for i in range(blocks)])
        return (patched,)


class Krea2TestMultiGPU:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    def patch(self, model):
        import comfy.model_management

        patched = model.clone()
        clone = model.deepclone_multigpu(new_load_device=comfy.model_management.get_torch_device())
        patched.set_additional_models("multigpu", [clone])
        return (patched,)


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


def _proxy_module():
    """tests/krea2_proxy.py, imported by path (the server does not have tests/ on its path)."""
    name = "krea2_cachedit_test_proxy"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "krea2_proxy.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


class Krea2TestProxyDecode:
    """The proxy's linear latent codec, decoding; ``codec_path`` empty = the cached proxy build's."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",)},
                "optional": {"codec_path": ("STRING", {"default": ""})}}

    def decode(self, samples, codec_path=""):
        proxy = _proxy_module()
        path = Path(codec_path) if codec_path else proxy.cache_dir() / proxy.CODEC_NAME
        if not path.is_file():
            raise FileNotFoundError(f"Krea2TestProxyDecode: no proxy codec at {path}; build the proxy first "
                                    f"(python3 dev.py test does, or: python tests/krea2_proxy.py build)")
        images = proxy.PatchCodec.load(path).decode_comfy(samples["samples"])
        return (images.permute(0, 2, 3, 1).contiguous(),)


NODE_CLASS_MAPPINGS = {"Krea2TestConditioning": Krea2TestConditioning, "Krea2TestLatent": Krea2TestLatent,
                       "Krea2TestCompileBlocks": Krea2TestCompileBlocks,
                       "Krea2TestMultiGPU": Krea2TestMultiGPU,
                       "Krea2TestAttentionProbe": Krea2TestAttentionProbe,
                       "Krea2TestProxyDecode": Krea2TestProxyDecode}

register_measurement_routes(PromptServer.instance.routes)
