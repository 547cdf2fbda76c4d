"""What every Krea-2 checkpoint loader shares, whatever file format it reads.

- how a Krea-2 transformer's keys look (original "native" names or diffusers names, and
  the prefixes they may carry), and their conversion to diffusers names;
- the ``Krea2Transformer2DModel`` config that the tensor shapes describe;
- the empty (meta-device) model, and ``fill_transformer``: the one place where loaded
  tensors are checked against the model, stored, checked for completeness and, on any
  failure, released again;
- the errors a loader raises.

The format readers (``krea2_diffusers`` for safetensors, ``krea2_gguf`` for GGUF) build on
this module and not on each other. Nothing here imports ComfyUI.
"""

from __future__ import annotations

import contextlib
import dataclasses
from pathlib import Path
from typing import Any, Callable, Generator

import torch

NATIVE_MARKER = "txtfusion.projector.weight"
DIFFUSERS_MARKER = "text_fusion.projector.weight"
# Checked longest first: "model.diffusion_model." also ends with "diffusion_model.".
NATIVE_PREFIXES = ("model.diffusion_model.", "diffusion_model.", "")
DIFFUSERS_PREFIXES = ("transformer.", "")

# Native Krea-2 fixes these; the shapes of a checkpoint cannot tell them (ComfyUI assumes the same).
HEAD_DIM = 128
TEXT_FUSION_HEADS = 20
ROPE_THETA = 1000.0
NORM_EPS = 1e-5

WEIGHT_DTYPES: dict[str, torch.dtype | None] = {
    "default": None, "bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

LinearFactory = Callable[[int, int, bool], torch.nn.Module]
TensorStream = Generator[tuple[str, torch.Tensor], None, None]


class Krea2LoadError(ValueError):
    """A checkpoint that this loader cannot read; the message says which file and what to do."""


class QuantizedCheckpointError(Krea2LoadError):
    """A quantized Krea-2 checkpoint: ComfyUI's own loader reads these."""


@dataclasses.dataclass
class Shard:
    """One checkpoint file and how its keys map onto the diffusers model."""

    path: Path
    names: dict[str, str]            # stored key -> diffusers parameter name
    infos: dict[str, Any]            # stored key -> the format's tensor info; each has a torch-order .shape
    native: bool                     # original key format: values go through diffusers' converter
    prefix: str                      # stripped from stored keys before conversion


# --- key names -------------------------------------------------------------------------

def detect_key_format(keys) -> tuple[str, str] | None:
    """``("native" | "diffusers", prefix)`` for a Krea-2 transformer's keys, or None."""
    keys = set(keys)
    for prefix in NATIVE_PREFIXES:
        if prefix + NATIVE_MARKER in keys and prefix + "first.weight" in keys:
            return "native", prefix
    for prefix in DIFFUSERS_PREFIXES:
        if prefix + DIFFUSERS_MARKER in keys and prefix + "img_in.weight" in keys:
            return "diffusers", prefix
    return None


def convert_native(key: str, tensor: torch.Tensor) -> tuple[str, torch.Tensor]:
    """One original-format tensor under its diffusers name, via diffusers' own converter."""
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    ((name, value),) = convert_krea2_transformer_checkpoint_to_diffusers({key: tensor}).items()
    return name, value


def diffusers_names(infos: dict, key_format: str, prefix: str) -> dict[str, str]:
    """Stored key -> diffusers parameter name, for the keys that belong to the transformer."""
    names = {}
    for key, info in infos.items():
        if not key.startswith(prefix):
            continue
        bare = key[len(prefix):]
        if key_format == "native":
            bare, _ = convert_native(bare, torch.empty(info.shape, device="meta"))
        names[key] = bare
    return names


def diffusers_shapes(shards: list[Shard]) -> dict[str, tuple[int, ...]]:
    """Diffusers parameter name -> shape, as the model will hold it."""
    shapes = {}
    for shard in shards:
        for key, name in shard.names.items():
            shape = shard.infos[key].shape
            if shard.native:
                _, converted = convert_native(key[len(shard.prefix):], torch.empty(shape, device="meta"))
                shape = tuple(converted.shape)
            shapes[name] = shape
    return shapes


# --- configuration ---------------------------------------------------------------------

def _count_indexed(shapes: dict, prefix: str) -> int:
    indices = {name[len(prefix):].split(".", 1)[0] for name in shapes if name.startswith(prefix)}
    return len({int(index) for index in indices if index.isdigit()})


def rope_axes(head_dim: int) -> tuple[int, int, int]:
    """ComfyUI's native split of a head across the (t, h, w) rotary axes."""
    spatial = 6 * (head_dim // 16)
    return (head_dim - 2 * spatial, spatial, spatial)


def config_from_shapes(shapes: dict[str, tuple[int, ...]]) -> dict:
    """The ``Krea2Transformer2DModel`` config that a checkpoint's diffusers-named shapes describe."""
    try:
        hidden, in_channels = shapes["img_in.weight"]
        text_dim = shapes["text_fusion.layerwise_blocks.0.norm1.weight"][0]
        config = {
            "in_channels": in_channels,
            "num_layers": _count_indexed(shapes, "transformer_blocks."),
            "attention_head_dim": HEAD_DIM,
            "num_attention_heads": shapes["transformer_blocks.0.attn.to_q.weight"][0] // HEAD_DIM,
            "num_key_value_heads": shapes["transformer_blocks.0.attn.to_k.weight"][0] // HEAD_DIM,
            "intermediate_size": shapes["transformer_blocks.0.ff.gate.weight"][0],
            "timestep_embed_dim": shapes["time_embed.linear_1.weight"][1],
            "text_hidden_dim": text_dim,
            "num_text_layers": shapes["text_fusion.projector.weight"][1],
            "text_num_attention_heads": TEXT_FUSION_HEADS,
            "text_num_key_value_heads":
                shapes["text_fusion.layerwise_blocks.0.attn.to_k.weight"][0] // (text_dim // TEXT_FUSION_HEADS),
            "text_intermediate_size": shapes["text_fusion.layerwise_blocks.0.ff.gate.weight"][0],
            "num_layerwise_text_blocks": _count_indexed(shapes, "text_fusion.layerwise_blocks."),
            "num_refiner_text_blocks": _count_indexed(shapes, "text_fusion.refiner_blocks."),
            "axes_dims_rope": rope_axes(HEAD_DIM),
            "rope_theta": ROPE_THETA,
            "norm_eps": NORM_EPS,
        }
    except (KeyError, ValueError) as error:
        raise Krea2LoadError(f"the checkpoint lacks a Krea-2 tensor the config is derived from ({error})") from None
    if hidden != config["num_attention_heads"] * HEAD_DIM:
        raise Krea2LoadError(f"transformer width {hidden} is not a multiple of the {HEAD_DIM}-wide attention heads")
    return config


def single_file_config(shard: Shard, redo: str) -> dict:
    """The config of a one-file checkpoint; a file whose shapes describe none is refused by name.

    ``redo`` says how to get a complete file again (export, convert, ...).
    """
    try:
        return config_from_shapes(diffusers_shapes([shard]))
    except Krea2LoadError as error:
        raise Krea2LoadError(
            f"{shard.path}: {error}. The file looks like Krea-2 but is incomplete; {redo}.") from None


# --- the empty model -------------------------------------------------------------------

def build_empty_transformer(config: dict, make_linear: LinearFactory | None = None):
    """A ``Krea2Transformer2DModel`` with no storage (meta device), optionally with custom Linear layers.

    ``make_linear(in_features, out_features, bias)`` lets a host swap in Linear layers it can
    offload and patch (ComfyUI's ops); parameter names stay diffusers' own.
    """
    from diffusers import Krea2Transformer2DModel

    with torch.device("meta"):
        model = Krea2Transformer2DModel.from_config(config)
        if make_linear is not None:
            _replace_linears(model, make_linear)
    return model.eval().requires_grad_(False)


def _replace_linears(model: torch.nn.Module, make_linear: LinearFactory) -> None:
    for parent in list(model.modules()):
        for child_name, child in list(parent.named_children()):
            if type(child) is torch.nn.Linear:
                setattr(parent, child_name, make_linear(child.in_features, child.out_features, child.bias is not None))


def build_checkpoint_transformer(path: Path, config: dict, make_linear: LinearFactory | None = None):
    """``build_empty_transformer`` for the checkpoint at ``path``; a config that builds no model names the file."""
    try:
        return build_empty_transformer(config, make_linear)
    except (TypeError, ValueError) as error:
        raise Krea2LoadError(f"{path}: its Krea-2 config cannot build a model ({error}).") from None


def parameter_shapes(model: torch.nn.Module) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape: what a checkpoint must supply to fill ``model``."""
    return {name: tuple(param.shape) for name, param in model.named_parameters()}


def keeps_fp32(name: str) -> bool:
    """Norm scales stay in fp32, as diffusers keeps them and as native Krea-2 computes with them."""
    from diffusers import Krea2Transformer2DModel

    parts = name.split(".")
    return any(module in parts for module in Krea2Transformer2DModel._keep_in_fp32_modules)


# --- filling it ------------------------------------------------------------------------

def fill_transformer(model: torch.nn.Module, path: Path, expected: dict[str, tuple[int, ...]],
                     tensors: TensorStream, advice: str,
                     shape_of: Callable[[torch.Tensor], tuple[int, ...]] = lambda tensor: tuple(tensor.shape)):
    """Store each ``(diffusers name, tensor)`` of ``tensors`` in ``model`` and return it.

    Every tensor is checked against ``expected`` (by ``shape_of``: a quantized tensor's
    stored shape is not its real one) and the model must end up complete; ``advice``
    tells the user what to do about missing tensors. On any failure the loaded weights
    are dropped again, and the stream is closed either way so that its file is let go.
    """
    loaded: set[str] = set()
    try:
        with contextlib.closing(tensors):
            for name, tensor in tensors:
                check_tensor(path, name, shape_of(tensor), expected)
                set_parameter(model, name, tensor)
                loaded.add(name)
                del tensor
        check_complete(path, expected, loaded, advice)
    except BaseException:
        release(model)
        raise
    return model


def check_tensor(path: Path, name: str, shape: tuple[int, ...], expected: dict) -> None:
    if name not in expected:
        raise Krea2LoadError(f"{path}: unexpected tensor '{name}' for a Krea-2 transformer; the file mixes in "
                             "another model's weights or does not match its config.json.")
    if shape != expected[name]:
        raise Krea2LoadError(f"{path}: tensor '{name}' has shape {list(shape)} but the Krea-2 config expects "
                             f"{list(expected[name])}; config.json and weights belong to different models.")


def check_complete(path: Path, expected: dict, loaded: set[str], advice: str) -> None:
    missing = sorted(set(expected) - loaded)
    if missing:
        raise Krea2LoadError(f"{path}: {len(missing)} Krea-2 tensors are missing (e.g. {', '.join(missing[:3])}). "
                             f"{advice}")


def set_parameter(model: torch.nn.Module, name: str, tensor: torch.Tensor) -> None:
    module_path, _, leaf = name.rpartition(".")
    if not isinstance(tensor, torch.nn.Parameter):  # a GGUFParameter is one; wrapping it would drop quant_type
        tensor = torch.nn.Parameter(tensor, requires_grad=False)
    setattr(model.get_submodule(module_path), leaf, tensor)


def release(model: torch.nn.Module) -> None:
    """Drop every loaded weight of a model whose loading failed."""
    for module in model.modules():
        for name, param in list(module.named_parameters(recurse=False)):
            setattr(module, name, torch.nn.Parameter(torch.empty(param.shape, device="meta"), requires_grad=False))
