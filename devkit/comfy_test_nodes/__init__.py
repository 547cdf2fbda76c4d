"""Test-only ComfyUI nodes (and measurement routes), loaded only by the test and benchmark servers.

- ``Krea2TestConditioning``: seeded-random conditioning in place of the Krea-2 text encoder (with a
  pooled vector too, for Flux.1, when ``pooled_features`` is set);
- ``Krea2TestLatent``: a seeded-random 16-channel latent (Krea-2's Wan 2.1 latent space), e.g. as
  an edit reference without a VAE;
- ``Krea2TestCompileBlocks``: torch.compile per transformer block, the way advanced compile nodes
  do it (``set_torch_compile_wrapper`` with keys ``diffusion_model.blocks.{i}``);
- ``Krea2TestMultiGPU``: ComfyUI's multi-GPU sampling on a machine with one device: a real
  per-device deep clone (``deepclone_multigpu``) attached as the "multigpu" model for a second
  device key on the CPU, so the sampler runs cond and uncond in its thread pool on two copies;
- ``Krea2TestAttentionProbe``: real attention patches (``attn1_patch``, ``attn1_output_patch``)
  that record the block index and block count each block reports, and can scale one block's
  attention output, as patches that act on chosen blocks do;
- ``Krea2TestAttentionOverrideProbe``: an attention override that records the block index and block
  count of every attention call, for families whose blocks call no attention patches;
- ``Krea2TestDoubleBlockPatch``: a ``double_block`` patch (as ControlNet patches for Z-Image and
  Wan set it) that scales one block's output inside the model's own block loop;
- ``Krea2TestBlockReplace``: a ``patches_replace["dit"]`` entry for one Flux block (as PuLID-style
  nodes set it) that scales that block's output;
- ``Krea2TestSkipBlocks``: Chroma's block skip lists (``skip_mmdit``, ``skip_dit``) set on the model
  as an object patch, for the loop to skip one double or single block;
- ``Krea2TestBlockControl``: a network-free ControlNet on a conditioning whose ``control`` residual
  the model's own block loop adds after one block (as Qwen-Image's and Flux's loops add a ControlNet's);
- ``Krea2TestSampler``: ComfyUI's own k-diffusion samplers as third-party sampler nodes make
  them: euler with churn (``s_churn``), euler that never calls back, heun under a name the
  Cache-DiT node does not know;
- ``Krea2TestNonFinitePixels``: an IMAGE with some pixels set to NaN (a broken decode);
- ``Krea2TestProxyDecode``: the latent decoder of the small trained Krea-2 proxy
  (devkit/krea2_proxy.py), LATENT -> IMAGE, so images, the compare node and the compare
  template run on it without a VAE;
- ``Krea2TestOwnModelInput``: the diffusion model gets a copy of its input latent, as on a GPU in
  bf16 (where ComfyUI's cast to the compute dtype copies), for step caches that write into it.
- ``Krea2TestModelFunctionWrapper``: a ``model_function_wrapper`` that calls the model unchanged,
  as nodes that may change each call's conditioning install one.
- ``Krea2TestLatentBytes``: LATENT -> IMAGE without a VAE, each byte of the float32 latent as one
  channel value (byte / 255, a one-pixel-high RGB strip, zero-padded): an image path that rounds to
  8 bits (a PNG sent over HTTP) carries the latent exactly, so equal images mean bit-identical latents.
- ``Krea2TestEmptyAudioLatent``, ``Krea2TestTransformerOption``, ``Krea2TestPairedHiddenProbe``
  (``audio_video.py``): for LTX-2, whose loop hands its blocks a (video, audio) pair;
- ``Krea2TestModelWatch`` (``model_watch.py``): weak references to a model and its modules, read
  back with the pack's module-level registries by a route, to check that a model that ran is freed.
- ``Krea2TestSizedUNETLoader`` (``sized_loader.py``): a diffusion model ComfyUI detects at one size only
  (ERNIE-Image), built as ``UNETLoader`` builds it at the size its test checkpoint's metadata says;
- ``Krea2TestLoopDrift`` (``loop_drift.py``): ComfyUI's model code of Krea-2, Flux or MiniMax H3 changed for
  one sampling run (its loop, a block or the final layer), as an upstream update might;
- ``Krea2TestFinalLayerProbe``: per model call, the first block's output and the final layer's input
  and outputs (MiniMax H3's video and audio rows), saved for a test to check what a cached step served.

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

from .audio_video import NODE_CLASS_MAPPINGS as AUDIO_VIDEO_NODES
from .loop_drift import LOOP_DRIFT_NODES
from .measurement import register as register_measurement_routes
from .model_watch import Krea2TestModelWatch
from .model_watch import register as register_model_watch_route
from .sized_loader import NODE_CLASS_MAPPINGS as SIZED_LOADER_NODES


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
            "pooled_features": ("INT", {"default": 0, "min": 0, "max": 1 << 16}),
            "attention_mask": ("BOOLEAN", {"default": False}),
        }}

    def make(self, seed, tokens, features, nonce=0, pooled_features=0, attention_mask=False):
        generator = torch.Generator().manual_seed(seed)
        context = torch.randn((1, tokens, features), generator=generator)
        extra = {}
        if pooled_features:  # Flux.1's CLIP-L pooled vector (its ``y``)
            extra["pooled_output"] = torch.randn((1, pooled_features), generator=generator)
        if attention_mask:  # every token kept, as LTXV's T5 conditioning carries its mask
            extra["attention_mask"] = torch.ones((1, tokens), dtype=torch.long)
        return ([[context, extra]],)


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
    """What ``MultiGPU CFG Split`` builds, for a second device that is still this machine's CPU.

    ComfyUI maps each device to a model by its ``load_device`` and runs one thread per device;
    ``torch.device("cpu", 1)`` is a device key of its own that computes on the CPU, so cond and
    uncond really go to two model copies in two threads. ``share_model`` gives that device the
    main model itself instead of a deep clone (a device the cache cannot join).
    """

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}, "optional": {
            "device_index": ("INT", {"default": 1, "min": 0, "max": 64}),
            "share_model": ("BOOLEAN", {"default": False}),
        }}

    def patch(self, model, device_index=1, share_model=False):
        import comfy.multigpu

        device = torch.device(model.load_device.type, device_index)
        patched = model.clone()
        if share_model:
            clone = model.clone()
            clone.load_device = device
        else:
            clone = model.deepclone_multigpu(new_load_device=device)
        clone.is_multigpu_base_clone = True  # as create_multigpu_deepclones flags its clones
        patched.set_additional_models("multigpu", [clone])
        patched.match_multigpu_clones()
        comfy.multigpu.GPUOptionsGroup().register(patched)
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


class Krea2TestAttentionOverrideProbe:
    """An attention override (``optimized_attention_override``, as attention-backend nodes set it) that
    appends each attention call's block index and block count to a file. Unlike the attention patches,
    every family's attention calls it (Wan's and Z-Image's blocks call no ``attn1_output_patch``)."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "log_path": ("STRING", {"default": ""})}}

    def patch(self, model, log_path):
        import json

        def override(attention, *args, transformer_options=None, **kwargs):
            options = transformer_options or {}
            with open(log_path, "a") as log:
                log.write(json.dumps({"block_index": options.get("block_index"),
                                      "total_blocks": options.get("total_blocks"),
                                      "block_type": options.get("block_type"),
                                      "sigma": float(options["sigmas"].flatten()[0])}) + "\n")
            return attention(*args, transformer_options=transformer_options, **kwargs)

        patched = model.clone()
        patched.model_options.setdefault("transformer_options", {})["optimized_attention_override"] = override
        return (patched,)


class Krea2TestDoubleBlockPatch:
    """A ``double_block`` patch, as ComfyUI's Z-Image and Wan ControlNet patches set it: the model's own
    block loop calls it after every block with that block's index; it scales one block's output."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "block": ("INT", {"default": 1, "min": 0, "max": 1000}),
                             "scale": ("FLOAT", {"default": 0.5, "min": 0.0, "max": 10.0, "step": 0.01})}}

    def patch(self, model, block, scale):
        def after_block(args):
            # Everything else passed through: Qwen-Image's loop also reads back the text stream ("txt").
            return {**args, "img": args["img"] * scale if args["block_index"] == block else args["img"]}

        patched = model.clone()
        patched.set_model_double_block_patch(after_block)
        return (patched,)


class Krea2TestBlockReplace:
    """Replaces one Flux block through ``patches_replace["dit"]``: the model's loop calls the patch
    instead of that block (by kind and index); it runs the original block and scales its image output."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "kind": (["double_block", "single_block"],),
                             "block": ("INT", {"default": 1, "min": 0, "max": 1000}),
                             "scale": ("FLOAT", {"default": 0.5, "min": 0.0, "max": 10.0, "step": 0.01})}}

    def patch(self, model, kind, block, scale):
        def replace(args, extra):
            out = extra["original_block"](args)
            img = out["img"]   # LTX-2's blocks: the (video, audio) pair
            return {**out, "img": tuple(part * scale for part in img) if isinstance(img, tuple) else img * scale}

        patched = model.clone()
        patched.set_model_patch_replace(replace, "dit", kind, block)
        return (patched,)


class Krea2TestSkipBlocks:
    """Sets one of Chroma's skip lists (``skip_mmdit``: double blocks, ``skip_dit``: single blocks) to one
    block, as an object patch of the model (set while it samples, restored after): its loop skips it."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "skip_list": (["skip_mmdit", "skip_dit"],),
                             "block": ("INT", {"default": 1, "min": 0, "max": 1000})}}

    def patch(self, model, skip_list, block):
        patched = model.clone()
        patched.add_object_patch(f"diffusion_model.{skip_list}", [block])
        return (patched,)


class Krea2TestBlockControl:
    """A ControlNet without a network, as ComfyUI's ControlNet apply nodes attach one to a conditioning:
    on every call its ``control`` holds one residual (a constant ``scale`` on the first token, ``features``
    wide: the model's token width) for block ``block``'s output in the ``input`` list, which the model's
    own block loop (Qwen-Image's, Flux's double blocks) adds after that block, by index."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("CONDITIONING",)
    FUNCTION = "apply"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"conditioning": ("CONDITIONING",),
                             "block": ("INT", {"default": 1, "min": 0, "max": 1000}),
                             "features": ("INT", {"default": 128, "min": 1, "max": 1 << 16}),
                             "scale": ("FLOAT", {"default": 0.5, "min": -10.0, "max": 10.0, "step": 0.01})}}

    def apply(self, conditioning, block, features, scale):
        import comfy.controlnet

        class BlockControl(comfy.controlnet.ControlBase):
            def get_control(self, x_noisy, t, cond, batched_number, transformer_options):
                add = torch.full((x_noisy.shape[0], 1, features), scale, dtype=x_noisy.dtype, device=x_noisy.device)
                return {"input": [None] * block + [add], "middle": [], "output": []}

            def copy(self):
                return BlockControl()

        return ([[context, {**options, "control": BlockControl(), "control_apply_to_uncond": True}]
                 for context, options in conditioning],)


class Krea2TestSampler:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("SAMPLER",)
    FUNCTION = "make"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"kind": (["euler_churn", "euler_silent", "heun_renamed"],),
                             "s_churn": ("FLOAT", {"default": 1.0, "min": 0.0, "max": 100.0})}}

    def make(self, kind, s_churn):
        import comfy.samplers
        from comfy.k_diffusion import sampling

        if kind == "euler_churn":
            return (comfy.samplers.KSAMPLER(sampling.sample_euler, extra_options={"s_churn": s_churn}),)
        if kind == "euler_silent":
            def euler_without_callback(model, x, sigmas, extra_args=None, callback=None, disable=None):
                return sampling.sample_euler(model, x, sigmas, extra_args=extra_args, callback=None, disable=disable)
            return (comfy.samplers.KSAMPLER(euler_without_callback),)

        def second_order_sampler(model, x, sigmas, extra_args=None, callback=None, disable=None):
            return sampling.sample_heun(model, x, sigmas, extra_args=extra_args, callback=callback, disable=disable)
        return (comfy.samplers.KSAMPLER(second_order_sampler),)


class Krea2TestNonFinitePixels:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "spoil"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"image": ("IMAGE",), "pixels": ("INT", {"default": 1, "min": 0, "max": 1 << 20})}}

    def spoil(self, image, pixels):
        spoilt = image.clone()
        spoilt[0].view(-1, spoilt.shape[-1])[:pixels, 0] = float("nan")
        return (spoilt,)


def _proxy_module():
    """devkit/krea2_proxy.py, imported by path (the server does not have devkit/ on its path)."""
    name = "krea2_cachedit_test_proxy"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, Path(__file__).resolve().parents[1] / "krea2_proxy.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses look their module up while the file runs
        spec.loader.exec_module(module)
    return sys.modules[name]


class Krea2TestProxyDecode:
    """The proxy's linear latent codec, decoding; ``codec_path``: the proxy build's codec file (the server
    cannot tell which build the test samples: it names the file)."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "decode"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",), "codec_path": ("STRING", {"default": ""})}}

    def decode(self, samples, codec_path):
        proxy = _proxy_module()
        path = Path(codec_path)
        if not path.is_file():
            raise FileNotFoundError(f"Krea2TestProxyDecode: codec_path {codec_path!r} is not a file: give the proxy "
                                    f"build's {proxy.CODEC_NAME} (python -m devkit.krea2_proxy path names its folder)")
        images = proxy.PatchCodec.load(path).decode_comfy(samples["samples"])
        return (images.permute(0, 2, 3, 1).contiguous(),)


class Krea2TestOwnModelInput:
    """Gives the diffusion model a copy of its input latent, as ComfyUI's cast to the model's compute
    dtype does when that differs from the latent's (bf16 or fp16 weights on a GPU).

    With float32 weights (the CPU) ComfyUI hands the diffusion model the very tensor it later
    computes the denoised latent from; a wrapper that writes into its input in place (EasyCache's
    skipped step adds its cached difference into it) then corrupts that latent. Put this node before
    such a wrapper to measure it as it behaves where the cast copies.
    """

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    def patch(self, model):
        import comfy.patcher_extension

        def own_input(executor, x, *args, **kwargs):
            return executor(x.clone(), *args, **kwargs)

        patched = model.clone()
        # Registered first, it is the outermost wrapper: every later one sees the copy.
        patched.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL, "krea2_test_own_input",
                                     own_input)
        return (patched,)


class Krea2TestModelFunctionWrapper:
    """Installs a ``model_function_wrapper`` that passes every call through unchanged."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",)}}

    def patch(self, model):
        def pass_through(apply_model, args):
            return apply_model(args["input"], args["timestep"], **args["c"])

        patched = model.clone()
        patched.set_model_unet_function_wrapper(pass_through)
        return (patched,)


class Krea2TestLatentBytes:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("IMAGE",)
    FUNCTION = "encode"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"samples": ("LATENT",)}}

    def encode(self, samples):
        latents = samples["samples"].to(torch.float32).contiguous()
        strips = []
        for latent in latents:  # one image per latent of the batch
            data = latent.flatten().view(torch.uint8).to(torch.float32)
            data = torch.cat([data, data.new_zeros(-len(data) % 3)])
            strips.append((data / 255.0).reshape(1, -1, 3))
        return (torch.stack(strips),)


NODE_CLASS_MAPPINGS = {"Krea2TestConditioning": Krea2TestConditioning, "Krea2TestLatent": Krea2TestLatent,
                       "Krea2TestCompileBlocks": Krea2TestCompileBlocks,
                       "Krea2TestMultiGPU": Krea2TestMultiGPU,
                       "Krea2TestAttentionProbe": Krea2TestAttentionProbe,
                       "Krea2TestAttentionOverrideProbe": Krea2TestAttentionOverrideProbe,
                       "Krea2TestDoubleBlockPatch": Krea2TestDoubleBlockPatch,
                       "Krea2TestBlockReplace": Krea2TestBlockReplace, "Krea2TestBlockControl": Krea2TestBlockControl,
                       "Krea2TestSkipBlocks": Krea2TestSkipBlocks,
                       "Krea2TestSampler": Krea2TestSampler, "Krea2TestNonFinitePixels": Krea2TestNonFinitePixels,
                       "Krea2TestProxyDecode": Krea2TestProxyDecode,
                       "Krea2TestOwnModelInput": Krea2TestOwnModelInput,
                       "Krea2TestModelFunctionWrapper": Krea2TestModelFunctionWrapper,
                       "Krea2TestLatentBytes": Krea2TestLatentBytes,
                       "Krea2TestModelWatch": Krea2TestModelWatch, **AUDIO_VIDEO_NODES,
                       **LOOP_DRIFT_NODES, **SIZED_LOADER_NODES}

register_measurement_routes(PromptServer.instance.routes)
register_model_watch_route(PromptServer.instance.routes)


class Krea2TestFinalLayerProbe:
    """Records, per model call of one sampling run, the first block's output (the Fn blocks' output at
    Fn 1), the hidden state the final layer reads and what it returns (MiniMax H3: video and audio rows),
    with the call's ``cond_or_uncond``, into ``log_path`` (``torch.save``, at the end of the run). Forward
    hooks on the model's own first block and final layer, taken when the node runs (before any cache
    wraps the block list), held only while the run samples."""

    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "patch"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"model": ("MODEL",), "log_path": ("STRING", {"default": ""})}}

    def patch(self, model, log_path):
        import comfy.patcher_extension

        diffusion_model = model.model.diffusion_model
        first_block, final_layer = diffusion_model.blocks[0], diffusion_model.final_layer

        def outer_sample(executor, *args, **kwargs):
            calls = []

            def after_first(module, block_args, block_kwargs, output):
                options = block_kwargs.get("transformer_options") or {}
                calls.append({"branches": list(options.get("cond_or_uncond") or []),
                              "fn_out": output.detach().clone()})

            def after_final(module, layer_args, output):
                calls[-1].update(final_in=layer_args[0].detach().clone(), video=output[0].detach().clone(),
                                 audio=output[1].detach().clone())

            hooks = [first_block.register_forward_hook(after_first, with_kwargs=True),
                     final_layer.register_forward_hook(after_final)]
            try:
                return executor(*args, **kwargs)
            finally:
                for hook in hooks:
                    hook.remove()
                torch.save(calls, log_path)

        patched = model.clone()
        patched.add_wrapper_with_key(comfy.patcher_extension.WrappersMP.OUTER_SAMPLE, "krea2_test_final_layer_probe",
                                     outer_sample)
        return (patched,)


NODE_CLASS_MAPPINGS["Krea2TestFinalLayerProbe"] = Krea2TestFinalLayerProbe
