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
class BlockList:
    """One list of blocks the model's own loop runs in order; cache-dit gives each its own cache context."""

    attr: str                          # attribute holding the nn.ModuleList
    forward_pattern: str               # cache-dit ForwardPattern name
    # What the model's loop writes as ``block_type`` into the blocks' options (None: nothing).
    block_type: str | None = None
    # Keywords the model's loop passes the hidden states as, in the order cache-dit's wrapper takes
    # them positionally (its forward is ``(hidden_states, encoder_hidden_states, *args, **kwargs)``).
    hidden_kwargs: tuple[str, ...] = ()
    # Whether the blocks add into their hidden-state inputs in place (Flux's ``img += ...``). cache-dit
    # keeps a list's input, and its middle blocks' input, to subtract as residuals: such blocks must
    # get a copy there, or every residual it keeps is zero.
    adds_in_place: bool = False
    # The kinds the family's ``BlockModulation.slicer`` is asked for to build one block's slice of the
    # call's modulation table (one kind: that slice; several: a tuple of them, in this order).
    modulation_kinds: tuple[str, ...] = ()
    # Whether the loop hands each block its hidden state as one pair of two widths, first, and takes
    # the pair back (LTX-2's (video, audio)): cache-dit gets it as one tensor (``paired_hidden``).
    hidden_pair: bool = False
    # The block's required parameters after its hidden states, as the loop passes them: a block that
    # requires another one is a loop this entry does not describe (``block_contract``).
    arguments: tuple[str, ...] = ()

    def _pattern(self):
        import cache_dit

        return getattr(cache_dit.ForwardPattern, self.forward_pattern)

    @property
    def hidden_args(self) -> int:
        """How many leading positional arguments cache-dit passes a block as hidden states (the pattern's inputs)."""
        return len(self._pattern().In)

    @property
    def hidden_output_index(self) -> int:
        """Where a block's output tuple holds the image (hidden) stream, as the forward pattern says:
        Pattern_1 blocks (Qwen-Image) return (encoder, hidden). The Fn residual is measured on that stream."""
        return self._pattern().Out.index("hidden_states")


@dataclasses.dataclass(frozen=True)
class BlockModulation:
    """A loop that hands each block its own slice of one modulation table the call computes once.

    Chroma's distilled guidance approximator computes the table; its loop slices it by block index
    (``get_modulations``) and passes the slice as ``vec``. Under cache-dit the loop calls one wrapper
    per list with the first block's slice, so each block gets its own slice again before it runs.
    """

    table: str     # the module whose output is the call's table
    slicer: str    # the transformer's method ``(table, kind, idx=index)`` returning one block's slice
    kwarg: str     # the block keyword argument the loop passes the slice as


@dataclasses.dataclass(frozen=True)
class TransformerFamily:
    name: str                    # shown to users in errors and stats
    model: str                   # the model family a user knows, for node scopes and docs
    class_path: str              # "module.Class" of the transformer cache-dit patches
    # The block lists the model's own loop runs, in loop order; each is its own cache-dit context.
    block_lists: tuple[BlockList, ...]
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
    # Patches ("group.name" in transformer_options) that the model's own block loop applies
    # between blocks by block index (e.g. a ControlNet's ``double_block`` patch). Under cache-dit
    # that loop sees one wrapper block, so a call carrying them is computed in full instead.
    loop_patches: tuple[str, ...] = ()
    # The modules (first, second) that turn the conditioning into text tokens on every call,
    # reused within a run when the host vouches that the conditioning is the same (``text_path``).
    text_path: tuple[str, str] | None = None
    # The module that turns the last block's hidden state into the model's output, with the step's
    # time modulation; its first argument is the feature whole-call forecasting forecasts.
    final_layer: str | None = None
    # The final layer's parameter that takes the feature (its forward's name for it): the forecast reads and
    # replaces the feature by this name, wherever the loop passes it (``final_layer_contract``).
    final_feature: str | None = None
    # Whether the final layer returns one tensor that the model's code turns into its prediction by affine steps
    # alone (cutting tokens, folding patches, ERNIE-Image's ``final_linear``), so its output can be forecast
    # (``Forecaster.target`` "output"); MiniMax H3's returns the video and the audio apart.
    final_output_forecast: bool = True
    # Where each block's modulation is its own slice of one table (None: the loop hands every block the same).
    modulation: BlockModulation | None = None
    # Attributes of the transformer listing block indices its loop skips (Chroma's ``skip_mmdit``,
    # ``skip_dit``). Under cache-dit the loop sees one wrapper that runs every block, so calls while
    # one is non-empty are computed in full instead.
    skip_lists: tuple[str, ...] = ()
    # Whether the model's forward hands each call to ComfyUI's DIFFUSION_MODEL wrappers (most models' forward runs
    # its ``_forward`` through them), where the nodes see each call. ERNIE-Image's (ComfyUI 0.33) runs its loop
    # directly: the nodes route its calls through those wrappers themselves, or they would never see one.
    forward_runs_wrappers: bool = True
    # Keys of transformer_options that, when set, make the loop treat chosen blocks differently by index
    # (LTX-2's ``stg_self_attn_blocks``: those blocks' self-attention perturbed). The wrapper would apply
    # the first block's options to all, so calls with one set are computed in full instead.
    loop_options: tuple[str, ...] = ()

    def __post_init__(self):
        if not self.model:
            raise ValueError(f"{self.name}: a family needs its model's name (what node scopes select by)")
        if not self.block_lists or not all(isinstance(entry, BlockList) for entry in self.block_lists):
            raise ValueError(f"{self.name}: block_lists must be a non-empty tuple of BlockList")
        if bool(self.final_layer) != bool(self.final_feature):
            raise ValueError(f"{self.name}: a final layer needs its feature's parameter name (final_feature), and "
                             f"only a final layer has one")

    @property
    def call_patches(self) -> bool:
        """Whether some loop patch is an argument of the model call (a plain name), not an option."""
        return any("." not in path for path in self.loop_patches)


# Flux's double-stream blocks on (img, txt), by keyword, then its single-stream blocks on cat(txt, img);
# both add into their input in place. HunyuanVideo's loop runs the same blocks the same way.
FLUX_STREAM_LISTS = (BlockList("double_blocks", "Pattern_0", block_type="double", hidden_kwargs=("img", "txt"),
                               adds_in_place=True, arguments=("vec", "pe")),
                     BlockList("single_blocks", "Pattern_3", block_type="single", adds_in_place=True,
                               arguments=("vec", "pe")))

SUPPORTED: tuple[TransformerFamily, ...] = (
    TransformerFamily(
        name="Krea-2 (ComfyUI native)",
        model="Krea-2",
        class_path="comfy.ldm.krea2.model.SingleStreamDiT",
        block_lists=(BlockList("blocks", "Pattern_3", arguments=("vec", "freqs")),),
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        text_path=("txtfusion", "txtmlp"),
        final_layer="last",
        final_feature="x",
    ),
    TransformerFamily(
        name="Krea-2 (diffusers)",
        model="Krea-2",
        class_path="diffusers.models.transformers.transformer_krea2.Krea2Transformer2DModel",
        block_lists=(BlockList("transformer_blocks", "Pattern_3", arguments=("temb", "image_rotary_emb")),),
        check_forward_pattern=True,
        text_path=("text_fusion", "txt_in"),
        final_layer="final_layer",
        final_feature="hidden_states",
    ),
    # Wan 2.1 / 2.2 (t2v, i2v, the 2.2 high/low-noise pair and the 5B): one list of blocks that
    # take (x, e, freqs, context, ...) and return x. Fn's residual is on the video tokens.
    TransformerFamily(
        name="Wan 2.1/2.2 (ComfyUI native)",
        model="Wan",
        class_path="comfy.ldm.wan.model.WanModel",
        block_lists=(BlockList("blocks", "Pattern_3", arguments=("e", "freqs", "context")),),
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        loop_patches=("patches.double_block", "patches_replace.dit"),
        final_layer="head",
        final_feature="x",
    ),
    # Z-Image: the main stack in ``layers`` takes the joint (caption + image) sequence and returns
    # it; Fn's residual is on that joint sequence. The noise and context refiners run before the
    # stack on every call and are never cached.
    TransformerFamily(
        name="Z-Image / Lumina 2 (ComfyUI native)",
        model="Z-Image",
        class_path="comfy.ldm.lumina.model.NextDiT",
        block_lists=(BlockList("layers", "Pattern_3", arguments=("x_mask", "freqs_cis")),),
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        loop_patches=("patches.double_block",),
        final_layer="final_layer",
        final_feature="x",
    ),
    # Qwen-Image (and its Edit models, whose reference latents join the image tokens before the
    # stack): blocks take (hidden_states=image, encoder_hidden_states=text, ...) and return
    # (text, image), cache-dit's Pattern_1 as in its own Qwen-Image adapter. The loop applies
    # ``double_block`` patches, ``dit`` block replacements and ControlNet residuals by block index.
    TransformerFamily(
        name="Qwen-Image (ComfyUI native)",
        model="Qwen-Image",
        class_path="comfy.ldm.qwen_image.model.QwenImageTransformer2DModel",
        block_lists=(BlockList("transformer_blocks", "Pattern_1", arguments=("encoder_hidden_states_mask", "temb")),),
        check_forward_pattern=True,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        loop_patches=("patches.double_block", "patches_replace.dit", "control"),
        final_layer="norm_out",
        final_feature="x",
    ),
    # Flux.1 (dev, schnell, Kontext) and Flux.2 (dev with guidance, Klein without): ``forward_orig``
    # runs the double-stream blocks on (img, txt), then the single-stream blocks on cat(txt, img).
    # Each list is its own cache context with its own Fn residual (img, then the joint sequence), as
    # in cache-dit's own Flux adapters. A ControlNet's ``control`` adds to chosen blocks' outputs in
    # the loop, as ``patches_replace`` replaces chosen blocks: calls with either are computed in full.
    TransformerFamily(
        name="Flux.1 / Flux.2 (ComfyUI native)",
        model="Flux",
        class_path="comfy.ldm.flux.model.Flux",
        block_lists=FLUX_STREAM_LISTS,
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        # Chroma and others subclass Flux with loops of their own.
        match_subclasses=False,
        loop_patches=("patches_replace.dit", "control"),
        final_layer="final_layer",
        final_feature="x",
    ),
    # Chroma: Flux's double- and single-stream blocks without their own modulation. One call of the
    # distilled guidance approximator makes a table of every block's modulation; the loop passes each
    # block its slice (``get_modulations`` by block index) as ``vec``, skips the blocks in
    # ``skip_mmdit`` / ``skip_dit``, and applies ``patches_replace`` and a ControlNet's ``control`` by
    # block index as Flux's does. Chroma Radiance subclasses it with a pixel-space head of its own.
    TransformerFamily(
        name="Chroma (ComfyUI native)",
        model="Chroma",
        class_path="comfy.ldm.chroma.model.Chroma",
        block_lists=(BlockList("double_blocks", "Pattern_0", block_type="double", hidden_kwargs=("img", "txt"),
                               adds_in_place=True, modulation_kinds=("double_img", "double_txt"),
                               arguments=("vec", "pe")),
                     BlockList("single_blocks", "Pattern_3", block_type="single", adds_in_place=True,
                               modulation_kinds=("single",), arguments=("vec", "pe"))),
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        loop_patches=("patches_replace.dit", "control"),
        final_layer="final_layer",
        final_feature="x",
        modulation=BlockModulation(table="distilled_guidance_layer", slicer="get_modulations", kwarg="vec"),
        skip_lists=("skip_mmdit", "skip_dit"),
    ),
    # MiniMax H3 (audio + video): one packed sequence [text | keyframe / reference rows | audio | video]
    # of shape (tokens, width), with no batch dimension (the model refuses a batch above 1; ComfyUI never
    # batches its conds: each carries its own packed layout, which no other cond's equals). The model is
    # called with a list of latents [video, audio]. Its blocks take (h, t_emb, mod_segments, rope_freqs,
    # transformer_options=...) positionally, add their attention and MLP outputs into h in place, and are
    # told no block index; the loop applies ``patches_replace`` "dit" replacements by block index.
    # ``final_layer(h, t_emb, video_seg, audio_seg)`` reads both outputs from the one h. Fn's residual is
    # on the whole packed sequence: text, condition, audio and video tokens together.
    TransformerFamily(
        name="MiniMax H3 (ComfyUI native)",
        model="MiniMax H3",
        class_path="comfy.ldm.minimax.model.MiniMaxH3Model",
        block_lists=(BlockList("blocks", "Pattern_3", adds_in_place=True,
                               arguments=("t_emb", "mod_segments", "rope_freqs")),),
        check_forward_pattern=False,
        match_subclasses=False,
        loop_patches=("patches_replace.dit",),
        final_layer="final_layer",
        final_feature="x",
        final_output_forecast=False,
    ),
    # LTXV (LTX-Video 0.9.x, ComfyUI's ``LTXVModel``): one list of blocks that take the video tokens
    # first and the rest by keyword (``block(x, context=..., timestep=..., pe=..., ...)``), add into
    # them in place (``x += attn(...)``, ``x.addcmul_``) and return them; Fn's residual is on the video
    # tokens. The loop tells the blocks no index (it writes none into their options), and replaces
    # ``("double_block", i)`` through ``patches_replace["dit"]``. ``norm_out`` takes the last block's
    # output (the step's scale and shift come after it). LTX-2 (``LTXAVModel``) subclasses it with an
    # audio stream and a loop of its own: its own entry.
    TransformerFamily(
        name="LTXV (ComfyUI native)",
        model="LTXV",
        class_path="comfy.ldm.lightricks.model.LTXVModel",
        block_lists=(BlockList("transformer_blocks", "Pattern_3", adds_in_place=True),),
        check_forward_pattern=False,
        match_subclasses=False,
        loop_patches=("patches_replace.dit",),
        final_layer="norm_out",
        final_feature="input",   # a LayerNorm: ComfyUI's takes (*args, **kwargs), torch's names it ``input``
    ),
    # LTX-2 (audio + video, ComfyUI's ``LTXAVModel``): one list of blocks that take the pair (video tokens,
    # audio tokens) first, of two widths, and the rest by keyword (contexts, per-frame timesteps, rope of
    # each stream and of the cross-modal attention), update both in place (``addcmul_``) and return the
    # pair. cache-dit gets the pair as one tensor (``hidden_pair``): Fn's residual, the one it decides on
    # and the one a cached call adds, is on the video and the audio tokens together. The loop tells the
    # blocks no index, replaces ``("double_block", i)`` through ``patches_replace["dit"]`` and perturbs the
    # self-attention of the blocks in ``stg_self_attn_blocks`` (set by LTXV's STG guidance on its extra
    # call). Two final layers (video ``norm_out``, audio ``audio_norm_out``): no whole-call forecast.
    TransformerFamily(
        name="LTX-2 (ComfyUI native)",
        model="LTX-2",
        class_path="comfy.ldm.lightricks.av_model.LTXAVModel",
        block_lists=(BlockList("transformer_blocks", "Pattern_3", adds_in_place=True, hidden_pair=True),),
        check_forward_pattern=False,
        match_subclasses=False,
        loop_patches=("patches_replace.dit",),
        loop_options=("stg_self_attn_blocks",),
    ),
    # HunyuanVideo 1.0 and 1.5 (t2v, i2v, the super-resolution model) and HunyuanImage 2.1 (2D latents,
    # patch 1x1): one class whose ``forward_orig`` runs Flux's double-stream blocks on (img, txt) by
    # keyword, then Flux's single-stream blocks on cat(txt, img) with the image positional; both add
    # into their input in place. HunyuanVideo 1.5 has 54 double blocks and no single ones (its single
    # list is empty: no cache context, see ``ResolvedTransformer.block_lists``); 1.0 and Image 2.1 have
    # both. Variants differ in optional input modules (vision_in, byt5_in, cond_type_embedding,
    # time_r_in), not in the loop. The loop applies ``patches_replace`` dit blocks and
    # a ControlNet's ``control`` (a model-call keyword) by block index; ``final_layer`` is Flux's LastLayer.
    # ComfyUI has no subclass of it: one elsewhere may run a loop of its own.
    TransformerFamily(
        name="HunyuanVideo / HunyuanImage 2.1 (ComfyUI native)",
        model="HunyuanVideo",
        class_path="comfy.ldm.hunyuan_video.model.HunyuanVideo",
        block_lists=FLUX_STREAM_LISTS,
        check_forward_pattern=False,
        block_options_kwarg="transformer_options",
        match_subclasses=False,
        loop_patches=("patches_replace.dit", "control"),
        final_layer="final_layer",
        final_feature="x",
    ),
    # ERNIE-Image and ERNIE-Image-Turbo (one class): one list of blocks in ``layers`` on the joint (image, then text)
    # sequence, called as ``layer(hidden_states, rotary_pos_emb, temb)``, ``temb`` one list of six modulation tensors
    # that every block gets; Fn's residual is on the joint sequence. The loop tells the blocks no index and applies
    # no patches. ``final_norm(x, c)`` (a LayerNorm, then the step's scale and shift) reads the last block's output;
    # ``final_linear`` follows it, then the image tokens are cut out and folded into the latent. Those are affine in
    # ``final_norm``'s output, and the output forecast's weights add up to one (the ``auto`` plan's hold and linear
    # extrapolation), so forecasting that output forecasts the prediction: a held one is exactly a shorter run.
    TransformerFamily(
        name="ERNIE-Image (ComfyUI native)",
        model="ERNIE-Image",
        class_path="comfy.ldm.ernie.model.ErnieImageModel",
        block_lists=(BlockList("layers", "Pattern_3", arguments=("rotary_pos_emb", "temb")),),
        check_forward_pattern=False,
        match_subclasses=False,
        final_layer="final_norm",
        final_feature="x",
        forward_runs_wrappers=False,
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


FORECAST_SCOPE = NodeScope(
    node_name="Cache-DiT Forecast", families=tuple(f for f in SUPPORTED if f.final_layer),
    what="a transformer whose final layer this node knows",
    how_to_load=ANY_SCOPE.how_to_load)


@dataclasses.dataclass(frozen=True)
class ResolvedTransformer:
    """A supported transformer found inside a host model.

    Its block lists are read from the module once, when it is made: a run resolves its transformer once, before
    any method wraps or empties those lists, and every part of the run (the plan, the run, its contracts) reads
    the same lists from here.
    """

    family: TransformerFamily
    module: torch.nn.Module
    # The family's block lists that hold blocks on this module, in loop order: each is a cache context. A list
    # the model was built without (HunyuanVideo 1.5 has no single-stream blocks) runs nothing in the loop and
    # is no context.
    block_lists: tuple[BlockList, ...] = dataclasses.field(init=False, compare=False, repr=False)
    # The module's block lists themselves (those of ``block_lists``), in the order its loop runs them.
    block_modules: tuple[torch.nn.ModuleList, ...] = dataclasses.field(init=False, compare=False, repr=False)

    def __post_init__(self):
        lists = tuple(entry for entry in self.family.block_lists if len(getattr(self.module, entry.attr)))
        object.__setattr__(self, "block_lists", lists)
        object.__setattr__(self, "block_modules", tuple(getattr(self.module, entry.attr) for entry in lists))

    @property
    def num_blocks(self) -> int:
        """Blocks a call runs when computed in full (over all lists)."""
        return sum(len(blocks) for blocks in self.block_modules)

    @property
    def cacheable_blocks(self) -> int:
        """The blocks of the shortest list: Fn + Bn must leave blocks to cache in every list (0: no blocks)."""
        return min((len(blocks) for blocks in self.block_modules), default=0)


def loop_patches_in(family: TransformerFamily, transformer_options: dict, call_kwargs: dict | None = None) \
        -> list[str]:
    """The patches and options in a call that ``family``'s own block loop applies by block index.

    A path "group.name" is looked up in the call's transformer options; a plain name is a keyword
    argument of the model call itself (e.g. Flux's ControlNet ``control``); a ``loop_options`` name is
    a key of the transformer options.
    """
    found = [name for name in family.loop_options if transformer_options.get(name)]
    for path in family.loop_patches:
        if "." in path:
            group, name = path.split(".", 1)
            present = (transformer_options.get(group) or {}).get(name)
        else:
            present = (call_kwargs or {}).get(path)
        if present:
            found.append(path)
    return found


def skip_lists_in(family: TransformerFamily, module: torch.nn.Module) -> list[str]:
    """The family's skip lists that name blocks on ``module`` now (its loop would skip those blocks)."""
    return [name for name in family.skip_lists if getattr(module, name, None)]


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
