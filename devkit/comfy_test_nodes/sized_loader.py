"""``Krea2TestSizedUNETLoader``: a diffusion model that ComfyUI detects at one size only, at the size its file says.

ComfyUI 0.33 detects ERNIE-Image from its keys but builds it at its full 8B config whatever the file holds; it
detects Z-Image, Qwen-Image and Chroma only at their real width (a narrow Z-Image reads as Lumina 2). This node
builds a model the way ``UNETLoader`` does (``comfy.sd.load_diffusion_model_state_dict``): the model config ComfyUI
detects, ``get_model``, a ``ModelPatcher``, the weights loaded into it; only the detected unet config is updated
from the file's metadata (``UNET_CONFIG_KEY``, a JSON object the test checkpoint carries), and where the metadata
names one (``MODEL_CONFIG_KEY``), the model config is that class of ``comfy.supported_models`` built from it. It
registers itself as the model's ``cached_patcher_init``, as ComfyUI's loaders do, so multi-GPU clones load the same
file again.
"""

import json

import folder_paths

UNET_CONFIG_KEY = "krea2_test_unet_config"
MODEL_CONFIG_KEY = "krea2_test_model_config"


def load_sized_diffusion_model(unet_path: str):
    import comfy.model_detection
    import comfy.model_management as management
    import comfy.model_patcher
    import comfy.utils

    state, metadata = comfy.utils.load_torch_file(unet_path, return_metadata=True)
    config = comfy.model_detection.model_config_from_unet(state, "", metadata=metadata)
    if config is None or UNET_CONFIG_KEY not in (metadata or {}):
        raise ValueError(f"{unet_path}: not a model ComfyUI detects with its size in the metadata's "
                         f"{UNET_CONFIG_KEY!r}")
    config.unet_config.update(json.loads(metadata[UNET_CONFIG_KEY]))
    if MODEL_CONFIG_KEY in metadata:
        import comfy.supported_models

        named = getattr(comfy.supported_models, metadata[MODEL_CONFIG_KEY])(config.unet_config)
        named.quant_config = getattr(config, "quant_config", None)   # mixed-precision layers, as detected
        config = named
    load_device, offload_device = management.get_torch_device(), management.unet_offload_device()
    dtype = management.unet_dtype(model_params=comfy.utils.calculate_parameters(state),
                                  supported_dtypes=list(config.supported_inference_dtypes),
                                  weight_dtype=comfy.utils.weight_dtype(state))
    config.set_inference_dtype(dtype, management.unet_manual_cast(dtype, load_device, config.supported_inference_dtypes),
                               device=load_device)
    model = config.get_model(state, "")
    patcher = comfy.model_patcher.CoreModelPatcher(model, load_device=load_device, offload_device=offload_device)
    if not management.is_device_cpu(offload_device):
        model.to(offload_device)
    model.load_model_weights(state, "", assign=patcher.is_dynamic())
    patcher.cached_patcher_init = (load_sized_diffusion_model, (unet_path,))
    return patcher


class Krea2TestSizedUNETLoader:
    CATEGORY = "Krea-2/testing"
    RETURN_TYPES = ("MODEL",)
    FUNCTION = "load"

    @classmethod
    def INPUT_TYPES(cls):
        return {"required": {"unet_name": (folder_paths.get_filename_list("diffusion_models"),)}}

    def load(self, unet_name):
        return (load_sized_diffusion_model(folder_paths.get_full_path_or_raise("diffusion_models", unet_name)),)


NODE_CLASS_MAPPINGS = {"Krea2TestSizedUNETLoader": Krea2TestSizedUNETLoader}
