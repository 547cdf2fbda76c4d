"""cache-dit's calibrators on the Krea2CacheDiT node, in the real ComfyUI server.

Each calibrator samples the test graph with the "medium" step mask (8 steps: 4 and 6
cached), so every run caches the same steps and only what they serve differs.
"""

from __future__ import annotations

import pytest
import torch

from devkit.krea2_prompts import CACHE_NODE_DEFAULTS, krea2_prompt

pytestmark = pytest.mark.comfyui

MEDIUM = {"steps_mask": "medium"}
MEDIUM_8_CACHED = [4, 6]
# Inputs, and the record's "calibrator" they give. DMD's fit needs 4 evenly spaced computed
# steps: it has them at step 4 (0-3 computed), not at 6 (3 and 5 computed).
CASES = {
    "taylorseer": ({"calibrator": "taylorseer", "taylorseer_order": 2}, {"name": "taylorseer", "taylorseer_order": 2}),
    "foca": ({"calibrator": "foca"}, {"name": "foca"}),
    "dmd": ({"calibrator": "dmd", "dmd_history": 5}, {"name": "dmd", "dmd_history": 5, "forecast_steps": [4]}),
}


def sample(server, inputs: dict, prefix: str) -> tuple[torch.Tensor, dict]:
    entry, [record] = server.run_with_stats(krea2_prompt(cfg=3.5, cache={**MEDIUM, **inputs}, prefix=prefix))
    return server.saved_latent(entry, "7"), record


@pytest.fixture(scope="module")
def uncalibrated(comfy_server) -> torch.Tensor:
    latent, record = sample(comfy_server, {}, "uncalibrated")
    assert record["calibrator"] == {"name": "none"} and record["cached_steps"] == MEDIUM_8_CACHED
    return latent


@pytest.mark.parametrize("name", list(CASES))
def test_each_calibrator_runs_and_its_record_names_it(comfy_server, uncalibrated, name):
    inputs, expected = CASES[name]
    latent, record = sample(comfy_server, inputs, f"calibrator_{name}")
    assert record["calibrator"] == expected
    assert record["settings"] == {**CACHE_NODE_DEFAULTS, **MEDIUM, **inputs}
    assert record["cached_steps"] == MEDIUM_8_CACHED and record["warnings"] == []
    assert torch.isfinite(latent).all()
    assert not torch.equal(latent, uncalibrated), "the calibrator changed nothing the sampler got"
