"""The "Load Krea-2 (diffusers)" node: a thin shell around the loader adapters
(``krea2_listing`` for its list, ``krea2_checkpoint`` for its weight dtypes)."""

from __future__ import annotations

import os

import folder_paths
from comfy_api.latest import io

from ..adapters.krea2_loader import krea2_checkpoint, krea2_gguf, krea2_listing
from .input_checks import JsonValue, describe
from .plain_errors import plain_errors

FILE_FOLDER = "diffusion_models"
DIFFUSERS_FOLDER = "diffusers"


def list_model_names() -> list[str]:
    """Krea-2 files (safetensors and GGUF) in 'diffusion_models' and Krea-2 diffusers folders in 'diffusers'."""
    files = [(name, folder_paths.get_full_path(FILE_FOLDER, name))
             for name in folder_paths.get_filename_list(FILE_FOLDER)]
    files = [(name, path) for name, path in files if path] + gguf_files()
    return krea2_listing.krea2_files(files) + krea2_listing.krea2_folders(
        folder_paths.get_folder_paths(DIFFUSERS_FOLDER))


def gguf_files() -> list[tuple[str, str]]:
    """``(name, full path)`` of the .gguf files in 'diffusion_models', which ComfyUI's own list leaves out."""
    found = []
    for root in folder_paths.get_folder_paths(FILE_FOLDER):
        if os.path.isdir(root):
            names, _ = folder_paths.recursive_search(root)
            found += [(name, os.path.join(root, name))
                      for name in folder_paths.filter_files_extensions(names, [krea2_gguf.GGUF_SUFFIX])]
    return sorted(found)


def resolve_model_path(model_name: str) -> str | None:
    """The file or folder that ``model_name`` names, or None."""
    path = folder_paths.get_full_path(FILE_FOLDER, model_name)
    if path:
        return path
    for root in folder_paths.get_folder_paths(DIFFUSERS_FOLDER):
        candidate = os.path.join(root, os.path.normpath(model_name))
        # Stay inside the diffusers folder (never the folder itself: an empty name) even for names that a
        # hand-edited workflow supplies.
        root_path, path = os.path.abspath(root), os.path.abspath(candidate)
        inside = os.path.commonpath([root_path, path]) == root_path and path != root_path
        if inside and os.path.isdir(candidate):
            return candidate
    return None


class Krea2DiffusersLoader(io.ComfyNode):
    @classmethod
    def define_schema(cls) -> io.Schema:
        return io.Schema(
            node_id="Krea2DiffusersLoader",
            display_name="Load Krea-2 (diffusers)",
            category="model/loaders/Krea-2",
            description=("Loads Krea-2 weights (diffusers folder, single file, original format or GGUF) into "
                         "diffusers' Krea2Transformer2DModel and hands it to ComfyUI as a MODEL."),
            inputs=[
                io.Combo.Input("model_name", options=list_model_names(), tooltip=(
                    "A Krea-2 file from models/diffusion_models (safetensors or GGUF) or a diffusers folder from "
                    "models/diffusers. For fp8/int8/nvfp4 files use 'Load Diffusion Model'.")),
                io.Combo.Input("weight_dtype", options=list(krea2_checkpoint.WEIGHT_DTYPES), default="default",
                               tooltip=("Precision of the weights: 'default' keeps them as stored. A GGUF stays "
                                        "quantized and computes in this precision.")),
            ],
            outputs=[io.Model.Output(tooltip=(
                "The Krea-2 model, for KSampler, LoRA loaders and the Cache-DiT nodes. Use it with CLIPLoader type "
                "'krea2' and the VAE qwen_image_vae.safetensors, as Comfy-Org's Krea-2 files do."))],
        )

    @classmethod
    def validate_inputs(cls, model_name: str) -> bool | str:
        # Any file or folder is accepted, not only the listed ones, so that a workflow naming a
        # damaged or foreign file gets the loader's diagnosis instead of "value not in list".
        if model_name is None:
            return True   # linked: its value comes at run time
        expected = f"model_name must be a Krea-2 file in models/{FILE_FOLDER} or a folder in models/{DIFFUSERS_FOLDER}"
        if not isinstance(model_name, str) or isinstance(model_name, JsonValue):
            return f"{expected} (got {describe(model_name)})."
        if resolve_model_path(model_name) is None:
            return f"{expected} ('{model_name}' is neither)."
        return True

    @classmethod
    def execute(cls, model_name: str, weight_dtype: str) -> io.NodeOutput:
        from .diffusers_model import load_krea2_diffusers

        with plain_errors():
            return io.NodeOutput(load_krea2_diffusers(resolve_model_path(model_name), weight_dtype))
