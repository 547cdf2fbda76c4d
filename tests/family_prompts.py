"""API-format prompts for the tiny generated models of the other families (tests/comfy_models.py).

The same graph as ``krea2_prompt`` (same node ids), with each family's own conditioning width
and latent: Wan samples 5D video latents, Z-Image and Qwen-Image 16-channel image latents
(Qwen-Image's conditioning is 3584 wide, its text encoder's width, fixed in ComfyUI's model).
"""

from __future__ import annotations

import dataclasses

from comfy_models import FAMILY_MODELS
from krea2_prompts import krea2_prompt


@dataclasses.dataclass(frozen=True)
class FamilySpec:
    model: str              # the checkpoint in models/diffusion_models
    name: str               # the family name the stats report
    blocks: int             # blocks in the cached stack
    context_features: int   # the text context width the model's text embedding takes
    latent: dict            # the node that makes the empty latent ("4")


FAMILIES = {
    "wan": FamilySpec(FAMILY_MODELS["wan"], "Wan 2.1/2.2 (ComfyUI native)", 4, 4096, {
        "class_type": "EmptyHunyuanLatentVideo", "inputs": {"width": 64, "height": 64, "length": 5, "batch_size": 1}}),
    "zimage": FamilySpec(FAMILY_MODELS["zimage"], "Z-Image / Lumina 2 (ComfyUI native)", 2, 64, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}),
    "qwen_image": FamilySpec(FAMILY_MODELS["qwen_image"], "Qwen-Image (ComfyUI native)", 2, 3584, {
        "class_type": "EmptySD3LatentImage", "inputs": {"width": 64, "height": 64, "batch_size": 1}}),
}


def family_prompt(family: str, *, cache: dict | None = None, node: str = "CacheDiTDBCache", model: str | None = None,
                  **kwargs) -> dict:
    """``krea2_prompt`` for ``family`` with the cache node ``node`` (when ``cache`` is given)."""
    spec = FAMILIES[family]
    kwargs.setdefault("prefix", f"{family}_test")
    prompt = krea2_prompt(cache=cache, model=model or spec.model, **kwargs)
    for cond in ("2", "3"):
        prompt[cond]["inputs"]["features"] = spec.context_features
    prompt["4"] = {"class_type": spec.latent["class_type"], "inputs": dict(spec.latent["inputs"])}
    if cache is not None:
        prompt["5"]["class_type"] = node
    return prompt
