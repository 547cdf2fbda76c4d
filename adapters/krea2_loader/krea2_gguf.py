"""Load Krea-2 GGUF files into diffusers' ``Krea2Transformer2DModel``, quantized weights kept quantized.

The files users share follow the layout of city96's ComfyUI-GGUF tools: tensors under the
original (native) key names (``first.*``, ``blocks.N.*``, ``txtfusion.*``; diffusers names
are read too), ``general.architecture`` naming the model, Linear weights quantized
(Q8_0, Q5_K, Q4_K, ...) or F16/BF16, and 1-D tensors in F32. GGUF lists dimensions
innermost first; the shapes here are torch's.

Reading and dequantization are diffusers' own GGUF support (``GGUFParameter`` and its
dequantize kernels, on the ``gguf`` package's reader): a quantized Linear weight stays a
``GGUFParameter`` in a Linear layer that dequantizes it at use, as diffusers'
``GGUFLinear`` does, so the model holds the file's size. Every other tensor (biases, norm
scales, modulation tables) is dequantized once at load, whatever the file stored it in:
``last.modulation.lin`` is no Linear weight, and a file that quantized it still loads.
Key names, config and the checks while filling the model are ``krea2_checkpoint``'s,
shared with the safetensors loader. Nothing here imports ComfyUI.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Callable

import torch

from .krea2_checkpoint import (
    NATIVE_MARKER,
    Krea2LoadError,
    LinearFactory,
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

GGUF_SUFFIX = ".gguf"
ARCHITECTURE_FIELD = "general.architecture"
# What torch reads as it is; every other GGUF type is diffusers' GGUFParameter (BF16 included).
TORCH_TYPES = {"F32": torch.float32, "F16": torch.float16}

QuantizedLinearFactory = Callable[[int, int, bool, torch.dtype], torch.nn.Module]


@dataclasses.dataclass(frozen=True)
class GGUFTensorInfo:
    shape: tuple[int, ...]           # torch order (GGUF stores the reverse)
    type_name: str                   # GGML type, e.g. "Q8_0", "F32"


@dataclasses.dataclass
class GGUFCheckpoint:
    """A readable Krea-2 GGUF file, inspected but not loaded."""

    path: Path
    architecture: str | None         # the file's general.architecture
    config: dict
    infos: dict[str, GGUFTensorInfo]  # stored key -> shape and type
    names: dict[str, str]            # stored key -> diffusers parameter name
    native: bool                     # original key names: values go through diffusers' converter
    prefix: str
    layout: str = "gguf file"

    def quantized_linears(self, linear_names: set[str]) -> set[str]:
        """Names of the Linear layers whose weight the file stores quantized."""
        return {name[:-len(".weight")] for key, name in self.names.items()
                if name.endswith(".weight") and name[:-len(".weight")] in linear_names
                and self.infos[key].type_name not in TORCH_TYPES}


def is_gguf(path) -> bool:
    return Path(path).suffix.lower() == GGUF_SUFFIX


# --- reading ---------------------------------------------------------------------------

def open_reader(path: Path):
    """The ``gguf`` package's reader on ``path``; a damaged file is refused by name."""
    try:
        import gguf
    except ImportError:
        raise Krea2LoadError(f"{Path(path).name}: reading GGUF files needs the 'gguf' package; install the pack's "
                             "requirements (pip install -r requirements.txt) and restart ComfyUI.") from None
    try:
        reader = gguf.GGUFReader(str(path))
        for tensor in reader.tensors:  # a truncated file parses but its last tensors come up short
            if tensor.data.nbytes != int(tensor.n_bytes):
                raise ValueError(f"tensor '{tensor.name}' is cut off")
        return reader
    except Krea2LoadError:
        raise
    except Exception as error:  # the reader raises ValueError, struct and numpy errors for damage
        raise Krea2LoadError(
            f"{path}: not a readable GGUF file ({error}). The file is truncated or corrupt; download or convert "
            "it again.") from None


def read_architecture(reader) -> str | None:
    field = reader.get_field(ARCHITECTURE_FIELD)
    if field is None or not field.data:
        return None
    return bytes(field.parts[field.data[0]]).decode("utf-8", errors="replace")


def tensor_infos(reader) -> dict[str, GGUFTensorInfo]:
    import gguf

    return {tensor.name: GGUFTensorInfo(tuple(int(n) for n in reversed(tensor.shape.tolist())),
                                        gguf.GGMLQuantizationType(tensor.tensor_type).name)
            for tensor in reader.tensors}


def _not_krea2(path: Path, architecture: str | None, infos: dict) -> Krea2LoadError:
    sample = ", ".join(list(infos)[:3]) or "no tensors"
    arch = f"a '{architecture}' GGUF" if architecture else "a GGUF without general.architecture"
    return Krea2LoadError(
        f"{Path(path).name} is {arch}, not a Krea-2 transformer (found {sample}, ...). 'Load Krea-2 (diffusers)' "
        f"reads Krea-2 GGUFs (keys such as '{NATIVE_MARKER}'); pick a Krea-2 file, or load this model with a "
        "loader for its architecture (e.g. ComfyUI-GGUF's 'Unet Loader (GGUF)').")


def inspect_gguf(path: Path) -> GGUFCheckpoint:
    """Check a GGUF file's keys and derive the model config from its tensor shapes."""
    path = Path(path)
    reader = open_reader(path)
    architecture = read_architecture(reader)
    infos = tensor_infos(reader)
    key_format = detect_key_format(infos)
    if key_format is None:
        raise _not_krea2(path, architecture, infos)
    kind, prefix = key_format
    names = diffusers_names(infos, kind, prefix)
    check_types_supported(path, {key: infos[key] for key in names})
    shard = Shard(path, names, {key: infos[key] for key in names}, kind == "native", prefix)
    config = single_file_config(shard, "convert it again")
    return GGUFCheckpoint(path, architecture, config, shard.infos, names, kind == "native", prefix)


# --- tensors ---------------------------------------------------------------------------

def check_types_supported(path: Path, infos: dict[str, GGUFTensorInfo]) -> None:
    """Refuse a file holding a type that diffusers cannot dequantize, before anything is loaded."""
    from diffusers.quantizers.gguf.utils import SUPPORTED_GGUF_QUANT_TYPES

    supported = set(TORCH_TYPES) | {t.name for t in SUPPORTED_GGUF_QUANT_TYPES}
    for key, info in infos.items():
        if info.type_name not in supported:
            raise Krea2LoadError(
                f"{Path(path).name}: tensor '{key}' is stored as {info.type_name}, which diffusers cannot dequantize "
                f"(it reads {', '.join(sorted(supported))}); use a file of one of those quantizations.")


def read_tensor(tensor) -> torch.Tensor:
    """One GGUF tensor: a plain tensor for F32/F16, else diffusers' ``GGUFParameter`` of its bytes."""
    import gguf
    from diffusers.quantizers.gguf.utils import GGUFParameter

    quant_type = gguf.GGMLQuantizationType(tensor.tensor_type)
    data = torch.from_numpy(tensor.data.copy())  # a copy: the reader's memory map can then go
    if quant_type.name in TORCH_TYPES:
        return data
    return GGUFParameter(data, quant_type=quant_type)


def dequantize(tensor: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A GGUF tensor's values in ``dtype``, by diffusers' kernels (computed in ``dtype`` itself:
    diffusers' own helper multiplies in float16, one rounding more than fp32 needs)."""
    from diffusers.quantizers.gguf.utils import GGML_QUANT_SIZES, dequantize_functions

    quant_type = getattr(tensor, "quant_type", None)
    if quant_type is None:
        return tensor.to(dtype)
    block_size, type_size = GGML_QUANT_SIZES[quant_type]
    raw = tensor.as_tensor().view(torch.uint8)
    shape = (*raw.shape[:-1], raw.shape[-1] // type_size * block_size)
    blocks = raw.reshape(-1, type_size)
    return dequantize_functions[quant_type](blocks, block_size, type_size, dtype=dtype).reshape(shape).to(dtype)


def stored_shape(tensor: torch.Tensor) -> tuple[int, ...]:
    """The shape of the values a tensor holds: a quantized tensor's own shape is that of its bytes."""
    return tuple(tensor.quant_shape) if hasattr(tensor, "quant_type") else tuple(tensor.shape)


# --- building and loading --------------------------------------------------------------

def diffusers_gguf_linear(in_features: int, out_features: int, bias: bool, compute_dtype: torch.dtype):
    """diffusers' own ``GGUFLinear``: dequantizes its weight at every call."""
    from diffusers.quantizers.gguf.utils import GGUFLinear

    return GGUFLinear(in_features, out_features, bias, compute_dtype=compute_dtype)


def _swap_quantized_linears(model: torch.nn.Module, names: set[str], make: QuantizedLinearFactory,
                            compute_dtype: torch.dtype) -> None:
    for name in names:
        parent_name, _, child_name = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, child_name)
        with torch.device("meta"):
            new = make(old.in_features, old.out_features, old.bias is not None, compute_dtype)
        setattr(parent, child_name, new.requires_grad_(False))


def _converted(checkpoint: GGUFCheckpoint, key: str, value: torch.Tensor) -> tuple[str, torch.Tensor]:
    if checkpoint.native:
        return convert_native(key[len(checkpoint.prefix):], value)
    return checkpoint.names[key], value


def load_gguf_transformer(checkpoint: GGUFCheckpoint, compute_dtype: torch.dtype,
                          make_linear: LinearFactory | None = None,
                          make_quantized_linear: QuantizedLinearFactory | None = None):
    """Build the diffusers transformer and fill it from the GGUF file.

    Linear layers with a quantized weight come from ``make_quantized_linear`` (default:
    diffusers' ``GGUFLinear``) and keep it quantized; the others from ``make_linear``.
    Plain tensors are held in ``compute_dtype`` (norm scales in fp32). Raises
    ``Krea2LoadError`` naming the file when a tensor is missing, unexpected or misshapen.
    """
    model = build_checkpoint_transformer(checkpoint.path, checkpoint.config, make_linear)
    reference = build_empty_transformer(checkpoint.config)
    linear_names = {name for name, module in reference.named_modules() if isinstance(module, torch.nn.Linear)}
    quantized = checkpoint.quantized_linears(linear_names)
    _swap_quantized_linears(model, quantized, make_quantized_linear or diffusers_gguf_linear, compute_dtype)
    return fill_transformer(model, checkpoint.path, parameter_shapes(reference),
                            _stream_tensors(checkpoint, quantized, compute_dtype),
                            advice="The file is incomplete; convert or download it again.", shape_of=stored_shape)


def _stream_tensors(checkpoint: GGUFCheckpoint, quantized: set[str], compute_dtype: torch.dtype) -> TensorStream:
    # The reader lives in here: when fill_transformer closes the stream, the file's memory map goes too.
    reader = open_reader(checkpoint.path)
    for tensor in reader.tensors:
        if tensor.name in checkpoint.names:
            yield _load_one(checkpoint, tensor, quantized, compute_dtype)


def _load_one(checkpoint: GGUFCheckpoint, tensor, quantized: set[str], compute_dtype: torch.dtype):
    value = read_tensor(tensor)
    name = checkpoint.names[tensor.name]
    if name.endswith(".weight") and name[:-len(".weight")] in quantized:
        return name, value  # stays quantized; the layer dequantizes it at use
    target = torch.float32 if keeps_fp32(name) else compute_dtype
    # Dequantized before conversion: the converter reshapes modulation tables by their real shape.
    value = dequantize(value, torch.float32).to(target) if hasattr(value, "quant_type") else value.to(target)
    return _converted(checkpoint, tensor.name, value.contiguous())
