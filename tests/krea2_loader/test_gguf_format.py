"""Krea-2 GGUF files read into diffusers' transformer (no ComfyUI).

Files are written with the ``gguf`` package in city96's layout (``krea2_gguf_files``); each
load is compared with the values the ``gguf`` package itself decodes from the file.
"""

from __future__ import annotations

import collections

import pytest
import torch

from krea2_cachedit.adapters.krea2_loader import krea2_checkpoint as kc
from krea2_cachedit.adapters.krea2_loader import krea2_diffusers as kd
from krea2_cachedit.adapters.krea2_loader import krea2_gguf as kg
from krea2_cachedit.adapters.krea2_loader import krea2_listing as kl
from krea2_gguf_files import dequantized_state_dict, write_krea2_gguf
from devkit.krea2_synthetic import Krea2Shape, native_state_dict

SHAPE = Krea2Shape()  # rows of 256 and 768: every block and K-quant type applies
SEED = 3
FILE_TYPES = ["F16", "Q8_0", "Q4_0", "Q5_K", "Q4_K"]


def write(path, file_type, **kwargs):
    types = write_krea2_gguf(path, native_state_dict(SHAPE, SEED), file_type, **kwargs)
    return path, types


def reference_weights(path) -> dict[str, torch.Tensor]:
    """The file's values (decoded by the gguf package) under diffusers' names and shapes."""
    from diffusers.loaders.single_file_utils import convert_krea2_transformer_checkpoint_to_diffusers

    return convert_krea2_transformer_checkpoint_to_diffusers(dequantized_state_dict(path))


def weights_of(model) -> dict[str, torch.Tensor]:
    return {name: kg.dequantize(param, torch.float32) for name, param in model.named_parameters()}


def forward(model, img=None, sigma=0.7):
    """One transformer call on a 4 x 4 latent (``img``: its 16 tokens, else seeded noise) with seeded text."""
    generator = torch.Generator().manual_seed(0)
    tokens, text = 16, 5
    noise = torch.randn(1, tokens, SHAPE.channels * 4, generator=generator)
    txt = torch.randn(1, text, SHAPE.txtlayers, SHAPE.txtdim, generator=generator)
    ids = torch.zeros(text + tokens, 3)
    ids[text:, 1] = torch.arange(tokens) // 4
    ids[text:, 2] = torch.arange(tokens) % 4
    with torch.no_grad():
        return model(hidden_states=noise if img is None else img, encoder_hidden_states=txt,
                     timestep=torch.full((1,), float(sigma)), position_ids=ids, return_dict=False)[0]


@pytest.mark.parametrize("file_type", FILE_TYPES)
def test_gguf_loads_the_values_the_file_holds(tmp_path, file_type):
    path, types = write(tmp_path / f"krea2-{file_type}.gguf", file_type)
    checkpoint = kg.inspect_gguf(path)
    assert checkpoint.architecture == "krea2" and checkpoint.config == kd.inspect_file(
        _safetensors(tmp_path)).config
    model = kg.load_gguf_transformer(checkpoint, torch.float32)
    reference = reference_weights(path)
    loaded = weights_of(model)
    assert set(loaded) == set(reference)
    for name, value in reference.items():
        torch.testing.assert_close(loaded[name], value, rtol=0, atol=0, msg=name)
    if file_type != "F16":
        quantized = [name for name, p in model.named_parameters() if hasattr(p, "quant_type")]
        assert quantized and all(name.endswith(".weight") for name in quantized)
        assert collections.Counter(checkpoint.infos[key].type_name for key in checkpoint.names)[file_type] == len(quantized)
    assert types["last.modulation.lin"] == "F32" and types["blocks.0.mod.lin"] == "F32"


def _safetensors(tmp_path):
    from safetensors.torch import save_file

    path = tmp_path / "plain.safetensors"
    save_file(native_state_dict(SHAPE, SEED), str(path))
    return path


@pytest.mark.parametrize("file_type", ["Q8_0", "Q4_K"])
def test_quantized_model_computes_what_its_dequantized_weights_compute(tmp_path, file_type):
    """With diffusers' own GGUFLinear layers (the loader's default outside ComfyUI)."""
    from diffusers import Krea2Transformer2DModel

    path, _ = write(tmp_path / f"krea2-{file_type}.gguf", file_type)
    model = kg.load_gguf_transformer(kg.inspect_gguf(path), torch.float32)
    plain = Krea2Transformer2DModel(**SHAPE.diffusers_config()).eval()
    plain.load_state_dict(reference_weights(path))
    ours, theirs = forward(model), forward(plain)
    assert ours.dtype == torch.float32
    # diffusers' GGUFLinear dequantizes in float16 (scale * quant rounded once more); no more apart than that.
    torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-3)
    # The quantized model holds the file's bytes, not float weights.
    quantized_bytes = sum(p.numel() for p in model.parameters() if hasattr(p, "quant_type"))
    assert quantized_bytes < sum(p.numel() * 4 for p in plain.parameters()) / 3


def test_modulation_tables_stored_quantized_still_load(tmp_path):
    """A file that quantized every 2-D tensor, last.modulation.lin included (stock conversion at real size)."""
    path, types = write(tmp_path / "all-quantized.gguf", "Q8_0", high_precision=(), f32_max_values=0)
    assert types["last.modulation.lin"] == "Q8_0"
    model = kg.load_gguf_transformer(kg.inspect_gguf(path), torch.float32)
    table = model.final_layer.scale_shift_table
    assert not hasattr(table, "quant_type") and table.dtype == torch.float32
    torch.testing.assert_close(table, reference_weights(path)["final_layer.scale_shift_table"], rtol=0, atol=0)


def test_compute_dtype_casts_plain_tensors_and_keeps_norms_fp32(tmp_path):
    path, _ = write(tmp_path / "q8.gguf", "Q8_0")
    model = kg.load_gguf_transformer(kg.inspect_gguf(path), torch.bfloat16)
    assert model.text_fusion.layerwise_blocks[0].attn.to_q.weight.dtype == torch.bfloat16  # F16: 40-wide rows
    assert model.transformer_blocks[0].norm1.weight.dtype == torch.float32
    assert model.transformer_blocks[0].attn.to_q.weight.quant_type.name == "Q8_0"


def test_gguf_is_listed_as_a_candidate(tmp_path):
    path, _ = write(tmp_path / "krea2-Q8_0.gguf", "Q8_0")
    assert kl.is_krea2_candidate(path)
    assert kl.krea2_files([("krea2-Q8_0.gguf", str(path))]) == ["krea2-Q8_0.gguf"]


# --- bad input -------------------------------------------------------------------------

def test_gguf_of_another_architecture_is_named_and_explained(tmp_path):
    path = tmp_path / "flux1-dev-Q8_0.gguf"
    write_krea2_gguf(path, {"double_blocks.0.img_attn.qkv.weight": torch.zeros(64, 64)}, "Q8_0", architecture="flux")
    with pytest.raises(kc.Krea2LoadError) as error:
        kg.inspect_gguf(path)
    message = str(error.value)
    assert "flux1-dev-Q8_0.gguf is a 'flux' GGUF, not a Krea-2 transformer" in message
    assert "double_blocks.0.img_attn.qkv.weight" in message and "'Unet Loader (GGUF)'" in message
    assert not kl.is_krea2_candidate(path)


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_damaged_gguf_is_reported(tmp_path, damage):
    path, _ = write(tmp_path / "krea2.gguf", "Q8_0")
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) * 2 // 3] if damage == "truncated" else b"GGUF" + bytes(range(256)) * 8)
    with pytest.raises(kc.Krea2LoadError,
                       match="not a readable GGUF file .* truncated or corrupt; download or convert"):
        kg.inspect_gguf(path)
    assert not kl.is_krea2_candidate(path)



def test_type_diffusers_cannot_dequantize_is_refused_before_loading(tmp_path):
    path, types = write(tmp_path / "krea2-odd.gguf", "Q8_0", overrides={"blocks.1.attn.wq.weight": "F64"})
    assert types["blocks.1.attn.wq.weight"] == "F64"
    with pytest.raises(kc.Krea2LoadError, match=r"krea2-odd.gguf: tensor 'blocks.1.attn.wq.weight' is stored as "
                                                r"F64, which diffusers cannot dequantize .*BF16.*Q8_0"):
        kg.inspect_gguf(path)


def test_cached_steps_dequantize_only_the_blocks_they_compute(tmp_path):
    """A step that Cache-DiT serves from its cache skips the quantized blocks' dequantization."""
    from krea2_cachedit.adapters.families import registry
    from krea2_cachedit.adapters.dbcache.cache_run import CacheRun
    from krea2_cachedit.adapters.dbcache.settings import DBCacheSettings, plan_run
    from krea2_cachedit.adapters.sampling.step_clock import StepClock

    path, _ = write(tmp_path / "krea2-Q8_0.gguf", "Q8_0")
    model = kg.load_gguf_transformer(kg.inspect_gguf(path), torch.float32)
    dequantized: list[str] = []
    for name, module in model.named_modules():
        if hasattr(getattr(module, "weight", None), "quant_type") and name.startswith("transformer_blocks."):
            module.register_forward_pre_hook(lambda module, args, name=name: dequantized.append(name))
    steps, sigmas = 8, torch.linspace(1.0, 0.0, 9)
    target, clock = registry.resolve(model), StepClock(sigmas)
    per_step = []
    node = "Krea-2 Cache-DiT"
    with CacheRun(target, plan_run(DBCacheSettings(steps_mask="fast"), clock.steps, target.num_blocks, node), clock,
                  conds_per_step=1, node_name=node) as run:
        x = torch.randn(1, 16, SHAPE.channels * 4, generator=torch.Generator().manual_seed(0))
        for i in range(steps):
            dequantized.clear()
            with run.model_call(sigmas[i], [0], [x.shape]):
                out = forward(model, x, sigmas[i])
            x = x + (sigmas[i + 1] - sigmas[i]) * out
            per_step.append({name.split(".")[1] for name in dequantized})
    assert [call.step for call in run.observation.calls if call.skipped] == [3, 5, 6]
    every_block = {str(block) for block in range(SHAPE.layers)}
    assert per_step == [{"0"} if step in (3, 5, 6) else every_block for step in range(steps)]
