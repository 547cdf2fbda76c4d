"""The stand-ins that ComfyUI's detection would build at another size, as the test node pack's loader builds them.

ComfyUI 0.33 detects Z-Image, Qwen-Image and Chroma only at their real width and builds ERNIE-Image only at 8B;
their stand-ins are narrow and carry their size in their metadata, and ``Krea2TestSizedUNETLoader``
(devkit/comfy_test_nodes/sized_loader.py) builds them as ``UNETLoader`` would. Each family's scenarios rest on that
build being the family's own model config at the file's size: checked here with ComfyUI's own python, the loader
imported from its file as ComfyUI imports a node pack's module.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from devkit.comfy_harness import REPO_ROOT, comfyui_python
from devkit.family_prompts import FAMILIES, SIZED_LOADER

pytestmark = pytest.mark.comfyui

# The model config each family's real checkpoints are detected as (``comfy.supported_models``).
MODEL_CONFIGS = {"zimage": "ZImage", "qwen_image": "QwenImage", "chroma": "Chroma", "ernie_image": "ErnieImage"}

_LOAD_SCRIPT = """
import importlib.util, json, sys
loader_file, model_file = sys.argv[-2], sys.argv[-1]
sys.argv = ["load_sized", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
spec = importlib.util.spec_from_file_location("sized_loader", loader_file)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
try:
    patcher = module.load_sized_diffusion_model(model_file)
except ValueError as error:
    print(json.dumps({"error": str(error)}))
    raise SystemExit
model = patcher.model
widths = {name: tuple(parameter.shape) for name, parameter in model.diffusion_model.named_parameters()}
print(json.dumps({"config": type(model.model_config).__name__,
                  "class": type(model.diffusion_model).__module__ + "." + type(model.diffusion_model).__name__,
                  "parameters": sum(int(p.numel()) for p in model.diffusion_model.parameters()),
                  "shapes": {name: list(shape) for name, shape in widths.items()}}))
"""

SIZED = [family for family, spec in FAMILIES.items() if spec.loader == SIZED_LOADER]


def load_sized(comfy_root, path) -> dict:
    loader_file = REPO_ROOT / "devkit" / "comfy_test_nodes" / "sized_loader.py"
    result = subprocess.run([comfyui_python(comfy_root), "-c", _LOAD_SCRIPT, str(loader_file), str(path)],
                            cwd=comfy_root, check=True, capture_output=True, text=True, timeout=600)
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_every_sized_family_names_its_model_config():
    assert set(SIZED) == set(MODEL_CONFIGS), "a family loaded by the sized loader needs its model config here"


@pytest.mark.parametrize("family", SIZED)
def test_the_sized_loader_builds_the_familys_own_model_at_the_files_size(family, comfy_root, request):
    from safetensors import safe_open

    path = request.getfixturevalue(FAMILIES[family].server).base_dir / "models" / "diffusion_models" / FAMILIES[
        family].model
    loaded = load_sized(comfy_root, path)
    assert loaded["config"] == MODEL_CONFIGS[family]
    with safe_open(str(path), "pt") as checkpoint:
        shapes = {name: list(checkpoint.get_slice(name).get_shape()) for name in checkpoint.keys()}
    # Every weight of the file has its place at its shape: the model is the file's size, not the detected default.
    assert loaded["shapes"] == {name: shape for name, shape in shapes.items() if name in loaded["shapes"]}
    assert set(loaded["shapes"]) <= set(shapes) and loaded["parameters"] < 50_000_000


def test_a_file_without_its_size_is_refused_by_name(comfy_root, request, tmp_path):
    from safetensors.torch import load_file, save_file

    spec = FAMILIES["zimage"]
    source = request.getfixturevalue(spec.server).base_dir / "models" / "diffusion_models" / spec.model
    bare = tmp_path / "zimage_without_size.safetensors"
    save_file(load_file(str(source)), str(bare))
    assert "krea2_test_unet_config" in load_sized(comfy_root, bare)["error"]
