"""The shipped example workflows as API prompts that run on the CPU with small stand-ins.

An example is converted from the graph editor's format to an API prompt with
/object_info's input order (``editor_format.to_api_prompt``), then the multi-GB
Comfy-Org files are replaced:

- diffusion model: the tiny generated Krea-2 (native single file, ``krea2_prompts.TINY_MODEL``),
  read by ``UNETLoader`` and by ``Krea2DiffusersLoader`` alike; for another family's example, that
  family's test checkpoint (``family_prompts.FAMILIES``), and for Wan 2.2 A14B's two experts the tiny Wan pair;
- text encoder: Qwen3-VL-4B (and the other families' encoders) cannot shrink, so ``CLIPLoader``,
  ``DualCLIPLoader`` or LTX-2's ``LTXAVTextEncoderLoader`` is dropped and each ``CLIPTextEncode`` becomes
  ``Krea2TestConditioning`` of the tiny model's width (with Flux.1's pooled vector, or LTXV's attention mask, when asked);
- VAE: a random Wan 2.1 VAE (the Qwen-Image VAE's architecture) with the smallest
  base width, built by ComfyUI's own ``WanVAE`` class so ``VAELoader`` detects it
  exactly as it detects ``qwen_image_vae.safetensors``; or a decoder-only Flux VAE (``ae.safetensors``)
  or Flux.2 VAE (``flux2-vae.safetensors``), ``TINY_VAES``; a checkpoint (LTXV's, LTX-2's) holds the tiny model
  and its VAE (and LTX-2's narrow audio VAE, which ``LTXVEmptyLatentAudio`` reads its latent's shape from);
- resolution: 64x64. CFG, sampler and every Cache-DiT setting stay as shipped; steps too, unless the
  test asks for fewer (``steps``);
- a stand-in VAE whose images leave 0..1 (the random TAEHVs for LTX and HunyuanVideo 1.5 latents) has its decodes
  clamped, as a real VAE's are, so a compare node sees what is saved.

Used by tests/editor/test_example_workflows.py (every example) and tests/pack/test_manager_install.py
(the Turbo template of the pack as ComfyUI-Manager installed it).

``example_prompt_on_proxy`` runs an example on the small trained Krea-2 proxy instead
(devkit/krea2_proxy.py, or the Turbo proxy distilled from it for an 8-step CFG-1 example): its
checkpoint, one of its classes as the prompt, its latent decoder
(``Krea2TestProxyDecode``) in place of the VAE, at its 128x128, so the cache really caches and
the compared images differ by what caching cost.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from devkit.comfy_harness import comfyui_python, prompt_error
from devkit.editor_format import to_api_prompt
from devkit.krea2_prompts import TINY_MODEL

TEST_SIZE = 64

# Run by ComfyUI's interpreter in a child process, so the test process stays free of
# ComfyUI's globals. ComfyUI's layers skip weight init (they hold whatever memory held),
# so every tensor is set here: unit norms, zero biases, fan-in scaled convolutions.
TINY_VAE_SCRIPT = """
import sys, torch
from comfy.cli_args import args
args.cpu = True
from comfy.ldm.wan.vae import WanVAE
from safetensors.torch import save_file

vae = WanVAE(dim=8, z_dim=16, dim_mult=[1, 2, 4, 4], num_res_blocks=2, attn_scales=[],
             temperal_downsample=[False, True, True])
generator = torch.Generator().manual_seed(0)

def init(name, tensor):
    if name.endswith("gamma"):
        return torch.ones_like(tensor)
    if name.endswith("bias"):
        return torch.zeros_like(tensor)
    return torch.randn(tensor.shape, generator=generator) / tensor[0].numel() ** 0.5

save_file({name: init(name, t).contiguous() for name, t in vae.state_dict().items()}, sys.argv[1])
"""

# The weights of a stand-in that ComfyUI builds from a config: seeded normal, scaled by fan-in, norm scales 1 and
# biases 0, so its outputs stay of the inputs' size (a script that holds it defines ``generator`` and ``init``).
SEEDED_INIT = """
generator = torch.Generator().manual_seed(0)

def init(name, tensor):
    if name.endswith("bias"):
        return torch.zeros_like(tensor)
    if tensor.ndim == 1:
        return torch.ones_like(tensor)
    return torch.randn(tensor.shape, generator=generator) / tensor[0].numel() ** 0.5
"""

# The Flux VAE (Z-Image's ``ae.safetensors``), decoder only: ComfyUI takes the decoder's width from
# its weights (32, the least its group norms take, instead of 128) and decoding needs no encoder weights.
# With 32 latent channels, a post-quant conv and the latent batch norm's statistics it is the Flux.2 VAE (``flux2-vae.safetensors``,
# 128-channel latents at 1/16 size), as ComfyUI detects it.
TINY_FLUX_VAE_SCRIPT = """
import sys, torch
z_channels = int(sys.argv[2]) if len(sys.argv) > 2 else 16
from comfy.cli_args import args
args.cpu = True
import comfy.ops
from comfy.ldm.modules.diffusionmodules.model import Decoder
from safetensors.torch import save_file

decoder = Decoder(ch=32, out_ch=3, ch_mult=[1, 2, 4, 4], num_res_blocks=2, attn_resolutions=[], in_channels=3,
                  resolution=256, z_channels=z_channels, double_z=True, dropout=0.0)
""" + SEEDED_INIT + """
state = {"decoder." + name: init(name, t).contiguous() for name, t in decoder.state_dict().items()}
if z_channels == 32:  # Flux.2: a post-quant conv, and the batch norm over 2x2 patches of the latent (128 channels)
    state.update({"post_quant_conv.weight": torch.eye(32).reshape(32, 32, 1, 1), "post_quant_conv.bias": torch.zeros(32),
                  "bn.running_mean": torch.zeros(128), "bn.running_var": torch.ones(128)})
save_file(state, sys.argv[1])
"""
# A tiny video autoencoder (TAEHV) of the latent width given: ComfyUI builds the real HunyuanVideo 1.5 and LTXV
# VAEs at their full widths, but detects a TAEHV by its keys and picks the kind by the latent width: 32 channels
# the HunyuanVideo 1.5 one (16x smaller, 4x fewer frames), 128 the one for LTX latents (32x smaller, 8x fewer
# frames), each decoding one latent frame to one 64x64 image; 24 MiniMax H3's video one (16x smaller: its 2
# latent frames, the fewest, decode to 5 images). Its widths are fixed (22 MB in fp16).
TINY_TAEHV_SCRIPT = """
import sys, torch
from comfy.cli_args import args
args.cpu = True
from comfy.taesd.taehv import TAEHV
from safetensors.torch import save_file

vae = TAEHV(latent_channels=int(sys.argv[2]))
generator = torch.Generator().manual_seed(0)

def init(name, tensor):
    if name.endswith("bias"):
        return torch.zeros_like(tensor)
    return torch.randn(tensor.shape, generator=generator) / tensor[0].numel() ** 0.5

save_file({name: init(name, t).to(torch.float16).contiguous() for name, t in vae.state_dict().items()}, sys.argv[1])
"""
# LTX-2's audio VAE, as its checkpoint holds it (``audio_vae.``, ``vocoder.``, the widths in the metadata config that
# ComfyUI builds it from), at the real latent (8 channels, 64 mel bins: 16 latent bins, 25 latents a second) but
# narrow (base width 8, a 32-wide vocoder): 0.2M parameters. LTXVEmptyLatentAudio reads its latent's shape from it.
TINY_LTX2_AUDIO_VAE_SCRIPT = """
import json, sys, torch
from comfy.cli_args import args
args.cpu = True
from comfy.ldm.lightricks.vae.audio_vae import AudioVAE
from safetensors.torch import save_file

encoder = {"double_z": True, "mel_bins": 64, "z_channels": 8, "resolution": 256, "downsample_time": False,
           "in_channels": 2, "out_ch": 2, "ch": 8, "ch_mult": [1, 2, 4], "num_res_blocks": 1, "attn_resolutions": [],
           "dropout": 0.0, "mid_block_add_attention": False, "norm_type": "pixel", "causality_axis": "height"}
config = {"audio_vae": {"model": {"params": {"ddconfig": encoder, "sampling_rate": 16000}},
                        "preprocessing": {"stft": {"filter_length": 1024, "hop_length": 160}}},
          "vocoder": {"upsample_initial_channel": 32, "resblock_kernel_sizes": [3],
                      "upsample_rates": [5, 4, 2, 2, 2], "upsample_kernel_sizes": [16, 16, 8, 4, 4]}}
vae = AudioVAE({"config": json.dumps(config)})
""" + SEEDED_INIT + """
prefixes = {"autoencoder.": "audio_vae.", "vocoder.": "vocoder."}
state = {prefixes[prefix] + name[len(prefix):]: init(name, t).contiguous() for name, t in vae.state_dict().items()
         for prefix in prefixes if name.startswith(prefix)}
save_file(state, sys.argv[1], metadata={"config": json.dumps(config)})
"""
# What stands in for each VAE an example loads: (file name, script that writes it, its arguments).
TINY_VAES = {"wan21": ("krea2_test_wan21_vae.safetensors", TINY_VAE_SCRIPT, []),
             "flux": ("krea2_test_flux_vae.safetensors", TINY_FLUX_VAE_SCRIPT, []),
             "flux2": ("krea2_test_flux2_vae.safetensors", TINY_FLUX_VAE_SCRIPT, ["32"]),
             "hunyuan_video15": ("krea2_test_taehv15_vae.safetensors", TINY_TAEHV_SCRIPT, ["32"]),
             "ltxv": ("krea2_test_taehv_ltx_vae.safetensors", TINY_TAEHV_SCRIPT, ["128"]),
             "minimax_h3": ("krea2_test_taehv_h3_vae.safetensors", TINY_TAEHV_SCRIPT, ["24"]),
             "ltx2_audio": ("krea2_test_ltx2_audio_vae.safetensors", TINY_LTX2_AUDIO_VAE_SCRIPT, [])}
# The stand-ins whose images leave 0..1: ComfyUI's TAEHV decode gives its decoder's output as it is (only MiniMax H3's
# is clamped), and a random decoder's goes past both ends. A real VAE's images lie in 0..1 (ComfyUI clamps them), and
# a saved PNG holds no more: their decodes are clamped (``clamp_decoded``), so what is compared is what is saved.
UNCLAMPED_VAES = {TINY_VAES[kind][0] for kind in ("hunyuan_video15", "ltxv")}


def write_tiny_vae(comfy_root: Path, base_dir: Path, kind: str = "wan21") -> str:
    """A random VAE of ``kind`` (``TINY_VAES``) in ``base_dir``'s models/vae; returns its name.

    "wan21": the Wan 2.1 VAE (Krea-2's; base width 8, not 96); "flux": the Flux VAE (Z-Image's; decoder width 32);
    "flux2": the Flux.2 VAE (decoder width 32); "hunyuan_video15", "ltxv" and "minimax_h3": a TAEHV for their
    latents; "ltx2_audio": LTX-2's audio VAE (the part of its checkpoint LTXVAudioVAELoader reads).
    """
    name, script, args = TINY_VAES[kind]
    target = base_dir / "models" / "vae" / name
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        subprocess.run([comfyui_python(comfy_root), "-c", script, str(target), *args], cwd=comfy_root,
                       check=True, capture_output=True, timeout=120)
    return name


# The loaders of a diffusion model, by the input naming its file: each gets the stand-in's file instead (LTX-2's
# audio VAE loader reads the model's checkpoint too).
MODEL_LOADERS = {"UNETLoader": "unet_name", "Krea2DiffusersLoader": "model_name", "CheckpointLoaderSimple": "ckpt_name",
                 "LTXVAudioVAELoader": "ckpt_name"}
# The text encoder loaders dropped for the test conditioning (LTX-2's reads the checkpoint and Gemma 3).
TEXT_ENCODER_LOADERS = ("CLIPLoader", "DualCLIPLoader", "LTXAVTextEncoderLoader")


def write_stand_in_checkpoint(base_dir: Path, model: str, vae_name: str, audio_vae_name: str | None = None) -> str:
    """A checkpoint in ``base_dir``'s models/checkpoints of the diffusion model ``model``, the VAE ``vae_name`` and
    (LTX-2's) the audio VAE ``audio_vae_name`` (all already in its models folders), under the prefixes ComfyUI reads
    an LTXV checkpoint's parts from (``vae.``: LTXV's; most families' checkpoints hold their VAE under
    ``first_stage_model.``; the audio VAE's own ``audio_vae.`` and ``vocoder.``), with the metadata configs of its
    parts in one (LTX-2's widths and its audio VAE's are read from it); its name."""
    import json

    from safetensors import safe_open
    from safetensors.torch import load_file, save_file

    parts = [Path(model).stem, Path(vae_name).stem, *([Path(audio_vae_name).stem] if audio_vae_name else [])]
    name = "+".join(parts) + ".safetensors"
    target = base_dir / "models" / "checkpoints" / name
    if not target.exists():
        models = base_dir / "models"
        state = {f"model.diffusion_model.{k}": v for k, v in load_file(models / "diffusion_models" / model).items()}
        state |= {f"vae.{k}": v for k, v in load_file(models / "vae" / vae_name).items()}
        config = {}
        audio = [models / "vae" / audio_vae_name] if audio_vae_name else []
        for path in (models / "diffusion_models" / model, *audio):
            with safe_open(path, "pt") as part:
                config |= json.loads((part.metadata() or {}).get("config", "{}"))
        if audio_vae_name:
            state |= load_file(models / "vae" / audio_vae_name)
        target.parent.mkdir(parents=True, exist_ok=True)
        save_file(state, target, metadata={"config": json.dumps(config)} if config else None)
    return name


def example_prompt(workflow: dict, object_info: dict, *, vae_name: str, context_features: int,
                   prefix: str, model: str = TINY_MODEL, pooled_features: int = 0, attention_mask: bool = False,
                   steps: int | None = None, models: dict | None = None, loader: str | None = None) -> dict:
    """The API prompt of an example workflow, with the stand-ins above (``model``: the tiny diffusion model;
    ``models``: file the example loads -> its stand-in, for an example with more than one diffusion model (Wan 2.2
    A14B's two experts); ``pooled_features``: the width of the pooled vector its conditioning carries, Flux.1's;
    ``attention_mask``: the conditioning carries one (LTXV's);
    ``steps``: the samplers' steps when not the example's own; ``loader``: the node that loads the stand-in in place of
    ``UNETLoader``, where ComfyUI builds the family only at full size, ERNIE-Image's). A video latent gets one frame
    (one image a save)."""
    prompt = to_api_prompt(workflow, object_info)
    encoders = [node_id for node_id, node in prompt.items() if node["class_type"] in TEXT_ENCODER_LOADERS]
    for node_id, node in prompt.items():
        kind, inputs = node["class_type"], node["inputs"]
        if kind in MODEL_LOADERS:
            name = MODEL_LOADERS[kind]
            inputs[name] = models[inputs[name]] if models else model
            if loader is not None and kind == "UNETLoader":
                prompt[node_id] = {"class_type": loader, "inputs": {"unet_name": inputs[name]}}
        elif kind == "VAELoader":
            inputs["vae_name"] = vae_name
        elif kind == "CLIPTextEncode":
            conditioning = {"seed": int(node_id), "tokens": 8, "features": context_features,
                            "pooled_features": pooled_features, "attention_mask": attention_mask}
            prompt[node_id] = {"class_type": "Krea2TestConditioning", "inputs": conditioning}
        elif kind in ("EmptyLatentImage", "EmptySD3LatentImage", "EmptyFlux2LatentImage"):
            inputs.update(width=TEST_SIZE, height=TEST_SIZE)
        elif kind in ("EmptyHunyuanLatentVideo", "EmptyHunyuanVideo15Latent", "EmptyLTXVLatentVideo"):
            inputs.update(width=TEST_SIZE, height=TEST_SIZE, length=1)
        elif kind == "LTXVEmptyLatentAudio":  # as long as the one-frame video
            inputs["frames_number"] = 1
        elif kind == "EmptyMiniMaxH3LatentAV":  # 5 frames at least: the decoded frames are cut to the first below
            inputs.update(width=TEST_SIZE, height=TEST_SIZE, length=5)
        elif kind == "KSampler" and steps is not None:
            inputs["steps"] = steps
        elif kind == "SaveImage":
            inputs["filename_prefix"] = f"{prefix}_{node_id}"
    for node_id in encoders:
        del prompt[node_id]
    if any(node["class_type"] == "EmptyMiniMaxH3LatentAV" for node in prompt.values()):
        first_frames_only(prompt)
    if vae_name in UNCLAMPED_VAES:
        clamp_decoded(prompt)
    dangling = [(n, name) for n, node in prompt.items() for name, value in node["inputs"].items()
                if isinstance(value, list) and value[0] not in prompt]
    assert not dangling, f"inputs still wired to removed nodes: {dangling}"
    return prompt


def first_frames_only(prompt: dict):
    """Each VAEDecode's first frame in its place (ImageFromBatch under the decode's id, which saves and compares
    keep): one image a save, for a latent that cannot be one frame."""
    for node_id in [n for n, node in prompt.items() if node["class_type"] == "VAEDecode"]:
        prompt[f"{node_id}0"] = prompt[node_id]
        prompt[node_id] = {"class_type": "ImageFromBatch",
                           "inputs": {"image": [f"{node_id}0", 0], "batch_index": 0, "length": 1}}


def clamp_decoded(prompt: dict):
    """Each VAEDecode's images clamped to 0..1 in its place: ImageBlend at factor 0 is the image itself, clamped (the
    decode moves to ``<id>0``, which saves and compares keep reading through)."""
    for node_id in [n for n, node in prompt.items() if node["class_type"] == "VAEDecode"]:
        prompt[f"{node_id}0"] = prompt[node_id]
        image = [f"{node_id}0", 0]
        prompt[node_id] = {"class_type": "ImageBlend",
                           "inputs": {"image1": image, "image2": image, "blend_factor": 0.0, "blend_mode": "normal"}}


def decoded_by(prompt: dict, image: str) -> str:
    """The VAEDecode behind an image node: itself, or the decode whose images ``first_frames_only`` cut or
    ``clamp_decoded`` clamped."""
    while prompt[image]["class_type"] in ("ImageFromBatch", "ImageBlend"):
        inputs = prompt[image]["inputs"]
        image = (inputs.get("image") or inputs["image1"])[0]
    return image


def example_prompt_on_proxy(workflow: dict, object_info: dict, *, label: int, prefix: str, codec: Path,
                            model: str | None = None) -> dict:
    """The API prompt of an example workflow on the proxy (see the module docstring); ``codec``: the proxy
    build's codec file, which decodes in place of the VAE; ``model``: the checkpoint's file name on the
    server, the trained proxy's unless the example's regime asks for another (the Turbo proxy,
    ``TURBO_PROXY_MODEL``, for an 8-step CFG-1 example)."""
    from devkit.krea2_prompts import PROXY_MODEL, PROXY_SIZE
    from devkit.krea2_proxy import SETTINGS, class_seed

    prompt = to_api_prompt(workflow, object_info)
    removed = [n for n, node in prompt.items() if node["class_type"] in ("CLIPLoader", "VAELoader")]
    for node_id, node in prompt.items():
        kind, inputs = node["class_type"], node["inputs"]
        if kind == "UNETLoader":
            inputs["unet_name"] = model or PROXY_MODEL
        elif kind == "CLIPTextEncode":
            conditioning = {"seed": class_seed(label), "tokens": SETTINGS.tokens, "features": SETTINGS.context_features}
            prompt[node_id] = {"class_type": "Krea2TestConditioning", "inputs": conditioning}
        elif kind == "VAEDecode":
            prompt[node_id] = {"class_type": "Krea2TestProxyDecode",
                               "inputs": {"samples": inputs["samples"], "codec_path": str(codec)}}
        elif kind == "EmptyLatentImage":
            inputs.update(width=PROXY_SIZE, height=PROXY_SIZE)
        elif kind == "SaveImage":
            inputs["filename_prefix"] = f"{prefix}_{node_id}"
    for node_id in removed:
        del prompt[node_id]
    dangling = [(n, name) for n, node in prompt.items() for name, value in node["inputs"].items()
                if isinstance(value, list) and value[0] not in prompt]
    assert not dangling, f"inputs still wired to removed nodes: {dangling}"
    return prompt


def run_example(server, prompt: dict) -> tuple[str, dict, dict]:
    """Queue the prompt, wait for it, check its saved images; returns (prompt_id, its history entry,
    the stats record of its Cache-DiT node). Fails when the run failed or left no record of its own."""
    prompt_id, entry, records = run_example_nodes(server, prompt)
    (record,) = records.values()
    return prompt_id, entry, record


def run_example_nodes(server, prompt: dict) -> tuple[str, dict, dict]:
    """``run_example`` for an example with any number of Cache-DiT nodes: (prompt_id, its history entry,
    {cache node id: the stats record of its own run in this prompt})."""
    prompt_id = server.queue(prompt)
    entry = server.wait(prompt_id, timeout=300)
    assert prompt_error(entry) is None, f"{prompt_error(entry)}\n{server.log_tail()}"
    check_saved_images(server, prompt, entry)

    cache_ids = [n for n, node in prompt.items() if node["class_type"] in CACHE_NODES]
    assert cache_ids, "no Cache-DiT node"
    return prompt_id, entry, {cache_id: server.stats_for(prompt_id, cache_id)[0] for cache_id in cache_ids}


def saved_rgb(server, image: dict):
    """A saved or previewed image of a history entry, as RGB."""
    from PIL import Image

    with Image.open(server.base_dir / image.get("type", "output") / image["subfolder"] / image["filename"]) as png:
        return png.convert("RGB")


def saved_images(server, prompt: dict, entry: dict) -> dict:
    """SaveImage node id -> its saved image (RGB)."""
    saved = {}
    for save_id in [n for n, node in prompt.items() if node["class_type"] == "SaveImage"]:
        (image,) = entry["outputs"][save_id]["images"]
        saved[save_id] = saved_rgb(server, image)
    return saved


def check_saved_images(server, prompt: dict, entry: dict):
    """Every SaveImage output exists at the test size; decoded images are not flat (NaN saves as black)."""
    for save_id, png in saved_images(server, prompt, entry).items():
        assert png.size == (TEST_SIZE, TEST_SIZE), f"image of node {save_id}"
        if prompt[decoded_by(prompt, prompt[save_id]["inputs"]["images"][0])]["class_type"] == "VAEDecode":
            assert any(low != high for low, high in png.getextrema()), f"flat image from node {save_id}"


# --- what a compare template's graph samples -----------------------------------------------------------------

CACHE_NODES = {"Krea2CacheDiT", "CacheDiTDBCache", "CacheDiTSpectrum"}   # the DBCache nodes and the Forecast node
SAMPLERS = ("KSampler", "KSamplerAdvanced")


def sampled_by(prompt: dict, decoder: str) -> str:
    """The sampler whose latent a decoder decodes (through the split of an audio-video latent, LTX-2's)."""
    source = prompt[decoder]["inputs"]["samples"][0]
    if prompt[source]["class_type"] == "LTXVSeparateAVLatent":
        source = prompt[source]["inputs"]["av_latent"][0]
    return source


def compare_branches(prompt: dict) -> dict[str, list[str]]:
    """The samplers of each branch a compare template compares, first to last (one per expert in turn): "uncached"
    (the reference of both compare nodes), "cached" (through the cache nodes) and "fewer" (the plain samplers at
    fewer steps), each a candidate of its own compare node."""
    samplers = {n for n, node in prompt.items() if node["class_type"] in SAMPLERS}
    caches = {n for n, node in prompt.items() if node["class_type"] in CACHE_NODES}

    def branch(image: list) -> list[str]:
        chain = [sampled_by(prompt, image[0])]
        while prompt[chain[0]]["inputs"]["latent_image"][0] in samplers:
            chain.insert(0, prompt[chain[0]]["inputs"]["latent_image"][0])
        return chain

    compares = [node["inputs"] for node in prompt.values() if node["class_type"] == "Krea2CompareImages"]
    (reference,) = {tuple(compare["reference"]) for compare in compares}
    candidates = [branch(compare["candidate"]) for compare in compares]
    (cached,) = [c for c in candidates if prompt[c[-1]]["inputs"]["model"][0] in caches]
    (fewer,) = [c for c in candidates if prompt[c[-1]]["inputs"]["model"][0] not in caches]
    return {"uncached": branch(list(reference)), "cached": cached, "fewer": fewer}
