"""What the registry says of ERNIE-Image, held to the model ComfyUI builds at its real size, and that size's tensors.

ComfyUI 0.33 detects ERNIE-Image from its keys and builds it at one config, the real 8B one (``ErnieImageModel``'s
defaults: width 4096, 32 heads, 36 blocks, 128 latent channels at patch 1, text width 3072). The family's tests run a
128-wide stand-in built by the test loader, so what they rely on of the real model is checked here, on that model
built on the meta device (no memory): the block list and its size, the blocks' and the final layer's parameters the
registry names, and that ``final_norm`` hands ``final_linear`` the model's width, which ``final_linear`` maps to the
prediction's 128 channels a token. The Fn residual at 1024x1024 is checked with the other families'
(tests/families/test_realshape_family_pieces.py); the output forecast's history at that size here.
"""

from __future__ import annotations

import json
import subprocess

import pytest
import torch

from devkit.comfy_harness import comfyui_python, repo_env
from krea2_cachedit.adapters.forecast.feature_forecast import FeatureHistory, history_bytes
from krea2_cachedit.adapters.forecast.forecast_settings import AUTO_FORECAST

pytestmark = pytest.mark.tier("realshape")

# Image tokens at 1024x1024 (Flux.2's latent, 16x smaller, patch 1) and a prompt of 256 text tokens, one joint sequence.
TOKENS = (1024 // 16) ** 2 + 256
WIDTH = 4096

_REAL_SCRIPT = """
import json, sys
sys.argv = ["ernie_image_real", "--cpu"]
import comfy.options
comfy.options.enable_args_parsing()
import comfy.cli_args, comfy.model_detection, comfy.ops, torch
from devkit.comfy_harness import load_pack
load_pack()
from comfy.ldm.ernie.model import ErnieImageModel
from krea2_cachedit.adapters.dbcache.block_contract import BlockContract
from krea2_cachedit.adapters.families.registry import FORECAST_SCOPE, resolve
from krea2_cachedit.adapters.forecast.final_layer_contract import FinalLayerContract

# The config ComfyUI detects from an ERNIE-Image file's keys, and the model it builds from it.
keys = {"layers.0.mlp.linear_fc2.weight": torch.empty(0, device="meta")}
config = comfy.model_detection.model_config_from_unet(keys, "")
model = ErnieImageModel(**config.unet_config, device="meta", operations=comfy.ops.disable_weight_init)
target = resolve(model, FORECAST_SCOPE)
print(json.dumps({
    "config": type(config).__name__, "family": target.family.name, "blocks": target.num_blocks,
    "block_types": sorted({type(block).__name__ for block in target.block_modules[0]}),
    "block_mismatch": BlockContract(target).signature_mismatch(),
    "final_mismatch": FinalLayerContract(target).signature_mismatch(),
    "final_norm_width": model.final_norm.linear.in_features,
    "final_linear": [model.final_linear.in_features, model.final_linear.out_features],
}))
"""


def test_the_registry_holds_for_the_model_comfyui_builds_at_its_real_size(comfy_root):
    done = subprocess.run([comfyui_python(comfy_root), "-c", _REAL_SCRIPT], cwd=comfy_root, env=repo_env(),
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found == {"config": "ErnieImage", "family": "ERNIE-Image (ComfyUI native)", "blocks": 36,
                     "block_types": ["ErnieImageSharedAdaLNBlock"], "block_mismatch": None, "final_mismatch": None,
                     "final_norm_width": WIDTH, "final_linear": [WIDTH, 128]}


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
def test_auto_holds_final_norms_width_a_token_at_real_size(dtype):
    """``auto`` forecasts what ``final_norm`` returns: the model's width a token (Krea-2's final layer returns 64), so a
    stream's history at 1024x1024 holds the last two computed outputs of (1, 4352, 4096): 71 MB in bf16."""
    shape = (1, TOKENS, WIDTH)
    history = FeatureHistory(AUTO_FORECAST, 8)
    for step in (0, 2):
        history.add(step, torch.full(shape, 1.0 + step / 8, dtype=dtype))
    forecast = history.forecast(3, share=1.0)
    assert forecast.dtype == dtype and float(forecast[0, -1, -1]) == pytest.approx(1.0 + 3 / 8, rel=2 ** -7)
    assert history.held_bytes() == history_bytes(AUTO_FORECAST, shape, dtype) == 2 * TOKENS * WIDTH * dtype.itemsize
    assert round(history.held_bytes() / 1e6, 1) == (71.3 if dtype == torch.bfloat16 else 142.6)
