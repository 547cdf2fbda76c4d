"""Which transformers the pack can cache, and where their blocks are.

One entry per transformer class. Classes are named by import path so that the
registry can be read (and tested) without importing ComfyUI. An entry holds no
CFG setting: whether cond and uncond arrive as separate calls is decided per
sampling run (see ``cache_run``).

Adding a model family is one more ``TransformerFamily`` in ``SUPPORTED``.
"""

from __future__ import annotations

import dataclasses

import torch


@dataclasses.dataclass(frozen=True)
class TransformerFamily:
    name: str                    # shown to users in errors and stats
    class_path: str              # "module.Class" of the transformer cache-dit patches
    blocks_attr: str             # attribute holding the nn.ModuleList of transformer blocks
    forward_pattern: str         # cache-dit ForwardPattern name
    # cache-dit checks a block's parameter *names* against the pattern. ComfyUI's
    # native block is forward(x, vec, freqs, mask, ...), so the check must be off there.
    check_forward_pattern: bool
    # Keyword argument through which the model's own block loop tells each block its index
    # (``block_index``, ``total_blocks``) for model patches; None when its blocks take none.
    block_options_kwarg: str | None = None
    # The modules (first, second) that turn the conditioning into text tokens on every call,
    # reused within a run when the host vouches that the conditioning is the same (``text_path``).
    text_path: tuple[str, str] | None = None


SUPPORTED: tuple[TransformerFamily, ...] = (
    TransformerFamily(
        name="Krea-2 (ComfyUI native)",
        class_path="comfy.ldm.krea2.model.SingleStreamDiT",
        blocks_attr="blocks",
        forward_pattern="Pattern_3",
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        text_path=("txtfusion", "txtmlp"),
    ),
    TransformerFamily(
        name="Krea-2 (diffusers)",
        class_path="diffusers.models.transformers.transformer_krea2.Krea2Transformer2DModel",
        blocks_attr="transformer_blocks",
        forward_pattern="Pattern_3",
        check_forward_pattern=True,
        text_path=("text_fusion", "txt_in"),
    ),
)


@dataclasses.dataclass(frozen=True)
class ResolvedTransformer:
    """A supported transformer found inside a host model."""

    family: TransformerFamily
    module: torch.nn.Module

    @property
    def blocks(self) -> torch.nn.ModuleList:
        return getattr(self.module, self.family.blocks_attr)

    @property
    def num_blocks(self) -> int:
        return len(self.blocks)


class UnsupportedModelError(TypeError):
    """The model handed to the Cache-DiT node is not a supported Krea-2 transformer."""


def _class_paths(module: torch.nn.Module) -> list[str]:
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(module).__mro__]


def family_of(module: torch.nn.Module) -> TransformerFamily | None:
    paths = _class_paths(module)
    for family in SUPPORTED:
        if family.class_path in paths:
            return family
    return None


def resolve(host: torch.nn.Module) -> ResolvedTransformer:
    """Find the supported transformer in ``host``: the host itself or one of its direct children.

    ComfyUI's native Krea-2 *is* the diffusion model; the pack's diffusers loader
    wraps a diffusers transformer in a thin ComfyUI-facing module.
    """
    candidates = [host] + [child for _, child in host.named_children()]
    for module in candidates:
        family = family_of(module)
        if family is not None:
            return ResolvedTransformer(family, module)
    supported = ", ".join(f"{f.name} [{f.class_path.rsplit('.', 1)[-1]}]" for f in SUPPORTED)
    raise UnsupportedModelError(
        f"Krea-2 Cache-DiT got a {type(host).__name__} model ({type(host).__module__}), which is not a "
        f"supported Krea-2 transformer. Supported: {supported}. Load a Krea-2 checkpoint with "
        f"'Load Diffusion Model' or 'Load Krea-2 (diffusers)' and connect that MODEL.")
