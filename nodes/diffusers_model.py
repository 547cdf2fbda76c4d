"""ComfyUI's side of the diffusers Krea-2 loader.

The MODEL it builds is ComfyUI's native Krea-2 model (``comfy.model_base.Krea2``: latent
format, flow sampling with Krea-2's shift, conditioning layout) whose diffusion model is a
thin module around diffusers' ``Krea2Transformer2DModel``. That module speaks the native
``SingleStreamDiT`` call convention, including ComfyUI's DIFFUSION_MODEL wrappers, and
holds the diffusers model as its direct child ``transformer`` (where the Cache-DiT node
looks for it). Linear layers are ComfyUI's ops so model management can offload them and
LoRAs patch them; patches addressed by native key names are translated.
"""

from __future__ import annotations

import types

import comfy.ldm.common_dit
import comfy.ldm.krea2.model
import comfy.lora
import comfy.model_base
import comfy.model_management
import comfy.model_patcher
import comfy.ops
import comfy.patcher_extension
import comfy.supported_models
import comfy.utils
import torch
from einops import rearrange

from ..adapters.krea2_loader import krea2_checkpoint, krea2_diffusers, krea2_gguf
from . import gguf_model

PATCH = 2
DIFFUSION_MODEL_PREFIX = "diffusion_model."
TRANSFORMER_PREFIX = DIFFUSION_MODEL_PREFIX + "transformer."


class Krea2DiffusersTransformer(torch.nn.Module):
    """Runs diffusers' Krea-2 transformer with the arguments ComfyUI gives native Krea-2."""

    def __init__(self, transformer: torch.nn.Module, dtype: torch.dtype):
        super().__init__()
        self.transformer = transformer
        self.dtype = dtype  # BaseModel.get_dtype() reads this, as on the native model
        config = transformer.config
        self.channels = config.in_channels // (PATCH * PATCH)
        self.txtlayers = config.num_text_layers
        self.txtdim = config.text_hidden_dim

    def forward(self, x, timesteps, context, attention_mask=None, ref_latents=None, transformer_options={}, **kwargs):
        # Same executor and argument order as SingleStreamDiT.forward, so DIFFUSION_MODEL wrappers
        # (EasyCache, Krea-2 Cache-DiT, ...) find transformer_options last in args.
        return comfy.patcher_extension.WrapperExecutor.new_class_executor(
            self._forward,
            self,
            comfy.patcher_extension.get_all_wrappers(comfy.patcher_extension.WrappersMP.DIFFUSION_MODEL,
                                                     transformer_options),
        ).execute(x, timesteps, context, attention_mask, ref_latents, transformer_options, **kwargs)

    def _forward(self, x, timesteps, context, attention_mask=None, ref_latents=None, transformer_options={}, **kwargs):
        # attention_mask is accepted and ignored, exactly like native Krea-2 (its text is never padded).
        temporal = x.ndim == 5
        if temporal:
            b5, c5, t5, h5, w5 = x.shape
            x = x.reshape(b5 * t5, c5, h5, w5)
        batch, _, h_orig, w_orig = x.shape

        img, img_ids, h, w = self._patchify(x, index=0)
        img_tokens = img.shape[1]
        img, img_ids = self._append_references(img, img_ids, ref_latents, batch, kwargs.get("ref_latents_method"))

        text = self._unpack_context(context)
        text_ids = torch.zeros(text.shape[1], 3, device=img_ids.device, dtype=img_ids.dtype)
        position_ids = torch.cat((text_ids, img_ids), dim=0)  # text at 0, image at (index, h, w)

        out = self.transformer(hidden_states=img, encoder_hidden_states=text, timestep=timesteps,
                               position_ids=position_ids, return_dict=False)[0]
        out = rearrange(out[:, :img_tokens], "b (h w) (c ph pw) -> b c (h ph) (w pw)",
                        h=h, w=w, ph=PATCH, pw=PATCH, c=self.channels)
        out = out[:, :, :h_orig, :w_orig]  # crop the patch padding back off
        if temporal:
            out = out.reshape(b5, t5, self.channels, h_orig, w_orig).movedim(1, 2)
        return out

    def _patchify(self, x, index):
        x = comfy.ldm.common_dit.pad_to_patch_size(x, (PATCH, PATCH))
        h, w = x.shape[-2] // PATCH, x.shape[-1] // PATCH
        img = rearrange(x, "b c (h ph) (w pw) -> b (h w) (c ph pw)", ph=PATCH, pw=PATCH)
        ids = torch.zeros(h, w, 3, device=x.device, dtype=torch.float32)
        ids[..., 0] = index
        ids[..., 1] = torch.arange(h, device=x.device, dtype=torch.float32)[:, None]
        ids[..., 2] = torch.arange(w, device=x.device, dtype=torch.float32)[None, :]
        return img, ids.reshape(h * w, 3), h, w

    def _append_references(self, img, img_ids, ref_latents, batch, method):
        # Native Krea-2 uses reference latents only when a reference method is set (edit workflows).
        if method is None or not ref_latents:
            return img, img_ids
        if method == "index_timestep_zero":
            raise ValueError("Reference method 'index_timestep_zero' needs per-token timesteps, which diffusers' "
                             "Krea-2 transformer does not have; load the model with 'Load Diffusion Model' instead.")
        tokens, ids = [img], [img_ids]
        for index, ref in enumerate(ref_latents, 1):
            if ref.ndim == 5:
                rb, rc, rt, rh, rw = ref.shape
                ref = ref.reshape(rb * rt, rc, rh, rw)
            ref_img, ref_ids, _, _ = self._patchify(comfy.utils.repeat_to_batch_size(ref, batch), index)
            tokens.append(ref_img)
            ids.append(ref_ids)
        return torch.cat(tokens, dim=1), torch.cat(ids, dim=0)

    def _unpack_context(self, context):
        batch, seq, fused = context.shape
        if fused != self.txtlayers * self.txtdim:
            raise ValueError(
                f"Krea-2 expects conditioning with {self.txtlayers}x{self.txtdim}={self.txtlayers * self.txtdim} "
                f"features (a {self.txtlayers}-layer Qwen3-VL stack) but got {fused}. "
                "Load the text encoder with CLIPLoader type 'krea2'.")
        return context.reshape(batch, seq, self.txtlayers, self.txtdim)


def native_unet_config(config: dict) -> dict:
    """ComfyUI's Krea-2 ``unet_config`` for a diffusers config (what model_detection would find)."""
    return {
        "image_model": "krea2",
        "features": config["attention_head_dim"] * config["num_attention_heads"],
        "channels": config["in_channels"] // (PATCH * PATCH),
        "patch": PATCH,
        "layers": config["num_layers"],
        "heads": config["num_attention_heads"],
        "kvheads": config["num_key_value_heads"],
        "txtlayers": config["num_text_layers"],
        "txtdim": config["text_hidden_dim"],
        # The diffusers transformer replaces SingleStreamDiT: BaseModel must not build one.
        "disable_unet_model_creation": True,
    }


def native_key_translation(unet_config: dict) -> dict[str, str]:
    """Native model key -> key of the same weight in this MODEL, e.g.
    ``diffusion_model.blocks.0.attn.wq.weight`` -> ``diffusion_model.transformer.transformer_blocks.0.attn.to_q.weight``.

    Native names come from ComfyUI's own SingleStreamDiT (built without storage) and go
    through diffusers' converter. Tensors the converter reshapes (modulation tables) are
    left out: a patch made for the native shape cannot apply to them.
    """
    plain_ops = types.SimpleNamespace(Linear=torch.nn.Linear)
    settings = {k: v for k, v in unet_config.items() if k != "disable_unet_model_creation"}
    native = comfy.ldm.krea2.model.SingleStreamDiT(**settings, device="meta", operations=plain_ops)
    translation = {}
    for name, tensor in native.state_dict().items():
        diffusers_name, converted = krea2_checkpoint.convert_native(name, tensor)
        if converted.shape == tensor.shape:
            translation[DIFFUSION_MODEL_PREFIX + name] = TRANSFORMER_PREFIX + diffusers_name
    return translation


class Krea2DiffusersModel(comfy.model_base.Krea2):
    """Native Krea-2 BaseModel whose diffusion model is the diffusers transformer."""

    def __init__(self, model_config, diffusion_model: Krea2DiffusersTransformer, device=None):
        super().__init__(model_config, device=device)
        self.diffusion_model = diffusion_model
        comfy.model_management.archive_model_dtypes(self.diffusion_model)
        self.native_keys = native_key_translation(model_config.unet_config)

    def extend_lora_key_map(self, key_map: dict) -> dict:
        """Point LoRA names made for native Krea-2 at the diffusers weights.

        ``comfy.lora`` maps native-format names from the model's own keys and diffusers-format
        names onto native keys; both end up here on this model's real keys.
        """
        for lora_name, target in list(key_map.items()):
            if isinstance(target, str) and target in self.native_keys:
                key_map[lora_name] = self.native_keys[target]
        for native_key, model_key in self.native_keys.items():
            bare = native_key[len(DIFFUSION_MODEL_PREFIX):]
            if bare.endswith(".weight"):
                stem = bare[:-len(".weight")]
                key_map["lora_unet_{}".format(stem.replace(".", "_"))] = model_key
                key_map[DIFFUSION_MODEL_PREFIX + stem] = model_key
            else:
                key_map[native_key] = model_key
        return key_map


class Krea2DiffusersPatcher(comfy.model_patcher.ModelPatcher):
    """A ModelPatcher for the diffusers transformer.

    It also accepts patches addressed by native Krea-2 key names (model merges with a
    native Krea-2, hand-made key patches), and places the weights that ModelPatcher
    leaves where they are: parameters of non-leaf modules (the blocks' modulation tables)
    and of modules it cannot cast on the fly (norm scales). Native Krea-2 casts those to
    the input's device at every use; diffusers' modules expect them in place.
    """

    def load(self, device_to=None, lowvram_model_memory=0, force_patch_weights=False, full_load=False):
        super().load(device_to, lowvram_model_memory=lowvram_model_memory,
                     force_patch_weights=force_patch_weights, full_load=full_load)
        if device_to is not None:
            place_uncastable_weights(self.model.diffusion_model, torch.device(device_to))

    def add_patches(self, patches, strength_patch=1.0, strength_model=1.0):
        native_keys = getattr(self.model, "native_keys", {})
        translated, original_of = {}, {}
        for key, patch in patches.items():
            new_key = _translate_patch_key(key, native_keys)
            translated[new_key] = patch
            original_of[new_key] = key
        added = super().add_patches(translated, strength_patch, strength_model)
        return [original_of.get(key, key) for key in added]


class Krea2GGUFPatcher(gguf_model.GGUFPatching, Krea2DiffusersPatcher):
    """The patcher of a model loaded from a GGUF file: its quantized weights are patched at use."""


def place_uncastable_weights(module: torch.nn.Module, device: torch.device) -> None:
    """Move every parameter that ComfyUI's ops cannot cast at use time onto ``device`` (a few MB)."""
    for submodule in module.modules():
        if hasattr(submodule, "comfy_cast_weights"):
            continue
        for name, param in submodule.named_parameters(recurse=False):
            if param.device != device:
                setattr(submodule, name, torch.nn.Parameter(param.data.to(device), requires_grad=False))


def _translate_patch_key(key, native_keys):
    if isinstance(key, str):
        return native_keys.get(key, key)
    return (native_keys.get(key[0], key[0]),) + tuple(key[1:])


def install_lora_key_hook() -> None:
    """Let ``comfy.lora.model_lora_keys_unet`` ask our model for its extra LoRA names.

    ComfyUI maps LoRA names from a model's own parameter names; native-format LoRAs
    name native parameters, which this MODEL stores under diffusers names. The hook only
    touches models that define ``extend_lora_key_map``; it is installed once.
    """
    original = comfy.lora.model_lora_keys_unet
    if getattr(original, "krea2_diffusers_hook", False):
        return

    def model_lora_keys_unet(model, key_map={}):
        key_map = original(model, key_map)
        extend = getattr(model, "extend_lora_key_map", None)
        return extend(key_map) if callable(extend) else key_map

    model_lora_keys_unet.krea2_diffusers_hook = True
    comfy.lora.model_lora_keys_unet = model_lora_keys_unet


def _comfy_linear_factory(operations, dtype):
    def make_linear(in_features: int, out_features: int, bias: bool) -> torch.nn.Module:
        return operations.Linear(in_features, out_features, bias=bias, dtype=dtype)
    return make_linear


def load_krea2_diffusers(path, weight_dtype: str = "default", disable_dynamic: bool = False):
    """A ModelPatcher around the diffusers Krea-2 transformer loaded from ``path`` (file, folder or GGUF)."""
    install_lora_key_hook()
    if krea2_gguf.is_gguf(path):
        checkpoint = krea2_gguf.inspect_gguf(path)
    else:
        checkpoint = krea2_diffusers.inspect(path)
    load_device = comfy.model_management.get_torch_device()
    offload_device = comfy.model_management.unet_offload_device()
    model_config = comfy.supported_models.Krea2(native_unet_config(checkpoint.config))
    unet_dtype = krea2_checkpoint.WEIGHT_DTYPES[weight_dtype] or _default_dtype(checkpoint, model_config, load_device)
    manual_cast_dtype = comfy.model_management.unet_manual_cast(
        unet_dtype, load_device, model_config.supported_inference_dtypes)
    try:
        model_config.set_inference_dtype(unet_dtype, manual_cast_dtype, device=load_device)
    except TypeError:  # ComfyUI before 0.28 takes no device here
        model_config.set_inference_dtype(unet_dtype, manual_cast_dtype)
    operations = comfy.ops.pick_operations(unet_dtype, manual_cast_dtype, load_device=load_device)

    make_linear = _comfy_linear_factory(operations, unet_dtype)
    if isinstance(checkpoint, krea2_gguf.GGUFCheckpoint):
        transformer = krea2_gguf.load_gguf_transformer(
            checkpoint, unet_dtype, make_linear, gguf_model.quantized_linear_factory(operations))
        patcher_class = Krea2GGUFPatcher
    else:
        transformer = krea2_diffusers.load_transformer(checkpoint, krea2_checkpoint.WEIGHT_DTYPES[weight_dtype],
                                                       make_linear)
        patcher_class = Krea2DiffusersPatcher
    model = Krea2DiffusersModel(model_config, Krea2DiffusersTransformer(transformer, unet_dtype))
    patcher = patcher_class(model, load_device=load_device, offload_device=offload_device)
    if not comfy.model_management.is_device_cpu(offload_device):
        model.to(offload_device)
    patcher.cached_patcher_init = (load_krea2_diffusers, (str(path), weight_dtype))
    return patcher


def _default_dtype(checkpoint, model_config, load_device) -> torch.dtype:
    """'default' keeps plain weights as stored; a GGUF computes in what ComfyUI picks for the device."""
    if isinstance(checkpoint, krea2_gguf.GGUFCheckpoint):
        return comfy.model_management.unet_dtype(device=load_device,
                                                 supported_dtypes=model_config.supported_inference_dtypes)
    return checkpoint.stored_dtype
