"""Small real models for the ComfyUI server tests, built with the ComfyUI under test."""

from __future__ import annotations

import subprocess
from pathlib import Path

import torch

from devkit.checkpoint_cache import cache_key, cached_checkpoint, comfyui_identity
from devkit.comfy_harness import comfyui_python, load_pack

load_pack()
from devkit.krea2_synthetic import Krea2Shape, native_state_dict  # noqa: E402

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


def _generated(comfy_root: Path, path: Path, label: str, script: str, *args: str, timeout: float = 300) -> Path:
    """``path`` holds what ``script`` writes with ComfyUI's python (its arguments, then the output file),
    from the checkpoint cache when the same script, arguments and ComfyUI made it before."""
    def make(out: Path):
        subprocess.run([comfyui_python(comfy_root), "-c", script, *args, str(out)], cwd=comfy_root, check=True,
                       capture_output=True, timeout=timeout)

    return cached_checkpoint(path, label, cache_key(script, *args, comfyui_identity(comfy_root)), make)


def make_tiny_wan(comfy_root: Path, path: Path) -> Path:
    return _generated(comfy_root, path, "tiny_wan", _WAN_SCRIPT)


# Seeded-random checkpoints of other families, in ComfyUI's native key format, built with
# ComfyUI's own class (on the meta device: only the key names and shapes are taken from it) and
# checked against ComfyUI's own detection, so UNETLoader loads them as that model.
_FAMILY_SCRIPT = """
import json, sys
family, seed, out_path = sys.argv[-3], int(sys.argv[-2]), sys.argv[-1]
sys.argv = ["make_family", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.model_detection, comfy.ops, torch
from safetensors.torch import save_file

metadata = None   # the checkpoint's safetensors metadata, where ComfyUI reads config from it
# Z-Image, Qwen-Image and Chroma: ComfyUI's loaders detect them only at their real width, so their stand-ins are
# narrow, with their size in the metadata for the test node pack's ``Krea2TestSizedUNETLoader`` (``sized``: the
# unet config it builds them at, and the model config class where detection would pick another); the
# "<family>_shallow" files keep the real width and few blocks, for the loaders that detect (UNETLoader's fp8 and
# comfy_quant files, ComfyUI-GGUF's).
shallow = family.endswith("_shallow")
family = family.removesuffix("_shallow")
sized = None
if family.startswith("wan"):
    from comfy.ldm.wan.model import VaceWanModel, WanModel
    # Narrow: ComfyUI reads dim, heads (dim // 128), ffn_dim and the block count from the shapes.
    shape = dict(dim=128, ffn_dim=256, num_heads=1, num_layers=4, text_dim=4096, device="meta",
                 operations=comfy.ops.disable_weight_init)
    if family == "wan_vace":  # a subclass whose loop injects features by block index
        model, expected = VaceWanModel(vace_layers=2, vace_in_dim=96, **shape), "WAN21_Vace"
    else:
        model, expected = WanModel(model_type="t2v", **shape), "WAN21_T2V"
    dtype = torch.float32
elif family == "qwen_image":
    from comfy.ldm.qwen_image.model import QwenImageTransformer2DModel
    # ComfyUI 0.33 reads only the block count and input width from the shapes: the rest (24 heads of 128, text
    # width 3584) is fixed. The stand-in: one head of 128, 2 blocks, the real text width; shallow: 24 heads.
    sized = {} if shallow else dict(num_attention_heads=1, attention_head_dim=128)
    model = QwenImageTransformer2DModel(num_layers=2, device="meta", operations=comfy.ops.disable_weight_init,
                                        **sized)
    expected, dtype = "QwenImage", torch.bfloat16
elif family.startswith("flux"):
    from comfy.ldm.flux.model import Flux
    # Narrow: ComfyUI reads the width from img_in/txt_in, the heads as width // sum(axes_dim) (128: one
    # head) and the block counts from the keys; Flux.2 is told by its global modulation, the guidance
    # model (Flux.1 dev, Flux.2 dev) by its guidance_in. 2 double + 3 single blocks.
    common = dict(hidden_size=128, num_heads=1, depth=2, depth_single_blocks=3, context_in_dim=64, device="meta",
                  operations=comfy.ops.disable_weight_init)
    if family == "flux1":
        model = Flux(in_channels=16, out_channels=16, vec_in_dim=32, mlp_ratio=4.0, axes_dim=[16, 56, 56],
                     theta=10000, patch_size=2, qkv_bias=True, guidance_embed=True, txt_ids_dims=[], **common)
        expected = "Flux"
    else:  # "flux2" (dev, with guidance) or "flux2_klein" (without)
        model = Flux(in_channels=128, out_channels=128, vec_in_dim=None, mlp_ratio=3.0, axes_dim=[32, 32, 32, 32],
                     theta=2000, patch_size=1, qkv_bias=False, guidance_embed=family == "flux2", txt_ids_dims=[3],
                     global_modulation=True, mlp_silu_act=True, ops_bias=False, **common)
        expected = "Flux2"
    dtype = torch.float32
elif family == "chroma":
    from comfy.ldm.chroma.model import Chroma
    # ComfyUI 0.33 detects Chroma's width from img_in/txt_in but fixes its approximator (5 layers of 5120,
    # out 3072), whose modulation the blocks add to the hidden states: detected, the model is 3072 wide (shallow:
    # 2 double + 2 single blocks, 1.9 GB in bf16). The stand-in: 128 wide (one head), its approximator 2 layers
    # of 128. The text width is read from txt_in (64 here).
    width = dict(hidden_size=3072, num_heads=24, out_dim=3072, hidden_dim=5120, n_layers=5) if shallow else \
        dict(hidden_size=128, num_heads=1, out_dim=128, hidden_dim=128, n_layers=2)
    sized = None if shallow else {key: width[key] for key in ("out_dim", "hidden_dim", "n_layers")}
    model = Chroma(in_channels=64, out_channels=64, context_in_dim=64, mlp_ratio=4.0, depth=2, depth_single_blocks=2,
                   axes_dim=[16, 56, 56], theta=10000, patch_size=2, qkv_bias=True, in_dim=64, txt_ids_dims=[],
                   vec_in_dim=None, device="meta", operations=comfy.ops.disable_weight_init, **width)
    expected, dtype = "Chroma", torch.bfloat16
elif family == "ltxv":
    from comfy.ldm.lightricks.model import LTXVModel
    # Narrow: ComfyUI 0.33 fixes 32 heads and reads their width (attn2.to_k rows // 32) and the context
    # width from the shapes: 32 heads of 4 (width 128), 4 blocks; the caption projection takes 4096.
    model = LTXVModel(in_channels=128, cross_attention_dim=128, attention_head_dim=4, num_attention_heads=32,
                      caption_channels=4096, num_layers=4, device="meta", operations=comfy.ops.disable_weight_init)
    expected, dtype = "LTXV", torch.float32
elif family == "ltx2":
    from comfy.ldm.lightricks.av_model import LTXAVModel
    # ComfyUI 0.33 reads LTX-2's video width as LTXV's (32 heads of attn2.to_k rows // 32) and the rest from
    # the checkpoint's metadata config, as real LTX-2 files carry it: video 32 heads of 4 (width 128),
    # audio 16 heads of 4 (width 64), captions 64 wide per stream, one connector layer, 4 blocks.
    config = dict(caption_channels=64, audio_attention_head_dim=4, audio_num_attention_heads=16,
                  audio_cross_attention_dim=64, connector_attention_head_dim=4, connector_num_attention_heads=16,
                  connector_num_layers=1)
    model = LTXAVModel(in_channels=128, cross_attention_dim=128, attention_head_dim=4, num_attention_heads=32,
                       num_layers=4, device="meta", operations=comfy.ops.disable_weight_init, **config)
    metadata = {"config": json.dumps({"transformer": config})}
    expected, dtype = "LTXAV", torch.float32
elif family.startswith("hunyuan"):
    from comfy.ldm.hunyuan_video.model import HunyuanVideo
    # Narrow: ComfyUI reads the width from img_in, the heads as width // 128 (one head), the block counts
    # from the keys, the text width from txt_in. HunyuanVideo 1.5 (t2v: 65 input channels, noise + image
    # + mask; vision_in 1152 wide, as ComfyUI requires) has double blocks only, as the real one (54 + 0):
    # 3 of them. HunyuanImage 2.1 (2D, 64 channels, patch 1x1, no vector_in) has both lists: 2 + 2.
    common = dict(context_in_dim=64, hidden_size=128, mlp_ratio=4.0, num_heads=1, theta=256, qkv_bias=True,
                  guidance_embed=False, byt5=False, meanflow=False, vec_in_dim=None, device="meta",
                  operations=comfy.ops.disable_weight_init)
    if family == "hunyuan_video15":
        model = HunyuanVideo(in_channels=65, out_channels=32, depth=3, depth_single_blocks=0, axes_dim=[16, 56, 56],
                             patch_size=[1, 1, 1], use_cond_type_embedding=True, vision_in_dim=1152,
                             meanflow_sum=True, **common)
        expected = "HunyuanVideo15"
    else:  # "hunyuan_image21"
        model = HunyuanVideo(in_channels=64, out_channels=64, depth=2, depth_single_blocks=2, axes_dim=[64, 64],
                             patch_size=[1, 1], use_cond_type_embedding=False, vision_in_dim=None,
                             meanflow_sum=False, **common)
        expected = "HunyuanImage21"
    dtype = torch.float32
else:
    from comfy.ldm.lumina.model import NextDiT
    # ComfyUI 0.33 detects Z-Image only at width 3840 (30 heads, 2+2 refiner blocks; shallow: 2 blocks); narrower,
    # it reads as Lumina 2 without its heads. The stand-in: 256 wide (its blocks take the step's 256-wide embedding),
    # two heads of the real 32 + 48 + 48, 2 blocks.
    config = dict(n_heads=30 if shallow else 2, n_kv_heads=30 if shallow else 2, axes_dims=[32, 48, 48],
                  axes_lens=[1536, 512, 512], rope_theta=256.0, ffn_dim_multiplier=8.0 / 3.0, z_image_modulation=True,
                  time_scale=1000.0, pad_tokens_multiple=32)
    model = NextDiT(patch_size=2, in_channels=16, dim=3840 if shallow else 256, n_layers=2, n_refiner_layers=2,
                    qk_norm=True, cap_feat_dim=64, device="meta", operations=comfy.ops.disable_weight_init, **config)
    sized = None if shallow else config   # what detection reads only at 3840: all of it
    expected, dtype = "ZImage", torch.bfloat16

generator = torch.Generator().manual_seed(seed)
state = {}
for name, tensor in model.state_dict().items():
    shape = tuple(tensor.shape)
    if "norm" in name and len(shape) == 1:
        value = 1.0 + 0.1 * torch.randn(shape, generator=generator)   # norm scales near 1
    else:
        fan_in = max(1, int(torch.tensor(shape[1:]).prod())) if len(shape) > 1 else shape[-1]
        value = torch.randn(shape, generator=generator) / fan_in ** 0.5
    if (family == "zimage" and "adaLN_modulation" in name) or (family == "qwen_image" and "_mod.1." in name):
        # As in trained weights, the step modulates the blocks around a fixed gate (tanh(1)), not
        # from zero: otherwise each step's residual changes by more than itself (diff > 1), where
        # cache-dit's threshold cannot decide (a threshold of 1 or more caches every step).
        value = value * 0.1 if name.endswith("weight") else value + 1.0
    if family.startswith("hunyuan") and ("_mod.lin." in name or "modulation.lin." in name):
        # The same for HunyuanVideo's blocks (Flux's Modulation): otherwise every change after warmup is near 1.
        value = value * 0.1 if name.endswith("weight") else value + 1.0
    if family == "chroma" and name == "distilled_guidance_layer.in_proj.weight":
        # The same for Chroma's approximator: its first 16 inputs are the timestep's embedding, from which random
        # weights made every block's modulation anew each step (diff > 1 after warmup). Damped, the modulation
        # changes little between neighbouring steps, as a trained model's does.
        value[:, :16] *= 0.05
    if family.startswith("flux2") and name == "time_in.in_layer.weight":
        # Flux.2 has no biases: its blocks' modulation follows the timestep embedding wholly, and on
        # random weights every step's residual changed by more than itself (diff > 1, where cache-dit's
        # threshold cannot decide). Mostly the embedding's slow components (constant over a run, as
        # a trained model's modulation nearly is between neighbouring steps): the fast ones damped.
        fast = torch.arange(128) < 96
        value[:, torch.cat([fast, fast])] *= 0.05
    state[name] = value.to(dtype)
if sized is not None:
    metadata = {"krea2_test_unet_config": json.dumps(sized), "krea2_test_model_config": expected}
config = comfy.model_detection.model_config_from_unet(state, "", metadata=metadata)
assert sized is not None or type(config).__name__ == expected, f"ComfyUI detects {type(config).__name__}, not {expected}"
if family.startswith("flux"):
    assert config.unet_config["guidance_embed"] == (family != "flux2_klein"), config.unet_config
save_file(state, out_path, metadata=metadata)
print(json.dumps({"class": type(config).__name__, "unet_config": {k: str(v) for k, v in config.unet_config.items()}}))
"""

# The families the cache node supports besides Krea-2, by the file their test checkpoint gets.
FAMILY_MODELS = {"wan": "wan_tiny.safetensors", "wan_low": "wan_tiny_low_noise.safetensors",
                 "wan_vace": "wan_tiny_vace.safetensors", "zimage": "zimage_tiny.safetensors",
                 "qwen_image": "qwen_image_tiny.safetensors",
                 "flux1": "flux1_tiny.safetensors", "flux2": "flux2_tiny.safetensors",
                 "flux2_klein": "flux2_klein_tiny.safetensors", "chroma": "chroma_tiny.safetensors",
                 "ltxv": "ltxv_tiny.safetensors",
                 "hunyuan_video15": "hunyuan_video15_tiny.safetensors",
                 "hunyuan_image21": "hunyuan_image21_tiny.safetensors"}


# The real-width files of the families whose stand-ins are narrow (loaded with ``Krea2TestSizedUNETLoader``): what
# ComfyUI's own loaders detect, for the tests of the file formats those loaders read.
SHALLOW_MODELS = {"zimage": "zimage_shallow.safetensors", "qwen_image": "qwen_image_shallow.safetensors",
                  "chroma": "chroma_shallow.safetensors"}


def make_family_checkpoint(comfy_root: Path, family: str, path: Path, seed: int = 0) -> Path:
    """A seeded-random ``family``: "wan"/"wan_low" Wan 2.1 t2v (4 blocks), "wan_vace" Wan VACE, "zimage"
    Z-Image (2 blocks, width 256), "qwen_image" Qwen-Image (2 blocks, width 128), "flux1" Flux.1 dev, "flux2"
    Flux.2 dev, "flux2_klein" Flux.2 Klein (2 double + 3 single blocks, width 128), "chroma" Chroma (2 double + 2
    single blocks, width 128), "ltxv" LTXV (4 blocks, width 128), "ltx2" LTX-2 (4 blocks, video width 128, audio 64,
    its widths in the file's metadata config), "hunyuan_video15" HunyuanVideo 1.5 t2v (3 double blocks, width 128),
    "hunyuan_image21" HunyuanImage 2.1 (2 double + 2 single blocks, width 128). Z-Image, Qwen-Image and Chroma
    carry their size in their metadata (load them with ``Krea2TestSizedUNETLoader``); "zimage_shallow",
    "qwen_image_shallow" and "chroma_shallow" are the same blocks at the real width, as ComfyUI's loaders detect
    them (2.1, 1.4 and 1.9 GB in bf16)."""
    return _generated(comfy_root, path, f"{family}-s{seed}", _FAMILY_SCRIPT, family, str(seed), timeout=900)


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


def fp8_scaled_state_dict(native: dict[str, torch.Tensor], layers=QUANTIZED_LAYERS) -> dict[str, torch.Tensor]:
    """A ``*_fp8_scaled`` checkpoint of a native state dict (Krea-2's unless ``layers`` names another
    family's block linear layers), in ComfyUI's scaled-fp8 format.

    The ``layers`` weights of each ``blocks.N`` become float8_e4m3fn with a per-tensor ``scale_weight``
    (absmax / 448); the ``scaled_fp8`` marker tells ComfyUI's loader to read them as quantized layers.
    """
    out = dict(native)
    for name, tensor in native.items():
        layer = name[:-len(".weight")]
        if name.startswith("blocks.") and name.endswith(".weight") and layer.split(".", 2)[2] in layers:
            scale = tensor.abs().max().float() / 448.0
            out[name] = (tensor.float() / scale).to(torch.float8_e4m3fn)
            out[f"{layer}.scale_weight"] = scale.reshape(())
    out["scaled_fp8"] = torch.zeros(2, dtype=torch.float8_e4m3fn)
    return out


# MiniMax H3 (audio + video in one packed sequence), narrow: ComfyUI 0.33 reads every width from the
# shapes (hidden from video_patch_proj, heads from qkv_proj / q_norm, the text width from condition_proj,
# the rope table from rope.inv_freq), so it is detected at width 64 (one head of 64, 4 blocks, 1 refiner
# block, rope on 3 x 8 frequency pairs = 48 of the head's 64 dims).
_MINIMAX_H3_SCRIPT = """
import json, sys
seed, out_path = int(sys.argv[-2]), sys.argv[-1]
sys.argv = ["make_minimax_h3", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.model_detection, comfy.ops, torch
from safetensors.torch import save_file
from comfy.ldm.minimax.model import MiniMaxH3Model

model = MiniMaxH3Model(hidden_size=64, num_layers=4, token_refiner_num_layers=1, num_attention_heads=1,
                       attention_head_dim=64, ffn_hidden_size=128, text_dim=32, timestep_input_dim=64,
                       time_embed_hidden_size=64, time_embed_dim=32, rope_inv_freq_len=8, device="meta",
                       operations=comfy.ops.disable_weight_init)
generator = torch.Generator().manual_seed(seed)
state = {}
for name, tensor in model.state_dict().items():
    shape = tuple(tensor.shape)
    if name == "rope.inv_freq":   # rope frequencies as trained models have them
        value = 1.0 / 10000.0 ** (torch.arange(shape[0], dtype=torch.float32) / shape[0])
    elif "norm" in name and len(shape) == 1:
        value = 1.0 + 0.1 * torch.randn(shape, generator=generator)
    else:
        fan_in = max(1, int(torch.tensor(shape[1:]).prod())) if len(shape) > 1 else shape[-1]
        value = torch.randn(shape, generator=generator) / fan_in ** 0.5
    if "adaln_proj" in name:
        # As in trained weights, the step modulates the blocks around a fixed gate, not from zero.
        value = value * 0.1 if name.endswith("weight") else value + 1.0
    state[name] = value.to(tensor.dtype if tensor.dtype == torch.float32 else torch.float32)
config = comfy.model_detection.model_config_from_unet(state, "")
assert type(config).__name__ == "MiniMaxH3", f"ComfyUI detects {type(config).__name__}, not MiniMaxH3"
save_file(state, out_path)
print(json.dumps({"class": type(config).__name__, "unet_config": {k: str(v) for k, v in config.unet_config.items()}}))
"""

FAMILY_MODELS["minimax_h3"] = "minimax_h3_tiny.safetensors"


def make_minimax_h3_checkpoint(comfy_root: Path, path: Path, seed: int = 0) -> Path:
    """A seeded-random MiniMax H3 (4 blocks, width 64, text width 32), as ComfyUI detects it."""
    return _generated(comfy_root, path, f"minimax_h3-s{seed}", _MINIMAX_H3_SCRIPT, str(seed))


# LTX-2 last: a checkpoint's seed is its key's place in ``FAMILY_MODELS`` (built by ``make_family_checkpoint``).
FAMILY_MODELS["ltx2"] = "ltx2_tiny.safetensors"


# ERNIE-Image, narrow: ComfyUI 0.33 detects it by its keys but builds it at its full 8B config whatever the file
# holds, so the file carries its size in its metadata (``ERNIE_IMAGE_CONFIG``), which the test node pack's
# ``Krea2TestSizedUNETLoader`` builds it at: width 128 (one head of 128, the real rope's 32 + 48 + 48), 4 blocks, the
# real 128 latent channels at patch 1 (Flux.2's latent), a text width of 64.
ERNIE_IMAGE_CONFIG = dict(hidden_size=128, num_attention_heads=1, num_layers=4, ffn_hidden_size=256,
                          in_channels=128, out_channels=128, patch_size=1, text_in_dim=64)
_ERNIE_IMAGE_SCRIPT = """
import json, sys
config, seed, out_path = json.loads(sys.argv[-3]), int(sys.argv[-2]), sys.argv[-1]
sys.argv = ["make_ernie_image", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.model_detection, comfy.ops, torch
from safetensors.torch import save_file
from comfy.ldm.ernie.model import ErnieImageModel

model = ErnieImageModel(device="meta", operations=comfy.ops.disable_weight_init, **config)
generator = torch.Generator().manual_seed(seed)
state = {}
for name, tensor in model.state_dict().items():
    shape = tuple(tensor.shape)
    if "norm" in name and len(shape) == 1:
        value = 1.0 + 0.1 * torch.randn(shape, generator=generator)
    else:
        fan_in = max(1, int(torch.tensor(shape[1:]).prod())) if len(shape) > 1 else shape[-1]
        value = torch.randn(shape, generator=generator) / fan_in ** 0.5
    if name.startswith("adaLN_modulation."):
        # As in trained weights, the step modulates the blocks around a fixed gate, not from zero: otherwise each
        # step's residual changes by more than itself, where cache-dit's threshold cannot decide.
        value = value * 0.1 if name.endswith("weight") else value + 1.0
    state[name] = value
detected = comfy.model_detection.model_config_from_unet(state, "")
assert type(detected).__name__ == "ErnieImage", f"ComfyUI detects {type(detected).__name__}, not ErnieImage"
save_file(state, out_path, metadata={"krea2_test_unet_config": json.dumps(config)})
"""

FAMILY_MODELS["ernie_image"] = "ernie_image_tiny.safetensors"


def make_ernie_image_checkpoint(comfy_root: Path, path: Path, seed: int = 0) -> Path:
    """A seeded-random ERNIE-Image of ``ERNIE_IMAGE_CONFIG``, in ComfyUI's native key format, its config in its
    metadata (load it with ``Krea2TestSizedUNETLoader``)."""
    import json

    return _generated(comfy_root, path, f"ernie_image-s{seed}", _ERNIE_IMAGE_SCRIPT,
                      json.dumps(ERNIE_IMAGE_CONFIG, sort_keys=True), str(seed))
