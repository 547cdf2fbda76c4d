"""Load Krea-2 safetensors weights, in any plain layout, into diffusers' ``Krea2Transformer2DModel``.

Three layouts are read, all without a network:

- a diffusers folder: ``config.json`` + ``diffusion_pytorch_model*.safetensors`` (sharded
  with an index, or one file), either the transformer folder itself or a pipeline
  folder whose ``transformer/`` holds it;
- a single file with diffusers key names (``img_in.*``, ``transformer_blocks.N.*``, ...);
- a single file in the original key format that ComfyUI loads (``first.*``, ``blocks.N.*``,
  ``txtfusion.*``, ...), optionally prefixed ``model.diffusion_model.``.

Original-format names go through diffusers' own converter, one tensor at a time, so the
whole checkpoint is never held twice. Weights are read with safetensors' lazy
``safe_open`` and the mapping is closed every ``RELEASE_WINDOW_BYTES`` so that pages of
the file already copied do not stay resident. Key names, config and the checks while
filling the model are ``krea2_checkpoint``'s, shared with the GGUF loader. Nothing here
imports ComfyUI.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Iterator

import torch

from .krea2_checkpoint import (
    DIFFUSERS_MARKER,
    NATIVE_MARKER,
    Krea2LoadError,
    LinearFactory,
    QuantizedCheckpointError,
    Shard,
    TensorStream,
    build_checkpoint_transformer,
    build_empty_transformer,
    convert_native,
    detect_key_format,
    diffusers_names,
    fill_transformer,
    keeps_fp32,
    parameter_shapes,
    single_file_config,
)

KREA2_CLASS_NAME = "Krea2Transformer2DModel"
CONFIG_NAME = "config.json"

SAFETENSORS_DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}
QUANTIZED_DTYPES = {"F8_E4M3", "F8_E5M2", "F8_E8M0", "F4", "I8", "U8"}
# Key endings that only quantized checkpoints carry (ComfyUI's scaled fp8, int8 and nvfp4 formats).
QUANTIZATION_KEY_ENDINGS = ("weight_scale", "weight_scale_2", "input_scale", "scale_weight", "scale_input",
                            "comfy_quant", "scaled_fp8")

# Reopen the file after this many bytes: pages of a closed mapping leave resident memory.
RELEASE_WINDOW_BYTES = 16 << 20


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    shape: tuple[int, ...]
    dtype: str  # safetensors dtype name, e.g. "BF16"

    @property
    def nbytes(self) -> int:
        numel = 1
        for size in self.shape:
            numel *= size
        torch_dtype = SAFETENSORS_DTYPES.get(self.dtype)
        return numel * (torch_dtype.itemsize if torch_dtype is not None else 1)


@dataclasses.dataclass
class Krea2Checkpoint:
    """A readable Krea-2 checkpoint, inspected but not loaded."""

    path: Path
    layout: str                      # "native file", "diffusers file" or "diffusers folder"
    config: dict
    shards: list[Shard]

    @property
    def weight_bytes(self) -> int:
        return sum(info.nbytes for shard in self.shards for info in shard.infos.values())

    @property
    def stored_dtype(self) -> torch.dtype:
        """The dtype most of the weights are stored in (norm scales may differ)."""
        totals: dict[str, int] = {}
        for shard in self.shards:
            for info in shard.infos.values():
                totals[info.dtype] = totals.get(info.dtype, 0) + info.nbytes
        return SAFETENSORS_DTYPES[max(totals, key=totals.get)]


# --- reading headers -------------------------------------------------------------------

def read_header(path: Path) -> dict[str, TensorInfo]:
    """Tensor names, shapes and dtypes of a safetensors file, without reading its data."""
    from safetensors import safe_open

    path = Path(path)
    if path.suffix.lower() != ".safetensors":
        raise Krea2LoadError(
            f"{path.name}: only .safetensors checkpoints can be read safely; convert '{path.suffix}' "
            "files to safetensors first.")
    try:
        with safe_open(str(path), framework="pt") as handle:
            slices = {key: handle.get_slice(key) for key in handle.keys()}
            return {key: TensorInfo(tuple(piece.get_shape()), piece.get_dtype()) for key, piece in slices.items()}
    except Exception as error:  # safetensors raises its own error type for every kind of damage
        raise Krea2LoadError(
            f"{path}: not a readable safetensors file ({error}). The file is truncated or corrupt; "
            "download or export it again.") from None


def quantization_kind(infos: dict[str, TensorInfo]) -> str | None:
    """A short description of how a checkpoint is quantized, or None for plain weights."""
    for key in infos:
        if key.endswith(QUANTIZATION_KEY_ENDINGS):
            return f"it stores quantization scales such as '{key}'"
    for key, info in infos.items():
        if info.dtype in QUANTIZED_DTYPES:
            return f"'{key}' is stored as {info.dtype}"
    return None


def check_not_quantized(path: Path, infos: dict[str, TensorInfo]) -> None:
    kind = quantization_kind(infos)
    if kind is not None:
        raise QuantizedCheckpointError(
            f"{Path(path).name} is a quantized Krea-2 checkpoint ({kind}; e.g. *_fp8_scaled, *_int8_convrot, "
            "*_nvfp4). 'Load Krea-2 (diffusers)' reads plain bf16/fp16/fp32 weights only. Load this file with "
            "ComfyUI's 'Load Diffusion Model' node instead: its MODEL works with KSampler and Krea-2 Cache-DiT.")


# --- diffusers folders -----------------------------------------------------------------

def read_folder_config(folder: Path) -> dict | None:
    """The transformer ``config.json`` in ``folder``, or None when it has none."""
    path = Path(folder) / CONFIG_NAME
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise Krea2LoadError(f"{path}: unreadable config.json ({error}); restore it from the model's release.") from None


def transformer_folder(folder: Path) -> Path:
    """The folder holding the Krea-2 transformer: ``folder`` itself or its ``transformer/`` subfolder."""
    folder = Path(folder)
    for candidate in (folder, folder / "transformer"):
        config = read_folder_config(candidate)
        if config is None:
            continue
        class_name = config.get("_class_name")
        if class_name == KREA2_CLASS_NAME:
            return candidate
        raise Krea2LoadError(
            f"{candidate / CONFIG_NAME} describes a {class_name or 'model without _class_name'}, not a Krea-2 "
            f"transformer ({KREA2_CLASS_NAME}). Pick a Krea-2 model folder (the transformer folder or the "
            "pipeline folder that contains it).")
    raise Krea2LoadError(
        f"{folder}: no {CONFIG_NAME} here or in transformer/. A diffusers Krea-2 folder holds the transformer's "
        f"{CONFIG_NAME} and its diffusion_pytorch_model*.safetensors weights.")


def folder_weight_files(folder: Path) -> list[Path]:
    """The safetensors files of a diffusers transformer folder, from its index when it has one."""
    indexes = sorted(folder.glob("*.safetensors.index.json"))
    if indexes:
        try:
            weight_map = json.loads(indexes[0].read_text(encoding="utf-8"))["weight_map"]
        except (OSError, ValueError, KeyError) as error:
            raise Krea2LoadError(f"{indexes[0]}: unreadable shard index ({error}); download it again.") from None
        files = [folder / name for name in sorted(set(weight_map.values()))]
        missing = [path.name for path in files if not path.is_file()]
        if missing:
            raise Krea2LoadError(f"{folder}: shards listed in {indexes[0].name} are missing: {', '.join(missing)}. "
                                 "Finish downloading the model.")
        return files
    files = sorted(folder.glob("*.safetensors"))
    if not files:
        raise Krea2LoadError(f"{folder}: no .safetensors weights next to {CONFIG_NAME}; download the "
                             "diffusion_pytorch_model*.safetensors files too.")
    return files


# --- inspection ------------------------------------------------------------------------

# --- inspection ------------------------------------------------------------------------

def _not_krea2(path: Path, infos: dict[str, TensorInfo]) -> Krea2LoadError:
    sample = ", ".join(list(infos)[:3]) or "no tensors"
    return Krea2LoadError(
        f"{path} is not a Krea-2 transformer checkpoint (found {sample}, ...). Expected Krea-2 keys such as "
        f"'{NATIVE_MARKER}' (original format) or '{DIFFUSERS_MARKER}' (diffusers format).")


def inspect_file(path: Path) -> Krea2Checkpoint:
    """Check a single checkpoint file and derive its model config from the tensor shapes."""
    path = Path(path)
    infos = read_header(path)
    key_format = detect_key_format(infos)
    if key_format is None:
        raise _not_krea2(path, infos)
    check_not_quantized(path, infos)
    kind, prefix = key_format
    names = diffusers_names(infos, kind, prefix)  # other keys (e.g. a VAE in the same file) are ignored
    shard = Shard(path, names, {key: infos[key] for key in names}, kind == "native", prefix)
    return Krea2Checkpoint(path, f"{kind} file", single_file_config(shard, "export it again"), [shard])


def inspect_folder(folder: Path) -> Krea2Checkpoint:
    """Check a diffusers folder: its config and every shard's keys."""
    transformer_dir = transformer_folder(folder)
    config = read_folder_config(transformer_dir)
    shards = []
    for path in folder_weight_files(transformer_dir):
        infos = read_header(path)
        check_not_quantized(path, infos)
        shards.append(Shard(path, {key: key for key in infos}, infos, native=False, prefix=""))
    return Krea2Checkpoint(Path(folder), "diffusers folder", config, shards)


def inspect(path: Path) -> Krea2Checkpoint:
    path = Path(path)
    if path.is_dir():
        return inspect_folder(path)
    if not path.is_file():
        raise Krea2LoadError(f"{path}: no such file or folder.")
    return inspect_file(path)


# --- loading ---------------------------------------------------------------------------

def _window_keys(shard: Shard) -> Iterator[list[str]]:
    """The shard's keys in file order, grouped into windows of about ``RELEASE_WINDOW_BYTES``."""
    window, size = [], 0
    for key in shard.names:
        window.append(key)
        size += shard.infos[key].nbytes
        if size >= RELEASE_WINDOW_BYTES:
            yield window
            window, size = [], 0
    if window:
        yield window


def _owned_copy(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    # safetensors hands out views of its memory map; a copy lets the mapping (and its pages) go.
    return tensor.to(dtype=dtype, copy=True).contiguous()


def _stream_tensors(shard: Shard, dtype: torch.dtype | None) -> TensorStream:
    from safetensors import safe_open

    for window in _window_keys(shard):
        with safe_open(str(shard.path), framework="pt") as handle:
            for key in window:
                tensor = handle.get_tensor(key)
                name = shard.names[key]
                if shard.native:
                    name, tensor = convert_native(key[len(shard.prefix):], tensor)
                target = torch.float32 if keeps_fp32(name) else (dtype or tensor.dtype)
                yield name, _owned_copy(tensor, target)
                del tensor


def _stream_checkpoint(checkpoint: Krea2Checkpoint, dtype: torch.dtype | None) -> TensorStream:
    for shard in checkpoint.shards:
        yield from _stream_tensors(shard, dtype)


def load_transformer(checkpoint: Krea2Checkpoint, dtype: torch.dtype | None = None,
                     make_linear: LinearFactory | None = None):
    """Build the diffusers transformer and fill it tensor by tensor from the checkpoint.

    ``dtype`` None keeps each tensor as stored. Raises ``Krea2LoadError`` naming the file
    when a tensor is missing, unexpected or of the wrong shape; nothing stays loaded then.
    """
    model = build_checkpoint_transformer(checkpoint.path, checkpoint.config, make_linear)
    return fill_transformer(
        model, checkpoint.path, parameter_shapes(build_empty_transformer(checkpoint.config)),
        _stream_checkpoint(checkpoint, dtype),
        advice="The checkpoint is incomplete or its config.json does not match the weights; download it again.")
