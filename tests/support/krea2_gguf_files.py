"""Small Krea-2 GGUF files, written with the ``gguf`` package the way users' files are laid out.

The layout follows city96's ComfyUI-GGUF conversion: tensors under their native names,
``general.architecture`` set, 1-D and tiny tensors (<= 1024 values) in F32, ``last.modulation.lin``
in F32, every other tensor in the file's type where its rows fit the type's blocks and in F16
otherwise (llama.cpp's quantizer falls back the same way). ``dequantized_state_dict`` gives
the values the file holds, decoded by the ``gguf`` package itself: the reference to sample
the safetensors loader with.
"""

from __future__ import annotations

import math

import numpy as np
import torch

F32_MAX_VALUES = 1024
HIGH_PRECISION = ("last.modulation.lin",)


def gguf_type(name: str):
    import gguf

    return gguf.GGMLQuantizationType[name]


def tensor_type(key: str, shape: tuple[int, ...], file_type: str, high_precision=HIGH_PRECISION,
                f32_max_values=F32_MAX_VALUES):
    """The GGML type a tensor gets in a file of ``file_type``."""
    import gguf

    if len(shape) <= 1 or math.prod(shape) <= f32_max_values or key in high_precision:
        return gguf.GGMLQuantizationType.F32
    target = gguf_type(file_type)
    block_size, _ = gguf.GGML_QUANT_SIZES[target]
    return target if shape[-1] % block_size == 0 else gguf.GGMLQuantizationType.F16


def encode(array: np.ndarray, quant_type) -> np.ndarray:
    import gguf

    if quant_type.name == "F64":  # a type GGUF has and diffusers does not read
        return array.astype(np.float64)
    if quant_type.name in ("Q4_K", "Q5_K"):
        return k_quantize(array, quant_type)
    return gguf.quants.quantize(array, quant_type)


def write_krea2_gguf(path, state_dict: dict[str, torch.Tensor], file_type: str, architecture: str = "krea2",
                     high_precision=HIGH_PRECISION, f32_max_values=F32_MAX_VALUES,
                     overrides: dict[str, str] | None = None) -> dict[str, str]:
    """Write ``state_dict`` (native Krea-2 keys) as a GGUF; returns each key's GGML type name.

    ``overrides`` gives chosen tensors another GGML type (by name).
    """
    import gguf

    writer = gguf.GGUFWriter(str(path), arch=architecture)
    writer.add_quantization_version(gguf.GGML_QUANT_VERSION)
    types = {}
    for key, tensor in state_dict.items():
        array = tensor.float().numpy()
        quant_type = tensor_type(key, array.shape, file_type, high_precision, f32_max_values)
        if key in (overrides or {}):
            quant_type = gguf_type(overrides[key])
        encoded = encode(array, quant_type)
        writer.add_tensor(key, encoded, raw_dtype=None if encoded.dtype == np.float64 else quant_type)
        types[key] = quant_type.name
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return types


def dequantized_state_dict(path) -> dict[str, torch.Tensor]:
    """Every tensor of a GGUF file as float32, decoded by the ``gguf`` package."""
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for tensor in reader.tensors:
        shape = tuple(int(n) for n in reversed(tensor.shape.tolist()))
        values = gguf.quants.dequantize(tensor.data, tensor.tensor_type)
        out[tensor.name] = torch.from_numpy(np.array(values, dtype=np.float32)).reshape(shape)
    return out


# --- K-quants --------------------------------------------------------------------------
# The gguf package decodes Q4_K and Q5_K but cannot encode them; this is a plain
# min/scale encoder in their block format (super-blocks of 256 values: fp16 d and dmin,
# 6-bit scales and mins for eight sub-blocks of 32, then the 4-bit quants, Q5_K with a
# fifth bit per value in qh).

QK_K = 256


def _pack_scales(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """Eight 6-bit scales and mins per block into the 12-byte layout the decoders read."""
    packed = np.zeros((scales.shape[0], 12), dtype=np.uint8)
    packed[:, 0:4] = (scales[:, 0:4] & 0x3F) | ((scales[:, 4:8] >> 4) << 6)
    packed[:, 4:8] = (mins[:, 0:4] & 0x3F) | ((mins[:, 4:8] >> 4) << 6)
    packed[:, 8:12] = (scales[:, 4:8] & 0x0F) | ((mins[:, 4:8] & 0x0F) << 4)
    return packed


def k_quantize(array: np.ndarray, quant_type) -> np.ndarray:
    bits = 5 if quant_type.name == "Q5_K" else 4
    levels = (1 << bits) - 1
    rows = array.reshape(-1, array.shape[-1])
    blocks = rows.reshape(-1, 8, 32).astype(np.float32)
    low = np.minimum(blocks.min(axis=2), 0.0)
    step = (blocks.max(axis=2) - low) / levels
    d = np.maximum(step.max(axis=1), 1e-12) / 63
    dmin = np.maximum((-low).max(axis=1), 1e-12) / 63
    d16, dmin16 = d.astype(np.float16), dmin.astype(np.float16)
    scales = np.clip(np.round(step / d16.astype(np.float32)[:, None]), 1, 63).astype(np.uint8)
    mins = np.clip(np.round(-low / dmin16.astype(np.float32)[:, None]), 0, 63).astype(np.uint8)
    real_scale = d16.astype(np.float32)[:, None, None] * scales[:, :, None]
    real_min = dmin16.astype(np.float32)[:, None, None] * mins[:, :, None]
    q = np.clip(np.round((blocks + real_min) / real_scale), 0, levels).astype(np.uint8)  # (n, 8, 32)

    # Quants come in four chunks of 64 values: sub-block 2j in the low nibbles, 2j+1 in the high ones.
    pairs = q.reshape(-1, 4, 2, 32)
    qs = ((pairs[:, :, 0] & 0x0F) | ((pairs[:, :, 1] & 0x0F) << 4)).reshape(-1, 128)
    head = np.concatenate([d16.view(np.uint8).reshape(-1, 2), dmin16.view(np.uint8).reshape(-1, 2),
                           _pack_scales(scales, mins)], axis=1)
    if bits == 4:
        out = np.concatenate([head, qs], axis=1)
    else:  # qh: bit j of byte i is the fifth bit of value i of sub-block j
        high = (q >> 4) & 1  # (n, 8, 32)
        qh = np.zeros((q.shape[0], 32), dtype=np.uint8)
        for sub in range(8):
            qh |= (high[:, sub, :] << sub).astype(np.uint8)
        out = np.concatenate([head, qh, qs], axis=1)
    return out.reshape(*array.shape[:-1], -1)
