"""API-format prompts for the tiny generated model of each family: Krea-2 (the main test server's,
devkit/krea2_synthetic.py) and the other families (devkit/comfy_models.py).

The same graph as ``krea2_prompt`` (same node ids), with each family's own conditioning width
and latent: Wan samples 5D video latents, Krea-2, Z-Image, Qwen-Image, Flux.1 and Chroma 16-channel image
latents, Flux.2 128-channel latents; Qwen-Image's conditioning is 3584 wide (its text encoder's
width, fixed in ComfyUI's model); Flux.1's conditioning carries a pooled vector. Krea-2's cache node
is its own (``Krea2CacheDiT``), the other families' ``CacheDiTDBCache``.
"""

from __future__ import annotations

import dataclasses

from devkit.comfy_models import FAMILY_MODELS
from devkit.krea2_prompts import TINY_CONTEXT_FEATURES, TINY_MODEL, krea2_prompt


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    model: str              # the checkpoint in models/diffusion_models
    name: str               # the family name the stats report
    blocks: int             # blocks in the cached stack (over all its lists)
    context_features: int   # the text context width the model's text embedding takes
    latent: dict | None     # the node that makes the empty latent ("4"); None: krea2_prompt's (size, batch)
    # (block_type, blocks) of each block list in loop order, block_type as the model's loop reports it
    # (Wan's and Z-Image's loops call their one list "double"); empty: one "double" list of ``blocks``.
    lists: tuple[tuple[str | None, int], ...] = ()
    pooled_features: int = 0   # the pooled vector's width (Flux.1's y); 0: none
    # A negative prompt this many tokens long cannot batch with the 8-token positive (Flux.2 pads
    # every prompt to 512 tokens, so only a longer one stays apart).
    split_tokens: int = 13
    node: str = "CacheDiTDBCache"   # the cache node the family's tests place
    # The session fixture (tests/conftest.py) whose server holds its checkpoint: ``family_server`` writes the
    # cheap ones before it starts; a family whose every model call is costly even when shallow has a fixture of
    # its own that writes its checkpoint only when one of its tests asks for it.
    server: str = "family_server"
    # Its text encoder gives the conditioning an attention mask, which the model takes as an argument (LTXV's T5).
    attention_mask: bool = False
    # The node that loads its checkpoint in place of ``UNETLoader`` (None: ``UNETLoader``): ComfyUI builds ERNIE-Image
    # only at its full size, the test node pack's ``Krea2TestSizedUNETLoader`` at the size the checkpoint says.
    loader: str | None = None

    @property
    def on_demand(self) -> bool:
        """Its checkpoint is written only when a test asks for its server (not with the session's servers)."""
        return self.server not in SESSION_SERVERS

    @property
    def block_lists(self) -> tuple[tuple[str | None, int], ...]:
        return self.lists or (("double", self.blocks),)


# The test node pack's loader of the stand-ins ComfyUI's detection would build at another size.
SIZED_LOADER = "Krea2TestSizedUNETLoader"
# The servers made with the session, holding their families' checkpoints from the start.
SESSION_SERVERS = ("comfy_server", "family_server")
FLUX = "Flux.1 / Flux.2 (ComfyUI native)"
FLUX_LISTS = (("double", 2), ("single", 3))
CHROMA = "Chroma (ComfyUI native)"
HUNYUAN = "HunyuanVideo / HunyuanImage 2.1 (ComfyUI native)"

FAMILIES = {
    # The session's tiny Krea-2 (conftest's comfy_server): krea2_prompt's own graph.
    "krea2": FamilySpec(TINY_MODEL, "Krea-2 (ComfyUI native)", 4, TINY_CONTEXT_FEATURES, None,
                        node="Krea2CacheDiT", server="comfy_server"),
    "wan": FamilySpec(FAMILY_MODELS["wan"], "Wan 2.1/2.2 (ComfyUI native)", 4, 4096, {
        "class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 64, "height": 64, "length": 5, "batch_size": 1}}),
    # Z-Image and Qwen-Image: 2 blocks 256 and 128 wide, loaded at their size by the test node pack's loader (ComfyUI
    # detects them only at their real width).
    "zimage": FamilySpec(FAMILY_MODELS["zimage"], "Z-Image / Lumina 2 (ComfyUI native)", 2, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        loader=SIZED_LOADER),
    "qwen_image": FamilySpec(FAMILY_MODELS["qwen_image"], "Qwen-Image (ComfyUI native)", 2, 3584, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        loader=SIZED_LOADER),
    # Flux.1 dev (guidance embedding, pooled vector) and Flux.2 Klein (no guidance embedding).
    "flux1": FamilySpec(FAMILY_MODELS["flux1"], FLUX, 5, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        lists=FLUX_LISTS, pooled_features=32),
    "flux2": FamilySpec(FAMILY_MODELS["flux2_klein"], FLUX, 5, 64, {
        "class_type": "EmptyFlux2LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        lists=FLUX_LISTS, split_tokens=600),
    # Chroma: Flux's two lists (2 double + 2 single blocks, 128 wide, loaded at its size by the test node pack's
    # loader), no pooled vector, guidance 0, on a 32x32 image (4 image tokens).
    "chroma": FamilySpec(FAMILY_MODELS["chroma"], CHROMA, 4, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 32, "height": 32, "batch_size": 1}},
        lists=(("double", 2), ("single", 2)), loader=SIZED_LOADER),
    # LTXV: 4 blocks 128 wide on a 64x64, 9-frame video latent (128 channels, 2 latent frames of 2x2),
    # the caption projection taking 4096; its own tests, with ComfyUI's LTXV nodes.
    "ltxv": FamilySpec(FAMILY_MODELS["ltxv"], "LTXV (ComfyUI native)", 4, 4096, {
        "class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 64, "height": 64, "length": 9, "batch_size": 1}},
        server="ltxv_server", attention_mask=True),
    # HunyuanVideo 1.5 t2v (3 double blocks, no single ones, as the real 54 + 0) on a 5-frame 64x64 video latent
    # (32 channels, 2x4x4 tokens), and HunyuanImage 2.1 (2 double + 2 single) on a 128x128 image (4x4 tokens
    # of 64 channels). ComfyUI's HunyuanVideo conds read a pooled vector, which the model ignores without
    # vector_in (1.5 and Image 2.1 have none). Nothing of their own beyond the family scenario set
    # (tests/families/test_family_scenarios_comfyui.py).
    "hunyuan_video15": FamilySpec(FAMILY_MODELS["hunyuan_video15"], HUNYUAN, 3, 64, {
        "class_type": "EmptyHunyuanVideo15Latent", "inputs": {"width": 64, "height": 64, "length": 5, "batch_size": 1}},
        lists=(("double", 3),), pooled_features=32, server="hunyuan_video15_server"),
    "hunyuan_image21": FamilySpec(FAMILY_MODELS["hunyuan_image21"], HUNYUAN, 4, 64, {
        "class_type": "EmptyHunyuanImageLatent", "inputs": {"width": 128, "height": 128, "batch_size": 1}},
        lists=(("double", 2), ("single", 2)), pooled_features=32, server="hunyuan_image21_server"),
}


def family_prompt(family: str, *, cache: dict | None = None, node: str | None = None, model: str | None = None,
                  **kwargs) -> dict:
    """``krea2_prompt`` for ``family`` with the cache node ``node`` (the family's own when None) when
    ``cache`` is given."""
    spec = FAMILIES[family]
    kwargs.setdefault("prefix", f"{family}_test")
    if spec.loader is not None:
        kwargs.setdefault("loader", {"class_type": spec.loader, "inputs": {"unet_name": model or spec.model}})
    prompt = krea2_prompt(cache=cache, model=model or spec.model, **kwargs)
    for cond in ("2", "3"):
        prompt[cond]["inputs"]["features"] = spec.context_features
        if spec.pooled_features:
            prompt[cond]["inputs"]["pooled_features"] = spec.pooled_features
        if spec.attention_mask:
            prompt[cond]["inputs"]["attention_mask"] = True
    if spec.latent is not None:
        prompt["4"] = {"class_type": spec.latent["class_type"], "inputs": dict(spec.latent["inputs"])}
    if cache is not None:
        prompt["5"]["class_type"] = node or spec.node
    return prompt

# MiniMax H3: 4 blocks 64 wide, text width 32; a 64x64, 5-frame audio-video latent (8 video tokens and
# 16 audio tokens after the 8 text tokens in one packed sequence). Its own tests: the sampler's latent is
# a video and an audio latent, saved apart (tests/families/test_families_minimax_comfyui.py).
FAMILIES["minimax_h3"] = FamilySpec(
    FAMILY_MODELS["minimax_h3"], "MiniMax H3 (ComfyUI native)", 4, 32, {
        "class_type": "EmptyMiniMaxH3LatentAV", "inputs": {"width": 64, "height": 64, "length": 5}},
    server="minimax_server")

# LTX-2: 4 blocks, video 128 wide and audio 64 wide, the conditioning already processed per stream (64 + 64
# wide); a 64x64, 9-frame video latent (8 tokens) joined by ComfyUI's ``LTXVConcatAVLatent`` with an 8-frame
# audio latent (8 tokens). Its own tests: the AV latent is built and split there (tests/families/test_families_ltx2_comfyui.py).
FAMILIES["ltx2"] = FamilySpec(
    FAMILY_MODELS["ltx2"], "LTX-2 (ComfyUI native)", 4, 128, {
        "class_type": "EmptyLTXVLatentVideo", "inputs": {"width": 64, "height": 64, "length": 9, "batch_size": 1}},
    server="ltx2_server")
# ERNIE-Image (and ERNIE-Image-Turbo, the same class): 4 blocks 128 wide, text width 64, on a 64x64 Flux.2 latent
# (128 channels, 4x4 image tokens before the 8 text tokens in one joint sequence), loaded at its size by the test
# node pack's loader. Nothing of its own beyond the family scenario set but what ``auto``'s output forecast rests on
# (tests/families/test_families_ernie_image_comfyui.py).
FAMILIES["ernie_image"] = FamilySpec(
    FAMILY_MODELS["ernie_image"], "ERNIE-Image (ComfyUI native)", 4, 64, {
        "class_type": "EmptyFlux2LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
    server="ernie_image_server", loader=SIZED_LOADER)
# The families whose checkpoints the session's servers hold from the start: cheap enough for the checks that
# are not family scenarios to run on each of them.
SHARED = [family for family, spec in FAMILIES.items() if not spec.on_demand]
