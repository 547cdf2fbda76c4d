"""Format detection, config derivation and loading of Krea-2 checkpoints into diffusers (no ComfyUI).

Every layout is generated from the same seeded weights, so each load is compared with the
reference ``synthetic.diffusers_transformer`` tensor by tensor.
"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from krea2_cachedit.adapters.krea2_loader import krea2_checkpoint as kc
from krea2_cachedit.adapters.krea2_loader import krea2_diffusers as kd
from krea2_cachedit.adapters.krea2_loader import krea2_listing as kl
from devkit.krea2_synthetic import Krea2Shape, diffusers_transformer, native_state_dict

# Not the default shape: every derived config field differs from diffusers' defaults and the tiny default.
ODD_SHAPE = Krea2Shape(features=384, layers=3, heads=3, kvheads=1, txtdim=60, txtlayers=2)
SEED = 5


def diffusers_state_dict(shape: Krea2Shape, seed: int = SEED) -> dict[str, torch.Tensor]:
    return {name: tensor.contiguous() for name, tensor in diffusers_transformer(shape, seed).state_dict().items()}


def write_native(path, shape=ODD_SHAPE, prefix="", seed=SEED):
    save_file(native_state_dict(shape, seed, prefix=prefix), str(path))
    return path


def write_diffusers_file(path, shape=ODD_SHAPE, prefix="", seed=SEED):
    save_file({prefix + k: v for k, v in diffusers_state_dict(shape, seed).items()}, str(path))
    return path


def write_diffusers_folder(folder, shape=ODD_SHAPE, seed=SEED, shard_size="1MB"):
    diffusers_transformer(shape, seed).save_pretrained(str(folder), max_shard_size=shard_size)
    return folder


def assert_same_weights(model, shape=ODD_SHAPE, seed=SEED):
    reference = diffusers_state_dict(shape, seed)
    loaded = model.state_dict()
    assert set(loaded) == set(reference)
    for name, tensor in reference.items():
        assert torch.equal(loaded[name].float(), tensor.float()), name


# --- detection and config --------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", "model.diffusion_model.", "diffusion_model."])
def test_native_keys_are_detected_with_any_prefix(prefix):
    keys = {prefix + key for key in native_state_dict(Krea2Shape())}
    assert kc.detect_key_format(keys) == ("native", prefix)


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_diffusers_keys_are_detected(prefix):
    keys = {prefix + key for key in diffusers_state_dict(Krea2Shape())}
    assert kc.detect_key_format(keys) == ("diffusers", prefix)


def test_other_models_are_not_detected():
    assert kc.detect_key_format({"double_blocks.0.img_attn.qkv.weight", "img_in.weight"}) is None


@pytest.mark.parametrize("writer", [write_native, write_diffusers_file])
def test_config_is_derived_from_tensor_shapes(tmp_path, writer):
    checkpoint = kd.inspect(writer(tmp_path / "model.safetensors"))
    expected = dict(ODD_SHAPE.diffusers_config(), axes_dims_rope=(32, 48, 48))
    assert checkpoint.config == expected


def test_rope_axes_follow_comfyui_native_split():
    assert kc.rope_axes(128) == (32, 48, 48)
    assert sum(kc.rope_axes(256)) == 256


def test_native_names_go_through_diffusers_converter():
    name, tensor = kc.convert_native("blocks.2.mod.lin", torch.zeros(6 * 384))
    assert name == "transformer_blocks.2.scale_shift_table" and tensor.shape == (6, 384)
    assert kc.convert_native("blocks.0.attn.wq.weight", torch.zeros(1))[0] == "transformer_blocks.0.attn.to_q.weight"


# --- loading every layout ----------------------------------------------------------------

@pytest.mark.parametrize("prefix", ["", "model.diffusion_model."])
def test_native_file_loads_the_same_weights(tmp_path, prefix):
    checkpoint = kd.inspect(write_native(tmp_path / "native.safetensors", prefix=prefix))
    assert checkpoint.layout == "native file"
    assert_same_weights(kd.load_transformer(checkpoint))


@pytest.mark.parametrize("prefix", ["", "transformer."])
def test_diffusers_file_loads_the_same_weights(tmp_path, prefix):
    checkpoint = kd.inspect(write_diffusers_file(tmp_path / "diffusers.safetensors", prefix=prefix))
    assert checkpoint.layout == "diffusers file"
    assert_same_weights(kd.load_transformer(checkpoint))


def test_sharded_folder_loads_from_its_index(tmp_path):
    folder = write_diffusers_folder(tmp_path / "krea2")
    assert len(list(folder.glob("*.safetensors"))) > 1 and list(folder.glob("*.index.json"))
    checkpoint = kd.inspect(folder)
    assert checkpoint.layout == "diffusers folder" and len(checkpoint.shards) > 1
    assert_same_weights(kd.load_transformer(checkpoint))


def test_pipeline_folder_uses_its_transformer_subfolder(tmp_path):
    write_diffusers_folder(tmp_path / "pipeline" / "transformer", shard_size="100MB")
    (tmp_path / "pipeline" / "model_index.json").write_text(json.dumps({"_class_name": "Krea2Pipeline"}))
    assert_same_weights(kd.load_transformer(kd.inspect(tmp_path / "pipeline")))


def test_weight_dtype_casts_weights_but_keeps_norms_fp32(tmp_path):
    checkpoint = kd.inspect(write_native(tmp_path / "native.safetensors"))
    model = kd.load_transformer(checkpoint, torch.bfloat16)
    assert model.transformer_blocks[0].attn.to_q.weight.dtype == torch.bfloat16
    assert model.transformer_blocks[0].scale_shift_table.dtype == torch.bfloat16
    assert model.transformer_blocks[0].norm1.weight.dtype == torch.float32
    assert model.transformer_blocks[0].attn.norm_q.weight.dtype == torch.float32
    assert checkpoint.stored_dtype == torch.float32


def test_loaded_weights_do_not_alias_the_file(tmp_path):
    """Weights own their memory: safetensors hands out views of a private memory map of the file, through which
    the file's later contents show (a page is copied only when written). After loading, the file is no longer
    mapped, and overwriting its tensor bytes in place changes no weight."""
    path = write_native(tmp_path / "native.safetensors")
    model = kd.load_transformer(kd.inspect(path))
    gc.collect()
    maps = Path("/proc/self/maps")
    if maps.exists():
        assert str(path) not in maps.read_text(), "the checkpoint is still mapped into memory after loading"
    header_end = 8 + int.from_bytes(path.read_bytes()[:8], "little")
    with open(path, "r+b") as file:   # the same file (inode), every tensor byte zeroed
        file.seek(header_end)
        file.write(bytes(path.stat().st_size - header_end))
    assert_same_weights(model)


def test_custom_linear_factory_keeps_parameter_names(tmp_path):
    class TaggedLinear(torch.nn.Linear):
        pass

    def make_linear(in_features, out_features, bias):
        return TaggedLinear(in_features, out_features, bias=bias)

    model = kd.load_transformer(kd.inspect(write_native(tmp_path / "n.safetensors")), make_linear=make_linear)
    assert isinstance(model.transformer_blocks[0].attn.to_out[0], TaggedLinear)
    assert isinstance(model.img_in, TaggedLinear)
    assert_same_weights(model)


# --- quantized and bad input ---------------------------------------------------------------

def test_scaled_fp8_file_points_to_comfyui_loader(tmp_path):
    weights = native_state_dict(Krea2Shape())
    weights["blocks.0.attn.wq.weight"] = weights["blocks.0.attn.wq.weight"].to(torch.float8_e4m3fn)
    weights["blocks.0.attn.wq.weight_scale"] = torch.tensor(1.0)
    path = tmp_path / "krea2_fp8_scaled.safetensors"
    save_file(weights, str(path))
    with pytest.raises(kc.QuantizedCheckpointError, match="Load Diffusion Model") as error:
        kd.inspect(path)
    assert "krea2_fp8_scaled.safetensors" in str(error.value) and "weight_scale" in str(error.value)


def test_int8_weights_without_scale_keys_are_still_quantized(tmp_path):
    weights = native_state_dict(Krea2Shape())
    weights["blocks.1.mlp.up.weight"] = weights["blocks.1.mlp.up.weight"].to(torch.int8)
    save_file(weights, str(tmp_path / "krea2_int8.safetensors"))
    with pytest.raises(kc.QuantizedCheckpointError, match="I8"):
        kd.inspect(tmp_path / "krea2_int8.safetensors")


def test_file_of_another_model_is_named_and_explained(tmp_path):
    save_file({"double_blocks.0.img_attn.qkv.weight": torch.zeros(4, 4)}, str(tmp_path / "flux.safetensors"))
    with pytest.raises(kc.Krea2LoadError, match="flux.safetensors is not a Krea-2 transformer") as error:
        kd.inspect(tmp_path / "flux.safetensors")
    assert "txtfusion.projector.weight" in str(error.value)


def test_truncated_file_is_reported(tmp_path):
    data = write_native(tmp_path / "full.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(kc.Krea2LoadError, match=r"cut\.safetensors.*truncated or corrupt"):
        kd.inspect(tmp_path / "cut.safetensors")


def test_non_safetensors_file_is_refused(tmp_path):
    (tmp_path / "model.ckpt").write_bytes(b"\x80\x02}q\x00.")
    with pytest.raises(kc.Krea2LoadError, match="only .safetensors"):
        kd.inspect(tmp_path / "model.ckpt")


def test_folder_with_another_models_config_is_reported(tmp_path):
    (tmp_path / "flux").mkdir()
    (tmp_path / "flux" / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel"}))
    with pytest.raises(kc.Krea2LoadError, match="FluxTransformer2DModel, not a Krea-2 transformer"):
        kd.inspect(tmp_path / "flux")


def test_folder_without_weights_is_reported(tmp_path):
    folder = write_diffusers_folder(tmp_path / "krea2")
    for shard in folder.glob("*.safetensors"):
        shard.unlink()
    with pytest.raises(kc.Krea2LoadError, match="shards listed in .* are missing"):
        kd.inspect(folder)


def test_config_that_does_not_match_weights_fails_and_frees_everything(tmp_path):
    folder = write_diffusers_folder(tmp_path / "krea2", shape=Krea2Shape())
    config = json.loads((folder / "config.json").read_text())
    config["num_key_value_heads"] = 2  # the stored k/v projections are for 1 kv head
    (folder / "config.json").write_text(json.dumps(config))
    # Keep the error (and so its traceback's frames) alive, as ComfyUI does while it reports it.
    with pytest.raises(kc.Krea2LoadError, match=r"attn\.to_k\.weight' has shape \[128, 256\].*expects \[256, 256\]") as error:
        kd.load_transformer(kd.inspect(folder))
    gc.collect()
    from diffusers import Krea2Transformer2DModel

    leftovers = [obj for obj in gc.get_objects() if type(obj) is Krea2Transformer2DModel]
    assert leftovers, "the failed model should still be reachable through the kept traceback"
    assert all(param.is_meta for model in leftovers for param in model.parameters()), error.value


def test_missing_tensor_is_reported(tmp_path):
    weights = native_state_dict(Krea2Shape())
    del weights["blocks.3.mlp.down.weight"]
    save_file(weights, str(tmp_path / "partial.safetensors"))
    with pytest.raises(kc.Krea2LoadError, match=r"partial\.safetensors: 1 Krea-2 tensors are missing.*ff\.down"):
        kd.load_transformer(kd.inspect(tmp_path / "partial.safetensors"))


# --- listing ---------------------------------------------------------------------------

def test_listing_keeps_krea2_files_and_folders_only(tmp_path):
    files = tmp_path / "diffusion_models"
    files.mkdir()
    write_native(files / "native.safetensors", shape=Krea2Shape())
    write_diffusers_file(files / "diffusers.safetensors", shape=Krea2Shape())
    save_file({"other.weight": torch.zeros(2)}, str(files / "other.safetensors"))
    (files / "broken.safetensors").write_bytes(b"not safetensors")
    named = [(path.name, path) for path in sorted(files.iterdir())]
    assert kl.krea2_files(named) == ["diffusers.safetensors", "native.safetensors"]

    roots = tmp_path / "diffusers"
    write_diffusers_folder(roots / "org" / "krea2-pipeline" / "transformer", shape=Krea2Shape())
    write_diffusers_folder(roots / "krea2-transformer", shape=Krea2Shape())
    (roots / "flux").mkdir()
    (roots / "flux" / "config.json").write_text(json.dumps({"_class_name": "FluxTransformer2DModel"}))
    assert kl.krea2_folders([roots, tmp_path / "absent"]) == ["krea2-transformer", "org/krea2-pipeline"]
