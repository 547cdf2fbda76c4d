"""cache-dit's calibrators on the Krea2CacheDiT node, in the real ComfyUI server.

Each calibrator samples the test graph with the "medium" step mask (8 steps: 4 and 6
cached), so every run caches the same steps and only what they serve differs. Also
API prompts written for the node's former ``enable_taylorseer`` switch.
"""

from __future__ import annotations

import pytest
import torch

from comfy_harness import prompt_error
from krea2_prompts import CACHE_NODE_DEFAULTS, krea2_prompt

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


def legacy_prompt(**switch) -> dict:
    """The test graph as a script written for the former node sends it: the switch, no calibrator."""
    prompt = krea2_prompt(cfg=3.5, cache=MEDIUM, prefix="legacy")
    inputs = prompt["5"]["inputs"]
    del inputs["calibrator"], inputs["dmd_history"]
    inputs.update(switch)
    return prompt


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


@pytest.mark.parametrize("switch, same_as", [(True, "taylorseer"), (False, "none")])
def test_a_prompt_with_the_former_taylorseer_switch_runs_as_before(comfy_server, uncalibrated, switch, same_as):
    entry, [record] = comfy_server.run_with_stats(legacy_prompt(enable_taylorseer=switch, taylorseer_order=2))
    assert record["settings"]["calibrator"] == same_as
    assert record["calibrator"] == ({"name": "taylorseer", "taylorseer_order": 2} if switch else {"name": "none"})
    assert any(f"enable_taylorseer={str(switch).lower()} was read as calibrator '{same_as}'" in w
               for w in record["warnings"]), record["warnings"]
    reference = sample(comfy_server, CASES["taylorseer"][0], "legacy_reference")[0] if switch else uncalibrated
    assert torch.equal(comfy_server.saved_latent(entry, "7"), reference)


def test_a_prompt_whose_switch_contradicts_its_calibrator_is_refused(comfy_server):
    prompt = krea2_prompt(cfg=3.5, cache={**MEDIUM, "calibrator": "dmd"}, prefix="contradiction")
    prompt["5"]["inputs"]["enable_taylorseer"] = True
    error = prompt_error(comfy_server.run(prompt))
    assert error is not None, "the prompt ran"
    assert "enable_taylorseer=true" in error and "calibrator='dmd'" in error and "Remove enable_taylorseer" in error
    _, [record] = comfy_server.run_with_stats(krea2_prompt(cache=MEDIUM))
    assert record["status"] == "ok" and record["warnings"] == []
