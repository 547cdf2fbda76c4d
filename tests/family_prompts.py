"""API-format prompts for the tiny generated models of the other families (tests/comfy_models.py).

The same graph as ``krea2_prompt`` (same node ids), with each family's own conditioning width
and latent: Wan samples 5D video latents, Z-Image, Qwen-Image and Flux.1 16-channel image latents,
Flux.2 128-channel latents; Qwen-Image's conditioning is 3584 wide (its text encoder's width, fixed
in ComfyUI's model); Flux.1's conditioning carries a pooled vector.
"""

from __future__ import annotations

import dataclasses

from comfy_models import FAMILY_MODELS
from krea2_prompts import krea2_prompt


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    model: str              # the checkpoint in models/diffusion_models
    name: str               # the family name the stats report
    blocks: int             # blocks in the cached stack (over all its lists)
    context_features: int   # the text context width the model's text embedding takes
    latent: dict            # the node that makes the empty latent ("4")
    # (block_type, blocks) of each block list in loop order, block_type as the model's loop reports it
    # (Wan's and Z-Image's loops call their one list "double"); empty: one "double" list of ``blocks``.
    lists: tuple[tuple[str | None, int], ...] = ()
    pooled_features: int = 0   # the pooled vector's width (Flux.1's y); 0: none
    # A negative prompt this many tokens long cannot batch with the 8-token positive (Flux.2 pads
    # every prompt to 512 tokens, so only a longer one stays apart).
    split_tokens: int = 13

    @property
    def block_lists(self) -> tuple[tuple[str | None, int], ...]:
        return self.lists or (("double", self.blocks),)


FLUX = "Flux.1 / Flux.2 (ComfyUI native)"
FLUX_LISTS = (("double", 2), ("single", 3))

FAMILIES = {
    "wan": FamilySpec(FAMILY_MODELS["wan"], "Wan 2.1/2.2 (ComfyUI native)", 4, 4096, {
        "class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 64, "height": 64, "length": 5, "batch_size": 1}}),
    "zimage": FamilySpec(FAMILY_MODELS["zimage"], "Z-Image / Lumina 2 (ComfyUI native)", 2, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}),
    "qwen_image": FamilySpec(FAMILY_MODELS["qwen_image"], "Qwen-Image (ComfyUI native)", 2, 3584, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}),
    # Flux.1 dev (guidance embedding, pooled vector) and Flux.2 Klein (no guidance embedding).
    "flux1": FamilySpec(FAMILY_MODELS["flux1"], FLUX, 5, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        lists=FLUX_LISTS, pooled_features=32),
    "flux2": FamilySpec(FAMILY_MODELS["flux2_klein"], FLUX, 5, 64, {
        "class_type": "EmptyFlux2LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}},
        lists=FLUX_LISTS, split_tokens=600),
}


def family_prompt(family: str, *, cache: dict | None = None, node: str = "CacheDiTDBCache", model: str | None = None,
                  **kwargs) -> dict:
    """``krea2_prompt`` for ``family`` with the cache node ``node`` (when ``cache`` is given)."""
    spec = FAMILIES[family]
    kwargs.setdefault("prefix", f"{family}_test")
    prompt = krea2_prompt(cache=cache, model=model or spec.model, **kwargs)
    for cond in ("2", "3"):
        prompt[cond]["inputs"]["features"] = spec.context_features
        if spec.pooled_features:
            prompt[cond]["inputs"]["pooled_features"] = spec.pooled_features
    prompt["4"] = {"class_type": spec.latent["class_type"], "inputs": dict(spec.latent["inputs"])}
    if cache is not None:
        prompt["5"]["class_type"] = node
    return prompt
