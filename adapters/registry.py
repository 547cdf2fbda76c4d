"""Which transformers the pack can cache, and where their blocks are.

One entry per transformer class. Classes are named by import path so that the
registry can be read (and tested) without importing ComfyUI. An entry holds no
CFG setting: whether cond and uncond arrive as separate calls is decided per
sampling run (see ``cache_run``).

Adding a model family is one more ``TransformerFamily`` in ``SUPPORTED``; a node
accepts the families of its ``NodeScope``.
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
    # Whether subclasses are this family too. Off where ComfyUI's subclasses change the block loop
    # by block index (e.g. Wan's VACE and audio variants inject features after chosen blocks): under
    # cache-dit the loop sees one wrapper, so that injection would land after the whole stack.
    match_subclasses: bool = True
    model: str = "Krea-2"        # the model family a user knows, for node scopes and docs
    # Patches ("group.name" in transformer_options) that the model's own block loop applies
    # between blocks by block index (e.g. a ControlNet's ``double_block`` patch). Under cache-dit
    # that loop sees one wrapper block, so a call carrying them is computed in full instead.
    loop_patches: tuple[str, ...] = ()
    # The modules (first, second) that turn the conditioning into text tokens on every call,
    # reused within a run when the host vouches that the conditioning is the same (``text_path``).
    text_path: tuple[str, str] | None = None
    # Whether the model's block loop adds a ControlNet's residuals (the ``control`` argument of the
    # model call) after each block by index: a call carrying them is computed in full, as above.
    loop_control: bool = False

    @property
    def hidden_output_index(self) -> int:
        """Where a block's output tuple holds the image (hidden) stream, as the forward pattern says:
        Pattern_1 blocks return (encoder, hidden). The Fn residual is measured on that stream."""
        import cache_dit

        return getattr(cache_dit.ForwardPattern, self.forward_pattern).Out.index("hidden_states")


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
    # Wan 2.1 / 2.2 (t2v, i2v, the 2.2 high/low-noise pair and the 5B): one list of blocks that
    # take (x, e, freqs, context, ...) and return x. Fn's residual is on the video tokens.
    TransformerFamily(
        name="Wan 2.1/2.2 (ComfyUI native)",
        class_path="comfy.ldm.wan.model.WanModel",
        blocks_attr="blocks",
        forward_pattern="Pattern_3",
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        model="Wan",
        loop_patches=("patches.double_block", "patches_replace.dit"),
    ),
    # Z-Image: the main stack in ``layers`` takes the joint (caption + image) sequence and returns
    # it; Fn's residual is on that joint sequence. The noise and context refiners run before the
    # stack on every call and are never cached.
    TransformerFamily(
        name="Z-Image / Lumina 2 (ComfyUI native)",
        class_path="comfy.ldm.lumina.model.NextDiT",
        blocks_attr="layers",
        forward_pattern="Pattern_3",
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        model="Z-Image",
        loop_patches=("patches.double_block",),
    ),
    # Qwen-Image (and its Edit models, whose reference latents join the image tokens before the
    # stack): blocks take (hidden_states=image, encoder_hidden_states=text, ...) and return
    # (text, image), cache-dit's Pattern_1 as in its own Qwen-Image adapter. The loop applies
    # ``double_block`` patches, ``dit`` block replacements and ControlNet residuals by block index.
    TransformerFamily(
        name="Qwen-Image (ComfyUI native)",
        class_path="comfy.ldm.qwen_image.model.QwenImageTransformer2DModel",
        blocks_attr="transformer_blocks",
        forward_pattern="Pattern_1",
        check_forward_pattern=True,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        model="Qwen-Image",
        loop_patches=("patches.double_block", "patches_replace.dit"),
        loop_control=True,
    ),
)


@dataclasses.dataclass(frozen=True)
class NodeScope:
    """Which families a cache node accepts, and how it words a refusal."""

    node_name: str
    families: tuple[TransformerFamily, ...]
    what: str          # "a supported Krea-2 transformer"
    how_to_load: str   # what to connect instead


KREA2_SCOPE = NodeScope(
    node_name="Krea-2 Cache-DiT", families=tuple(f for f in SUPPORTED if f.model == "Krea-2"),
    what="a supported Krea-2 transformer",
    how_to_load="Load a Krea-2 checkpoint with 'Load Diffusion Model' or 'Load Krea-2 (diffusers)' and connect "
                "that MODEL.")
ANY_SCOPE = NodeScope(
    node_name="Cache-DiT DBCache", families=SUPPORTED, what="a transformer this node supports",
    how_to_load="Connect the MODEL of one of these from 'Load Diffusion Model' (Krea-2 also from "
                "'Load Krea-2 (diffusers)').")


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


def loop_patches_in(family: TransformerFamily, transformer_options: dict) -> list[str]:
    """The patches in a call's options that ``family``'s own block loop applies by block index."""
    found = []
    for path in family.loop_patches:
        group, name = path.split(".", 1)
        if (transformer_options.get(group) or {}).get(name):
            found.append(path)
    return found


def loop_injections_in(family: TransformerFamily, transformer_options: dict, call_kwargs: dict) -> list[str]:
    """What of a call ``family``'s own block loop applies by block index: its loop patches, and a
    ControlNet's ``control`` where the loop adds it per block."""
    found = loop_patches_in(family, transformer_options)
    if family.loop_control and call_kwargs.get("control") is not None:
        found.append("control")
    return found


class UnsupportedModelError(TypeError):
    """The model handed to a Cache-DiT node is not one of the transformers that node supports."""


def _class_paths(module: torch.nn.Module) -> list[str]:
    return [f"{cls.__module__}.{cls.__qualname__}" for cls in type(module).__mro__]


def family_of(module: torch.nn.Module, families=SUPPORTED) -> TransformerFamily | None:
    paths = _class_paths(module)
    for family in families:
        if family.class_path in (paths if family.match_subclasses else paths[:1]):
            return family
    return None


def resolve(host: torch.nn.Module, scope: NodeScope = ANY_SCOPE) -> ResolvedTransformer:
    """Find the supported transformer in ``host``: the host itself or one of its direct children.

    ComfyUI's native Krea-2 *is* the diffusion model; the pack's diffusers loader
    wraps a diffusers transformer in a thin ComfyUI-facing module.
    """
    candidates = [host] + [child for _, child in host.named_children()]
    for module in candidates:
        family = family_of(module, scope.families)
        if family is not None:
            return ResolvedTransformer(family, module)
    supported = ", ".join(f"{f.name} [{f.class_path.rsplit('.', 1)[-1]}]" for f in scope.families)
    raise UnsupportedModelError(
        f"{scope.node_name} got a {type(host).__name__} model ({type(host).__module__}), which is not "
        f"{scope.what}. Supported: {supported}. {scope.how_to_load}")
