"""The compare template of each family besides Krea-2: one entry each, the only place a template is described.

``tools/make_example_workflows.py`` writes ``example_workflows/<name>`` from an entry (the graph: loaders
with Comfy-Org's file names and download links, the family's usual recipe, the cache node with one seed
sampled with and without it, **Compare Images (Cache-DiT)**, a note), and ``tests/editor/test_example_workflows.py``
checks the written file against the entry (files and links, recipe, CLIP type, cache settings) and runs it on
the family's tiny stand-in (``stand_in``: a spec of ``devkit/family_prompts.py``; ``vae``: a stand-in of
``tests/support/example_stand_ins.py``). Adding a family's template: one entry here, then rerun the tool.

A model in ``checkpoints`` (LTX-Video's) is loaded by CheckpointLoaderSimple, whose VAE decodes (``vae_file`` None);
``conditioning`` places a node such as LTXVConditioning between the prompts and the samplers.

An audio-video model whose audio latent is its own node (LTX-2: ``audio_latent``) gets that node, fed the audio VAE of
the checkpoint (LTXVAudioVAELoader), joined with the video latent by LTXVConcatAVLatent before the samplers and split
from the video by LTXVSeparateAVLatent after each; the video is decoded and compared, the audio only sampled. Its text
encoder loader (``text_encoder_loader``) reads the checkpoint too (LTXAVTextEncoderLoader).

A model split in two experts (Wan 2.2 A14B: ``low_noise``) gets a loader, a shift and a cache node per expert, and
two KSamplerAdvanced per branch: the high-noise one from step 0 to ``split_step``, the low-noise one from there on.

Every compare template has a third branch: the same graph without the cache at fewer steps (``fewer_steps``), the
step count whose uncached run costs as many block evaluations as the cached run, as the pack's own plan states it
before the run for the cache settings and the real model's block lists (``blocks``); a second compare node sets it
against the uncached image.
"""

from __future__ import annotations

import dataclasses

from devkit.comfy_harness import load_pack
from devkit.family_prompts import CHROMA, FLUX, HUNYUAN

load_pack()  # the pack's own plan says how many steps cost as much as the cached run

from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run  # noqa: E402
from krea2_cachedit.adapters.forecast.forecast_settings import ForecastSettings, plan_forecast_run  # noqa: E402

HF = "https://huggingface.co"
WAN22 = "Comfy-Org/Wan_2.2_ComfyUI_Repackaged"
HUNYUAN15 = "Comfy-Org/HunyuanVideo_1.5_repackaged"
MINIMAX_H3 = f"{HF}/Comfy-Org/MiniMax-H3/resolve/main"
LTX2 = f"{HF}/Lightricks/LTX-2/resolve/main"
ZIMAGE = "Comfy-Org/z_image_turbo"
ERNIE_IMAGE = f"{HF}/Comfy-Org/ERNIE-Image/resolve/main"


@dataclasses.dataclass(frozen=True)
class ModelFile:
    name: str        # the file name the loader's widget holds
    directory: str   # its folder under ComfyUI/models
    url: str         # where it downloads from (the editor offers it when the file is missing)


def split_file(repo: str, directory: str, name: str) -> ModelFile:
    """A file of a Comfy-Org repackaged repository (``split_files/<directory>/<name>``)."""
    return ModelFile(name, directory, f"{HF}/{repo}/resolve/main/split_files/{directory}/{name}")


# The loader of a diffusion model's file, by its folder: (node, the input naming the file, its other widgets). A
# checkpoint holds the VAE too: its template loads none apart (``vae_file`` None) and decodes with the checkpoint's.
LOADERS = {"diffusion_models": ("UNETLoader", "unet_name", {"weight_dtype": "default"}),
           "checkpoints": ("CheckpointLoaderSimple", "ckpt_name", {})}

# The text encoder loader of a template that names one (``text_encoder_loader``): the input naming its text encoder,
# the one naming the model's checkpoint (which it reads too), and the type of text encoder it loads (no widget).
TEXT_ENCODER_LOADERS = {"LTXAVTextEncoderLoader": ("text_encoder", "ckpt_name", "ltxv")}


@dataclasses.dataclass(frozen=True)
class FamilyTemplate:
    title: str                       # the model's name in the note, e.g. "Flux.1 dev"
    family: str                      # the family name the node's stats report
    stand_in: str                    # the spec of family_prompts.FAMILIES the test runs it on
    vae: str                         # the tiny VAE that stands in for its VAE (example_stand_ins.TINY_VAES)
    model: ModelFile
    text_encoders: tuple[ModelFile, ...]   # one: CLIPLoader; two: DualCLIPLoader
    clip_type: str
    vae_file: ModelFile | None       # None: the VAE of the model's checkpoint (a model in ``checkpoints``)
    steps: int
    cfg: float
    # The real model's transformer blocks per block list (each its own cache context), from its published
    # configuration: what a cached call's Fn blocks weigh against a full call in the fewer-steps branch.
    blocks: tuple[int, ...]
    sampler: str = "euler"
    scheduler: str = "simple"
    latent: str = "EmptySD3LatentImage"
    shift: tuple[str, float] | None = None   # (ModelSampling node, its shift), placed before the cache node
    guidance: float | None = None            # FluxGuidance on the positive prompt
    negative: str | None = None              # None: ConditioningZeroOut of the positive (CFG 1)
    prompt: str = ""                         # the positive prompt when not the one every template shares
    # A node between the prompts and the samplers (positive and negative in, both out), with its widgets.
    conditioning: tuple[str, dict] | None = None
    cache: dict = dataclasses.field(default_factory=dict)   # cache node widgets that differ from the defaults
    recipe: str = ""                 # where the sampling recipe comes from (the note says it)
    evidence: str = ""               # whose evidence the cache settings rest on (the note says it)
    recipe_zh: str = ""              # the two, in the note's Chinese section
    evidence_zh: str = ""
    stand_in_steps: int | None = None   # steps the test's stand-in samples when not the template's (slow calls)
    # The latent's size (and batch 1, where the node takes a batch size)
    latent_size: dict = dataclasses.field(default_factory=lambda: {"width": 1024, "height": 1024})
    # A second expert (Wan 2.2 A14B's low-noise model): it samples from ``split_step`` on through its own cache
    # node; ``low_noise_stand_in``: the comfy_models.FAMILY_MODELS checkpoint that stands in for it.
    low_noise: ModelFile | None = None
    split_step: int | None = None
    low_noise_stand_in: str = ""
    # The loader of the text encoder when not CLIPLoader/DualCLIPLoader (a TEXT_ENCODER_LOADERS key).
    text_encoder_loader: str = ""
    # An audio latent node of an audio-video model (fed the checkpoint's audio VAE), with its widgets.
    audio_latent: tuple[str, dict] | None = None

    @property
    def loader(self) -> str:
        return LOADERS[self.model.directory][0]

    def text_encoder_node(self) -> tuple[str, dict]:
        """(node type, widgets) of the text encoder loader: one file CLIPLoader, two DualCLIPLoader, or the one
        ``text_encoder_loader`` names (the file and the model's checkpoint)."""
        if self.text_encoder_loader:
            (encoder,) = self.text_encoders
            encoder_input, ckpt_input, _ = TEXT_ENCODER_LOADERS[self.text_encoder_loader]
            return self.text_encoder_loader, {encoder_input: encoder.name, ckpt_input: self.model.name,
                                              "device": "default"}
        if len(self.text_encoders) == 1:
            return "CLIPLoader", {"clip_name": self.text_encoders[0].name, "type": self.clip_type, "device": "default"}
        return "DualCLIPLoader", {"clip_name1": self.text_encoders[0].name, "clip_name2": self.text_encoders[1].name,
                                  "type": self.clip_type, "device": "default"}

    def stages(self) -> list[tuple[int, int]]:
        """(start, end) of the steps each expert's cached run samples, in turn; one model: all of them."""
        return [(0, self.steps)] if self.low_noise is None else [(0, self.split_step), (self.split_step, self.steps)]

    @property
    def files(self) -> tuple[ModelFile, ...]:
        """Every file it loads, models first."""
        return (self.model, *([self.low_noise] if self.low_noise else []), *self.text_encoders,
                *([self.vae_file] if self.vae_file else []))


# Krea-2's 28 transformer blocks, one list (the real architecture, docs/gpu-check.md): for krea2_turbo_compare.
KREA2_BLOCKS = (28,)


def fewer_steps(cache_widgets: dict, steps: int, blocks: tuple[int, ...]) -> tuple[int, bool]:
    """The steps of a compare template's fewer-steps branch for a cache node with these widgets sampling ``steps``
    steps of a model with ``blocks`` per block list: the record's ``equal_cost_steps`` as the pack's plan states it
    before the run, and whether that is exact (the settings fix the steps cached: a step mask) or the fewest the
    settings allow (the threshold decides at run time; the run costs as much or more)."""
    plan = plan_run(DBCacheSettings(**cache_widgets), steps, sum(blocks), "the cache node")
    return plan.equal_cost_steps(blocks), plan.fixes_its_steps


def forecast_fewer_steps(preset: str, steps: int) -> tuple[int, bool]:
    """The same for the Forecast node with a named preset: the steps its schedule computes (a forecast step runs no
    block), always exact (the schedule is fixed before the run)."""
    plan = plan_forecast_run(ForecastSettings.from_preset(preset), steps)
    return sum(plan.mask), True


NEGATIVE = "blurry, low quality, distorted, watermark, text"
NO_FIGURES = ("No published cache-dit settings or figures for {model} are known to this pack: the settings are "
              "the node's defaults (Krea-2's), so judge them here, on your own prompts.")
NO_FIGURES_ZH = "本扩展不知道有任何公开的 {model} cache-dit 设置或数据：这里用的是节点默认值（Krea-2 的），请在这里用你自己的提示词判断。"

# ERNIE-Image and its Turbo: one class, one text encoder and VAE, Comfy-Org's files; its 36 blocks (ComfyUI's default).
ERNIE_IMAGE_FILES = dict(
    text_encoders=(ModelFile("ministral-3-3b.safetensors", "text_encoders",
                             f"{ERNIE_IMAGE}/text_encoders/ministral-3-3b.safetensors"),),
    clip_type="flux2", vae_file=ModelFile("flux2-vae.safetensors", "vae", f"{ERNIE_IMAGE}/vae/flux2-vae.safetensors"),
    latent="EmptyFlux2LatentImage", blocks=(36,), family="ERNIE-Image (ComfyUI native)", stand_in="ernie_image",
    vae="flux2")
ERNIE_IMAGE_ENHANCER = ("Its optional prompt enhancer (ernie-image-prompt-enhancer.safetensors through TextGenerate) "
                        "is left out: write the full prompt here.")
ERNIE_IMAGE_ENHANCER_ZH = "其可选的提示词增强（通过 TextGenerate 使用 ernie-image-prompt-enhancer.safetensors）未包含：请在这里写完整的提示词。"
ERNIE_IMAGE_ADAPTER = (" cache-dit has an adapter of its own for ERNIE-Image in diffusers (the same 36 blocks, as one "
                       "list), without figures.")
ERNIE_IMAGE_ADAPTER_ZH = "cache-dit 在 diffusers 中有自己的 ERNIE-Image 适配器（同样的 36 个块，作为一个列表），但没有数据。"

FAMILY_TEMPLATES = {
    "flux1_dev_compare.json": FamilyTemplate(
        title="Flux.1 dev", family=FLUX, stand_in="flux1", vae="flux",
        model=ModelFile("flux1-dev.safetensors", "diffusion_models",
                        f"{HF}/Comfy-Org/flux1-dev/resolve/main/flux1-dev.safetensors"),
        text_encoders=(ModelFile("clip_l.safetensors", "text_encoders",
                                 f"{HF}/comfyanonymous/flux_text_encoders/resolve/main/clip_l.safetensors"),
                       ModelFile("t5xxl_fp16.safetensors", "text_encoders",
                                 f"{HF}/comfyanonymous/flux_text_encoders/resolve/main/t5xxl_fp16.safetensors")),
        clip_type="flux", vae_file=split_file("Comfy-Org/Lumina_Image_2.0_Repackaged", "vae", "ae.safetensors"),
        steps=20, cfg=1.0, guidance=3.5,
        blocks=(19, 38),   # Flux.1 dev: 19 double and 38 single blocks
        recipe=("Comfy-Org's Flux.1 dev template: 20 steps, CFG 1, euler, simple, guidance 3.5 (its template leaves "
                "it at the model's default, 3.5; here FluxGuidance shows it)."),
        evidence=("cache-dit's own figures for FLUX.1-dev (diffusers, 50 steps, DrawBench, NVIDIA L20): its "
                  "F1B0 W4 MC6 R0.24 (the defaults here but 6 cached steps in a row instead of 3) at 3.94x "
                  "fewer TFLOPs, ImageReward 0.9997 against 0.9898 uncached. Theirs, not measured in ComfyUI. On this "
                  "pack's small Flux test model trained on drawn shapes, a base model sampled at CFG 3.5, the "
                  "defaults landed farther than fewer steps at as many calls at 20 and 28 steps; that does not carry over to Flux.1 dev, which is guidance-distilled and sampled at CFG 1 (one "
                  "stream, the guidance an input of the model), so this template keeps the defaults cache-dit "
                  "measured on it."),
        recipe_zh=("Comfy-Org 的 Flux.1 dev 模板：20 步，CFG 1，euler，simple，guidance 3.5（其模板用模型的默认值 3.5；这里用 FluxGuidance "
                   "把它显示出来）。"),
        evidence_zh=("cache-dit 自己的 FLUX.1-dev 数据（diffusers，50 步，DrawBench，NVIDIA L20）：其 F1B0 W4 MC6 R0.24（即这里的默认值，"
                     "只是最多连续缓存 6 步而非 3 步）计算量（TFLOPs）减少 3.94 倍，ImageReward 0.9997，未缓存为 0.9898。这是他们的数据，"
                     "不是在 ComfyUI 中测得的。在本扩展用绘制图形训练的小型 Flux 测试模型上（一个以 CFG 3.5 采样的基础模型），默认值在 20 步和 28 步时、"
                     "在相同调用次数下都比减少步数离得更远；这不适用于 Flux.1 dev：它是 guidance 蒸馏模型，以 CFG 1 采样"
                     "（一个流，guidance 是模型的输入），所以此模板保留 cache-dit 在它上面测过的默认值。")),
    "flux2_klein_compare.json": FamilyTemplate(
        title="Flux.2 Klein 4B", family=FLUX, stand_in="flux2", vae="flux2",
        model=split_file("Comfy-Org/flux2-klein", "diffusion_models", "flux-2-klein-4b.safetensors"),
        text_encoders=(split_file("Comfy-Org/flux2-klein", "text_encoders", "qwen_3_4b.safetensors"),),
        clip_type="flux2", vae_file=split_file("Comfy-Org/flux2-dev", "vae", "flux2-vae.safetensors"),
        steps=4, cfg=1.0, latent="EmptyFlux2LatentImage", cache={"steps_mask": "slow"},
        blocks=(5, 20),   # Flux.2 Klein 4B: 5 double and 20 single blocks
        recipe=("Klein 4B is distilled to 4 steps at CFG 1 (Comfy-Org's template samples them with its "
                "Flux2Scheduler; here a KSampler, euler, simple)."),
        evidence=("No published cache-dit figures for Flux.2 Klein are known to this pack. At 4 steps the "
                  "default 4 warmup steps leave nothing to cache, so this template sets the step mask `slow`, "
                  "which caches step 3 of 4 (every mask does at 4 steps); judge it here."),
        recipe_zh=("Klein 4B 被蒸馏为 CFG 1 下 4 步（Comfy-Org 的模板用其 Flux2Scheduler 采样；这里用 KSampler，euler，simple）。"),
        evidence_zh=("本扩展不知道有任何公开的 Flux.2 Klein cache-dit 数据。4 步时默认的 4 个预热步使得没有可缓存的步，所以此模板设置步骤掩码 "
                     "`slow`，它缓存 4 步中的第 3 步（4 步时每种掩码都如此）；请在这里判断。")),
    "qwen_image_compare.json": FamilyTemplate(
        title="Qwen-Image", family="Qwen-Image (ComfyUI native)", stand_in="qwen_image", vae="wan21",
        model=split_file("Comfy-Org/Qwen-Image_ComfyUI", "diffusion_models", "qwen_image_fp8_e4m3fn.safetensors"),
        text_encoders=(split_file("Comfy-Org/Qwen-Image_ComfyUI", "text_encoders",
                                  "qwen_2.5_vl_7b_fp8_scaled.safetensors"),),
        clip_type="qwen_image",
        vae_file=split_file("Comfy-Org/Qwen-Image_ComfyUI", "vae", "qwen_image_vae.safetensors"),
        steps=20, cfg=4.0, shift=("ModelSamplingAuraFlow", 3.1), negative=NEGATIVE,
        blocks=(60,),   # Qwen-Image: 60 blocks
        recipe=("Comfy-Org's Qwen-Image template as shipped (its Lightning LoRA off): 20 steps, CFG 4, euler, simple, "
                "shift 3.1."),
        evidence=("cache-dit's own Qwen-Image figures are for other runs than this one: 50 steps on an H100 "
                  "together with 2-GPU Ulysses and FlashAttention-3 (12.75 s to 5.67 s with its cache), and "
                  "Qwen-Image-Lightning at 4 steps (F1B0 W2 MC1 R0.8: 1.33x fewer TFLOPs, PSNR 31.8). None "
                  "for this recipe: the settings are the node's defaults (Krea-2's); judge them here."),
        recipe_zh="Comfy-Org 的 Qwen-Image 模板（默认关闭其 Lightning LoRA）：20 步，CFG 4，euler，simple，shift 3.1。",
        evidence_zh=("cache-dit 自己的 Qwen-Image 数据针对的是别的运行方式：H100 上 50 步并配合双 GPU Ulysses 和 FlashAttention-3"
                     "（开启缓存后 12.75 s 降到 5.67 s），以及 4 步的 Qwen-Image-Lightning（F1B0 W2 MC1 R0.8：计算量减少 1.33 倍，PSNR 31.8）。"
                     "没有针对此配方的数据：这里用的是节点默认值（Krea-2 的）；请在这里判断。")),
    "zimage_turbo_compare.json": FamilyTemplate(
        title="Z-Image Turbo", family="Z-Image / Lumina 2 (ComfyUI native)", stand_in="zimage", vae="flux",
        model=split_file(ZIMAGE, "diffusion_models", "z_image_turbo_bf16.safetensors"),
        text_encoders=(split_file(ZIMAGE, "text_encoders", "qwen_3_4b.safetensors"),),
        clip_type="lumina2", vae_file=split_file(ZIMAGE, "vae", "ae.safetensors"),
        steps=8, cfg=1.0, sampler="res_multistep", shift=("ModelSamplingAuraFlow", 3.0),
        blocks=(30,),   # Z-Image Turbo: 30 main layers (its refiners are not cached)
        recipe=("Comfy-Org's Z-Image Turbo template: 8 steps at CFG 1 (one call per step), res_multistep, simple, "
                "shift 3."),
        evidence=("cache-dit's own Z-Image-Turbo figure is a speed figure only, with no image deviation (9 steps, "
                  "1024x1024 on 4 NVIDIA L20 with Ulysses and FP8 all-to-all: 1.89 s to 1.63 s with F1B0, warmup 4, "
                  "threshold 0.6 and a step mask). The settings are the node's defaults (Krea-2's): judge them here, "
                  "on your own prompts."),
        recipe_zh="Comfy-Org 的 Z-Image Turbo 模板：CFG 1 下 8 步（每步一次模型调用），res_multistep，simple，shift 3。",
        evidence_zh=("cache-dit 自己的 Z-Image-Turbo 数据只是速度数据，没有图像偏差（9 步，1024x1024，4 张 NVIDIA L20，Ulysses 加 FP8 "
                     "all-to-all：F1B0、预热 4、阈值 0.6 加步骤掩码时从 1.89 s 降到 1.63 s）。这里用的是节点默认值（Krea-2 的）：请在这里用你自己的"
                     "提示词判断。")),
    "chroma_compare.json": FamilyTemplate(
        title="Chroma1-HD", family=CHROMA, stand_in="chroma", vae="flux",
        model=split_file("Comfy-Org/Chroma1-HD_repackaged", "diffusion_models", "Chroma1-HD-fp8mixed.safetensors"),
        text_encoders=(ModelFile("t5xxl_fp8_e4m3fn_scaled.safetensors", "text_encoders",
                                 f"{HF}/comfyanonymous/flux_text_encoders/resolve/main/"
                                 "t5xxl_fp8_e4m3fn_scaled.safetensors"),),
        clip_type="chroma", vae_file=split_file("Comfy-Org/Lumina_Image_2.0_Repackaged", "vae", "ae.safetensors"),
        steps=26, cfg=3.5, scheduler="beta", shift=("ModelSamplingAuraFlow", 1.0), negative=NEGATIVE,
        cache={"steps_mask": "medium", "calibrator": "taylorseer"},   # the Flux proxy at CFG 3.5 (docs/benchmarks.md)
        blocks=(19, 38),   # Chroma1-HD: Flux.1's 19 double and 38 single blocks
        recipe=("Comfy-Org's Chroma1-HD template: 26 steps, CFG 3.5, euler, beta, shift 1 (its template samples "
                "them with SamplerCustomAdvanced; here a KSampler)."),
        evidence=("No published cache-dit figures for Chroma are known to this pack. The settings here, the step mask "
                  "`medium` with calibrator `taylorseer` (15 of 26 calls, as many as 16 plain steps), rest on a small "
                  "Flux. Measured by this pack on a small test model trained on drawn shapes (a small Flux sampled at "
                  "CFG 3.5), not Chroma: at 28 steps 15 of 28 calls (1.9x), MAE 1.09/255 (euler at 15 steps: 2.51) "
                  "from the full-step image; at 20 steps 12 of 20 calls (1.7x), MAE 1.15/255 (euler at 12 steps: "
                  "3.02); the defaults landed farther than fewer steps at as many calls. Chroma is Flux's two block "
                  "lists with its own modulation approximator: the figures show how caching behaves on that "
                  "architecture at CFG, not what Chroma's images lose, so judge them here."),
        recipe_zh="Comfy-Org 的 Chroma1-HD 模板：26 步，CFG 3.5，euler，beta，shift 1（其模板用 SamplerCustomAdvanced 采样；这里用 KSampler）。",
        evidence_zh=("本扩展不知道有任何公开的 Chroma cache-dit 数据。这里的设置，步骤掩码 `medium` 加校准器 `taylorseer`（26 次调用中计算 15 次，"
                     "相当于 16 个普通步），依据的是一个小型 Flux。由本扩展在一个用绘制的图形训练的小型测试模型上测得（一个以 CFG 3.5 采样的小型 Flux，"
                     "不是 Chroma）：28 步中计算 15 步（1.9 倍），与完整步数图像的 MAE 1.09/255（euler 15 步：2.51）；20 步中计算 12 步（1.7 倍），"
                     "MAE 1.15/255（euler 12 步：3.02）；默认值在相同调用次数下比减少步数离得更远。Chroma 是 Flux 的两个块列表加上它自己的调制"
                     "近似器：这些数据说明缓存在这种架构、使用 CFG 时的表现，不说明 Chroma 的画质损失，请在这里判断。")),
    "wan22_t2v_compare.json": FamilyTemplate(
        title="Wan 2.2 T2V A14B", family="Wan 2.1/2.2 (ComfyUI native)", stand_in="wan", vae="wan21",
        model=split_file(WAN22, "diffusion_models", "wan2.2_t2v_high_noise_14B_fp8_scaled.safetensors"),
        low_noise=split_file(WAN22, "diffusion_models", "wan2.2_t2v_low_noise_14B_fp8_scaled.safetensors"),
        text_encoders=(split_file("Comfy-Org/Wan_2.1_ComfyUI_repackaged", "text_encoders",
                                  "umt5_xxl_fp8_e4m3fn_scaled.safetensors"),),
        clip_type="wan", vae_file=split_file(WAN22, "vae", "wan_2.1_vae.safetensors"),
        steps=20, cfg=3.5, shift=("ModelSamplingSD3", 5.0), negative=NEGATIVE, split_step=10,
        blocks=(40,),   # Wan 2.2 A14B: 40 blocks in each expert
        latent="EmptyHunyuanLatentVideo", latent_size={"width": 832, "height": 480, "length": 81},
        recipe=("Comfy-Org's Wan 2.2 14B text-to-video template as shipped (its 4-step LoRAs off): 20 steps, CFG 3.5, "
                "euler, simple, shift 5 on both experts, the high-noise model for steps 0-10 and the low-noise one for "
                "10-20 (KSamplerAdvanced), 81 frames at 640x640 (here 832x480, about as many pixels in the usual "
                "widescreen shape). Each frame is saved as an image; for a video file, add CreateVideo "
                "and SaveVideo after a VAE Decode."),
        evidence=("Each expert gets its own cache node (the two are different models, and the record of each "
                  "run is its own: the high-noise run's 10 steps, then the low-noise run's 10). "
                  + NO_FIGURES.format(model="Wan 2.2")),
        recipe_zh=("Comfy-Org 的 Wan 2.2 14B 文生视频模板（默认关闭其 4 步 LoRA）：20 步，CFG 3.5，euler，simple，两个专家模型都用 shift 5，高噪声模型负责第 0-10 步，"
                   "低噪声模型负责第 10-20 步（KSamplerAdvanced）。81 帧，640x640（这里为 832x480，像素数相近，常用的宽屏比例）。"
                   "每一帧保存为图片；要得到视频文件，在 VAE 解码后加 CreateVideo 和 SaveVideo。"),
        evidence_zh=("每个专家模型有自己的缓存节点（两者是不同的模型，每次运行的记录各自独立：先是高噪声运行的 10 步，再是低噪声运行的 10 步）。"
                     + NO_FIGURES_ZH.format(model="Wan 2.2")),
        low_noise_stand_in="wan_low"),
    "hunyuan_video15_t2v_compare.json": FamilyTemplate(
        title="HunyuanVideo 1.5 T2V 720p", family=HUNYUAN, stand_in="hunyuan_video15", vae="hunyuan_video15",
        model=split_file(HUNYUAN15, "diffusion_models", "hunyuanvideo1.5_720p_t2v_fp16.safetensors"),
        text_encoders=(split_file(HUNYUAN15, "text_encoders", "qwen_2.5_vl_7b_fp8_scaled.safetensors"),
                       split_file(HUNYUAN15, "text_encoders", "byt5_small_glyphxl_fp16.safetensors")),
        clip_type="hunyuan_video_15",
        vae_file=split_file(HUNYUAN15, "vae", "hunyuanvideo15_vae_fp16.safetensors"),
        steps=20, cfg=6.0, shift=("ModelSamplingSD3", 7.0), negative="",
        blocks=(54,),   # HunyuanVideo 1.5: 54 double blocks, no single ones
        latent="EmptyHunyuanVideo15Latent", latent_size={"width": 848, "height": 480, "length": 121},
        recipe=("Comfy-Org's HunyuanVideo 1.5 720p text-to-video template: 20 steps, CFG 6, euler, simple, shift 7, "
                "an empty negative prompt, 848x480 and 121 frames (its template samples them with "
                "SamplerCustomAdvanced; here a KSampler). Each frame is saved as an image; for a video file, add "
                "CreateVideo and SaveVideo after a VAE Decode."),
        evidence=NO_FIGURES.format(model="HunyuanVideo 1.5"),
        recipe_zh=("Comfy-Org 的 HunyuanVideo 1.5 720p 文生视频模板：20 步，CFG 6，euler，simple，shift 7，空的负向提示词，848x480、121 帧"
                   "（其模板用 SamplerCustomAdvanced 采样；这里用 KSampler）。每一帧保存为图片；要得到视频文件，在 VAE 解码后加 CreateVideo 和 SaveVideo。"),
        evidence_zh=NO_FIGURES_ZH.format(model="HunyuanVideo 1.5")),
    "ltxv_t2v_compare.json": FamilyTemplate(
        title="LTX-Video 2B 0.9", family="LTXV (ComfyUI native)", stand_in="ltxv", vae="ltxv",
        model=ModelFile("ltx-video-2b-v0.9.safetensors", "checkpoints",
                        f"{HF}/Lightricks/LTX-Video/resolve/main/ltx-video-2b-v0.9.safetensors"),
        text_encoders=(ModelFile("t5xxl_fp16.safetensors", "text_encoders",
                                 f"{HF}/comfyanonymous/flux_text_encoders/resolve/main/t5xxl_fp16.safetensors"),),
        clip_type="ltxv", vae_file=None, steps=30, cfg=3.0,
        blocks=(28,),   # LTX-Video 2B: 28 blocks
        prompt=("A weathered lighthouse stands on a dark basalt cliff at dusk. Warm light glows in the lantern room "
                "while long waves roll in and break white against the rocks below, spray drifting up through a soft "
                "mist. The camera slowly pushes in from the sea toward the cliff, low over the water. The sky fades "
                "from orange to deep blue, and the first stars appear. The scene appears to be real-life footage."),
        negative=("low quality, worst quality, deformed, distorted, disfigured, motion smear, motion artifacts, "
                  "fused fingers, bad anatomy, weird hand, ugly"),
        conditioning=("LTXVConditioning", {"frame_rate": 25.0}),
        latent="EmptyLTXVLatentVideo", latent_size={"width": 768, "height": 512, "length": 97},
        recipe=("Comfy-Org's LTXV text-to-video template: the checkpoint with its VAE, 30 steps, CFG 3, euler, "
                "LTXVConditioning at 25 fps, 768x512 and 97 frames. Its template samples them with SamplerCustom "
                "and LTXVScheduler, whose shift at this size is the model's own (2.37); here a KSampler (simple), "
                "without that scheduler's stretch of the last sigmas to 0.1. LTX-Video wants long, descriptive "
                "prompts. Each frame is saved as an image; for a video file, add CreateVideo and SaveVideo after "
                "a VAE Decode."),
        evidence=NO_FIGURES.format(model="LTX-Video"),
        recipe_zh=("Comfy-Org 的 LTXV 文生视频模板：带 VAE 的检查点，30 步，CFG 3，euler，LTXVConditioning 25 fps，768x512、97 帧。其模板用 "
                   "SamplerCustom 和 LTXVScheduler 采样（此尺寸下的 shift 为模型自身的 2.37）；这里用 KSampler（simple），没有该调度器把最后的 sigma "
                   "拉伸到 0.1。LTX-Video 需要详细的长提示词。每一帧保存为图片；要得到视频文件，在 VAE 解码后加 CreateVideo 和 SaveVideo。"),
        evidence_zh=NO_FIGURES_ZH.format(model="LTX-Video")),
    "minimax_h3_t2v_compare.json": FamilyTemplate(
        title="MiniMax H3 (text to video and audio)", family="MiniMax H3 (ComfyUI native)", stand_in="minimax_h3",
        vae="minimax_h3",
        model=ModelFile("minimax_h3_fl2va_pruned_int8_convrot.safetensors", "diffusion_models",
                        f"{MINIMAX_H3}/diffusion_models/minimax_h3_fl2va_pruned_int8_convrot.safetensors"),
        text_encoders=(ModelFile("qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors", "text_encoders",
                                 f"{MINIMAX_H3}/text_encoders/qwen3vl_32b_minimax_h3_nvfp4_awq.safetensors"),),
        clip_type="minimax",
        vae_file=ModelFile("minimax_h3_video_vae_fp16.safetensors", "vae",
                           f"{MINIMAX_H3}/vae/minimax_h3_video_vae_fp16.safetensors"),
        steps=20, cfg=1.0, sampler="res_multistep",
        blocks=(50,),   # MiniMax H3: 50 blocks (the default of ComfyUI's MiniMaxH3Model)
        prompt=("Realistic live-action look, dusk: a weathered lighthouse on a basalt cliff, warm light in the lantern "
                "room, waves breaking white on the rocks below, soft mist. [0s-2.5s] A slow aerial push-in from the "
                "sea toward the cliff. [2.5s-5s] A low shot from the rocks as a wave bursts upward. Audio: wind, the "
                "roar and hiss of the surf, gulls far off, a low foghorn at 3s. No text, subtitles or watermarks."),
        latent="EmptyMiniMaxH3LatentAV", latent_size={"width": 1344, "height": 768, "length": 124},
        recipe=("Comfy-Org's MiniMax H3 text-to-video template without its Lightning LoRA: 20 steps, CFG 1 (its "
                "BasicGuider), res_multistep, simple, 1344x768 and 124 frames (5 s at 24 fps). Its template encodes "
                "the prompt and makes the audio-video latent in MiniMaxH3ImageToVideo, which without keyframes is "
                "CLIPTextEncode and EmptyMiniMaxH3LatentAV, used here, with a KSampler. The audio is sampled with the "
                "video, one packed sequence; this graph decodes and compares the video. For the sound, decode the "
                "sampled latent with VAE Decode Audio and [minimax_h3_audio_vae_fp32.safetensors]"
                f"({MINIMAX_H3}/vae/minimax_h3_audio_vae_fp32.safetensors) (`vae/`), then CreateVideo and SaveVideo. "
                "Each frame is saved as an image."),
        evidence=NO_FIGURES.format(model="MiniMax H3"),
        recipe_zh=("Comfy-Org 的 MiniMax H3 文生视频模板，不含其 Lightning LoRA：20 步，CFG 1（其 BasicGuider），res_multistep，simple，"
                   "1344x768、124 帧（24 fps 下 5 秒）。其模板在 MiniMaxH3ImageToVideo 中编码提示词并生成音视频潜空间，没有关键帧时等同于这里用的 "
                   "CLIPTextEncode 和 EmptyMiniMaxH3LatentAV，再接 KSampler。音频与视频在同一个打包序列中一起采样；此工作流只解码并比较视频。要得到声音，"
                   "用 VAE Decode Audio 和上面链接的 minimax_h3_audio_vae_fp32.safetensors（`vae/`）解码采样出的潜空间，再接 CreateVideo 和 SaveVideo。"
                   "每一帧保存为图片。"),
        evidence_zh=NO_FIGURES_ZH.format(model="MiniMax H3")),
    "ltx2_t2v_compare.json": FamilyTemplate(
        title="LTX-2 19B dev (text to video and audio)", family="LTX-2 (ComfyUI native)", stand_in="ltx2", vae="ltxv",
        model=ModelFile("ltx-2-19b-dev-fp8.safetensors", "checkpoints", f"{LTX2}/ltx-2-19b-dev-fp8.safetensors"),
        text_encoders=(split_file("Comfy-Org/ltx-2", "text_encoders", "gemma_3_12B_it_fp4_mixed.safetensors"),),
        text_encoder_loader="LTXAVTextEncoderLoader", clip_type="ltxv", vae_file=None,
        steps=20, cfg=4.0, sampler="euler_ancestral",
        blocks=(48,),   # LTX-2 19B: 48 blocks (the default of ComfyUI's LTX-2 model)
        prompt=("A weathered lighthouse stands on a dark basalt cliff at dusk. Warm light glows in the lantern room "
                "while long waves roll in and break white against the rocks below, spray drifting up through a soft "
                "mist. The camera slowly pushes in from the sea toward the cliff, low over the water. The roar and "
                "hiss of the surf fill the air, wind gusts past, gulls cry far off, and a low foghorn sounds once. "
                "The scene appears to be real-life footage."),
        negative=("blurry, low quality, still frame, frames, watermark, overlay, titles, has blurbox, "
                  "has subtitles"),
        conditioning=("LTXVConditioning", {"frame_rate": 24.0}),
        latent="EmptyLTXVLatentVideo", latent_size={"width": 640, "height": 352, "length": 121},
        audio_latent=("LTXVEmptyLatentAudio", {"frames_number": 121, "frame_rate": 24.0, "batch_size": 1}),
        recipe=("The first stage of Comfy-Org's LTX-2 text-to-video template: the checkpoint with its VAE and its "
                "audio VAE, the Gemma 3 text encoder, 20 steps, CFG 4, euler_ancestral, LTXVConditioning at 24 fps, "
                "121 frames (5 s) at 640x352 (its 1280x720 halved, as that stage samples it), the video latent "
                "joined with an empty audio latent of the same length. Its template samples them with "
                "SamplerCustomAdvanced and LTXVScheduler (a shift from the latent's size, sigmas stretched to end at "
                "0.1); here a KSampler (simple) at the model's own shift. Left out: its second stage (the 2x spatial "
                "latent upscaler, then 3 steps at CFG 1 with the distilled LoRA to 1280x720), its optional camera "
                "LoRAs and the audio decode: this graph decodes and compares the video. For the sound, decode the "
                "audio latent (LTXVSeparateAVLatent's second output) with LTXV Audio VAE Decode and the audio VAE "
                "(LTXVAudioVAELoader), then CreateVideo at 24 fps and SaveVideo. Each frame is saved as an image."),
        evidence=NO_FIGURES.format(model="LTX-2"),
        recipe_zh=("Comfy-Org 的 LTX-2 文生视频模板的第一阶段：带 VAE 和音频 VAE 的检查点，Gemma 3 文本编码器，20 步，CFG 4，euler_ancestral，"
                   "LTXVConditioning 24 fps，121 帧（5 秒），640x352（其 1280x720 减半，即该阶段的采样尺寸），视频潜空间与等长的空音频潜空间拼接。其模板用 "
                   "SamplerCustomAdvanced 和 LTXVScheduler 采样（shift 取决于潜空间尺寸，sigma 拉伸到 0.1 结束）；这里用 KSampler（simple），模型自身的 "
                   "shift。未包含：第二阶段（2 倍空间潜空间放大，再用蒸馏 LoRA 以 CFG 1 采样 3 步到 1280x720）、可选的镜头 LoRA 和音频解码：此工作流只解码"
                   "并比较视频。要得到声音，用 LTXV Audio VAE Decode 和音频 VAE（LTXVAudioVAELoader）解码音频潜空间（LTXVSeparateAVLatent 的第二个输出），"
                   "再接 24 fps 的 CreateVideo 和 SaveVideo。每一帧保存为图片。"),
        evidence_zh=NO_FIGURES_ZH.format(model="LTX-2")),
    "ernie_image_compare.json": FamilyTemplate(
        title="ERNIE-Image",
        model=ModelFile("ernie-image.safetensors", "diffusion_models",
                        f"{ERNIE_IMAGE}/diffusion_models/ernie-image.safetensors"),
        steps=20, cfg=4.0, negative="", **ERNIE_IMAGE_FILES,
        recipe=("Comfy-Org's ERNIE-Image template: 20 steps, CFG 4, euler, simple, the model's own shift (3), an empty "
                "negative prompt, 1024x1024. " + ERNIE_IMAGE_ENHANCER),
        evidence=NO_FIGURES.format(model="ERNIE-Image") + ERNIE_IMAGE_ADAPTER,
        recipe_zh=("Comfy-Org 的 ERNIE-Image 模板：20 步，CFG 4，euler，simple，模型自身的 shift（3），空的负向提示词，1024x1024。"
                   + ERNIE_IMAGE_ENHANCER_ZH),
        evidence_zh=NO_FIGURES_ZH.format(model="ERNIE-Image") + ERNIE_IMAGE_ADAPTER_ZH),
    "ernie_image_turbo_compare.json": FamilyTemplate(
        title="ERNIE-Image-Turbo",
        model=ModelFile("ernie-image-turbo.safetensors", "diffusion_models",
                        f"{ERNIE_IMAGE}/diffusion_models/ernie-image-turbo.safetensors"),
        steps=8, cfg=1.0, **ERNIE_IMAGE_FILES,
        recipe=("Comfy-Org's ERNIE-Image-Turbo template: 8 steps at CFG 1 (one call per step), euler, simple, the "
                "model's own shift (3), 1024x1024. " + ERNIE_IMAGE_ENHANCER),
        evidence=NO_FIGURES.format(model="ERNIE-Image-Turbo") + ERNIE_IMAGE_ADAPTER,
        recipe_zh=("Comfy-Org 的 ERNIE-Image-Turbo 模板：CFG 1 下 8 步（每步一次模型调用），euler，simple，模型自身的 shift（3），1024x1024。"
                   + ERNIE_IMAGE_ENHANCER_ZH),
        evidence_zh=NO_FIGURES_ZH.format(model="ERNIE-Image-Turbo") + ERNIE_IMAGE_ADAPTER_ZH),
}
