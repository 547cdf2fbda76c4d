"""Seeded-random Krea-2 transformers for tests, demos and benchmarks.

No real Krea-2 weights are needed to exercise the pack: these helpers build a
state dict in the *original* (native) key format that ComfyUI's
``model_detection`` recognises (``first.*``, ``blocks.N.*``, ``txtfusion.*``,
...), and the matching diffusers ``Krea2Transformer2DModel`` config. The shapes
follow the reference model; only the sizes shrink.

ComfyUI derives the attention heads from ``features // 128`` and runs the text
fusion blocks with 20 heads, so ``features`` must be a multiple of 128 and
``txtdim`` a multiple of 20.
"""

from __future__ import annotations

import dataclasses
import math

import torch

from devkit.comfy_harness import load_pack

load_pack()  # the pack as ComfyUI imports it: its diffusers layout is the one to match

from krea2_cachedit.adapters.krea2_loader.krea2_checkpoint import (  # noqa: E402
    HEAD_DIM as NATIVE_HEAD_DIM, NORM_EPS, ROPE_THETA, TEXT_FUSION_HEADS, rope_axes)

MLP_MULTIPLIER = 4
TIMESTEP_DIM = 256
PATCH = 2


def swiglu_hidden_size(features: int, multiplier: int = MLP_MULTIPLIER, multiple: int = 128) -> int:
    """Hidden width of Krea-2's SwiGLU MLP (2/3 rule, rounded up to 128)."""
    hidden = int(2 * features / 3) * multiplier
    return multiple * ((hidden + multiple - 1) // multiple)


@dataclasses.dataclass(frozen=True)
class Krea2Shape:
    """The sizes that define a Krea-2 transformer. Defaults give a tiny model."""

    features: int = 256
    layers: int = 4
    heads: int = 2
    kvheads: int = 1
    txtdim: int = 40
    txtlayers: int = 3
    channels: int = 16

    def __post_init__(self):
        if self.features != self.heads * NATIVE_HEAD_DIM:
            raise ValueError(f"features must be heads*{NATIVE_HEAD_DIM}, got {self.features} with {self.heads} heads")
        if self.heads % self.kvheads:
            raise ValueError("heads must be a multiple of kvheads")
        if self.txtdim % TEXT_FUSION_HEADS:
            raise ValueError(f"txtdim must be a multiple of {TEXT_FUSION_HEADS}")

    @property
    def context_features(self) -> int:
        """Width of ComfyUI's flattened conditioning: ``txtlayers * txtdim``."""
        return self.txtlayers * self.txtdim

    def diffusers_config(self) -> dict:
        """The ``Krea2Transformer2DModel`` config for the same architecture."""
        return {
            "in_channels": self.channels * PATCH * PATCH,
            "num_layers": self.layers,
            "attention_head_dim": NATIVE_HEAD_DIM,
            "num_attention_heads": self.heads,
            "num_key_value_heads": self.kvheads,
            "intermediate_size": swiglu_hidden_size(self.features),
            "timestep_embed_dim": TIMESTEP_DIM,
            "text_hidden_dim": self.txtdim,
            "num_text_layers": self.txtlayers,
            "text_num_attention_heads": TEXT_FUSION_HEADS,
            "text_num_key_value_heads": TEXT_FUSION_HEADS,
            "text_intermediate_size": swiglu_hidden_size(self.txtdim),
            "num_layerwise_text_blocks": 2,
            "num_refiner_text_blocks": 2,
            "axes_dims_rope": rope_axes(NATIVE_HEAD_DIM),
            "rope_theta": ROPE_THETA,
            "norm_eps": NORM_EPS,
        }


# Full-size reference architecture (12.9B); used for GPU benchmarks with random weights.
FULL_SIZE = Krea2Shape(features=6144, layers=28, heads=48, kvheads=12, txtdim=2560, txtlayers=12)


def _attention_shapes(prefix: str, dim: int, heads: int, kvheads: int) -> dict:
    head_dim = dim // heads
    return {
        f"{prefix}.wq.weight": (head_dim * heads, dim),
        f"{prefix}.wk.weight": (head_dim * kvheads, dim),
        f"{prefix}.wv.weight": (head_dim * kvheads, dim),
        f"{prefix}.gate.weight": (dim, dim),
        f"{prefix}.qknorm.qnorm.scale": (head_dim,),
        f"{prefix}.qknorm.knorm.scale": (head_dim,),
        f"{prefix}.wo.weight": (dim, dim),
    }


def _block_shapes(prefix: str, dim: int, heads: int, kvheads: int) -> dict:
    hidden = swiglu_hidden_size(dim)
    shapes = {f"{prefix}.prenorm.scale": (dim,), f"{prefix}.postnorm.scale": (dim,)}
    shapes.update(_attention_shapes(f"{prefix}.attn", dim, heads, kvheads))
    shapes.update({
        f"{prefix}.mlp.gate.weight": (hidden, dim),
        f"{prefix}.mlp.up.weight": (hidden, dim),
        f"{prefix}.mlp.down.weight": (dim, hidden),
    })
    return shapes


def native_shapes(shape: Krea2Shape) -> dict[str, tuple[int, ...]]:
    """Every tensor of the native Krea-2 checkpoint format, with its shape."""
    f, t = shape.features, shape.txtdim
    out: dict[str, tuple[int, ...]] = {
        "first.weight": (f, shape.channels * PATCH * PATCH),
        "first.bias": (f,),
    }
    for i in range(shape.layers):
        out[f"blocks.{i}.mod.lin"] = (6 * f,)
        out.update(_block_shapes(f"blocks.{i}", f, shape.heads, shape.kvheads))
    out.update({
        "tmlp.0.weight": (f, TIMESTEP_DIM), "tmlp.0.bias": (f,),
        "tmlp.2.weight": (f, f), "tmlp.2.bias": (f,),
        "txtfusion.projector.weight": (1, shape.txtlayers),
    })
    for group in ("layerwise_blocks", "refiner_blocks"):
        for i in range(2):
            out.update(_block_shapes(f"txtfusion.{group}.{i}", t, TEXT_FUSION_HEADS, TEXT_FUSION_HEADS))
    out.update({
        "txtmlp.0.scale": (t,),
        "txtmlp.1.weight": (f, t), "txtmlp.1.bias": (f,),
        "txtmlp.3.weight": (f, f), "txtmlp.3.bias": (f,),
        "last.norm.scale": (f,),
        "last.linear.weight": (shape.channels * PATCH * PATCH, f),
        "last.linear.bias": (shape.channels * PATCH * PATCH,),
        "last.modulation.lin": (2, f),
        "tproj.1.weight": (6 * f, f), "tproj.1.bias": (6 * f,),
    })
    return out


def _init_tensor(name: str, size: tuple[int, ...], generator: torch.Generator) -> torch.Tensor:
    # Norm scales are zero-centred ("1 + scale"), so small noise keeps them near identity;
    # weights get fan-in scaling so activations stay O(1) through many random blocks.
    noise = torch.randn(size, generator=generator, device=generator.device)
    if name.endswith(".scale") or name.endswith("mod.lin") or name.endswith("modulation.lin"):
        return noise * 0.02
    if name.endswith(".bias"):
        return noise * 0.01
    fan_in = size[-1] if len(size) > 1 else 1
    return noise * (0.5 / fan_in ** 0.5)


def native_state_dict(shape: Krea2Shape, seed: int = 0, dtype: torch.dtype = torch.float32,
                      prefix: str = "") -> dict[str, torch.Tensor]:
    """A seeded-random Krea-2 checkpoint in the native key format."""
    generator = torch.Generator().manual_seed(seed)
    return {
        prefix + name: _init_tensor(name, size, generator).to(dtype)
        for name, size in native_shapes(shape).items()
    }


def save_native_checkpoint(path, shape: Krea2Shape, seed: int = 0, dtype: torch.dtype = torch.float32,
                           prefix: str = "") -> str:
    """Write a native-format checkpoint that ComfyUI's "Load Diffusion Model" reads."""
    from safetensors.torch import save_file

    save_file(native_state_dict(shape, seed, dtype, prefix), str(path))
    return str(path)


SAFETENSORS_DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16"}


def write_native_checkpoint(path, shape: Krea2Shape, seed: int = 0, dtype: torch.dtype = torch.bfloat16,
                            device: str = "cpu") -> int:
    """Write a native-format checkpoint tensor by tensor, without holding the model in memory.

    For the full 12.9B model (~26 GB in bf16): host memory holds one tensor at a time, and
    ``device="cuda"`` draws the random numbers on the GPU (a CPU draws some tens of millions per
    second and core, minutes for the full model). On the CPU the values equal
    ``native_state_dict(shape, seed, dtype)``. Returns the number of bytes written.
    """
    import json

    shapes = native_shapes(shape)
    element = torch.empty((), dtype=dtype).element_size()
    header, offset = {}, 0
    for name, size in shapes.items():
        nbytes = element * math.prod(size)
        header[name] = {"dtype": SAFETENSORS_DTYPES[dtype], "shape": list(size),
                        "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    encoded = json.dumps(header, separators=(",", ":")).encode()
    encoded += b" " * (-len(encoded) % 8)  # the format wants the data 8-byte aligned
    generator = torch.Generator(device=device).manual_seed(seed)
    with open(path, "wb") as file:
        file.write(len(encoded).to_bytes(8, "little"))
        file.write(encoded)
        for name, size in shapes.items():
            tensor = _init_tensor(name, size, generator).to(dtype).cpu()
            # safetensors stores raw little-endian bytes; an integer view of the same width gets them to numpy.
            file.write(tensor.view(torch.int16 if element == 2 else torch.int32).numpy().data)
    return 8 + len(encoded) + offset


def diffusers_transformer(shape: Krea2Shape, seed: int = 0, dtype: torch.dtype = torch.float32):
    """A diffusers ``Krea2Transformer2DModel`` holding the same weights as ``native_state_dict``."""
    from diffusers import Krea2Transformer2DModel
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    with torch.device("meta"):
        model = Krea2Transformer2DModel(**shape.diffusers_config())
    converted = convert_krea2_transformer_checkpoint_to_diffusers(native_state_dict(shape, seed, dtype))
    model.load_state_dict(converted, strict=True, assign=True)
    return model.eval()
