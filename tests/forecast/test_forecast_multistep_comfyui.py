"""The Forecast node under ComfyUI's multistep samplers, the ones its own recipes use (real server).

Z-Image Turbo's and MiniMax H3's templates sample with ``res_multistep``. It and its kin make one model call per
step and build each step from the model's outputs of earlier steps: on a forecast step the sampler's history gets
the forecast in place of a computed output, and nothing else changes. For each such sampler ComfyUI offers, on the
tiny Krea-2 at CFG 1 (the recipes' layout): forecasting nothing is bit-identical to the graph without the node; a
named preset and ``auto`` compute exactly the steps they plan (one call each, every block), the others one call
each running none, and the record counts them (calls, computed calls, "as many as N steps").

Random weights: which calls were computed and exactness, never image quality (the quality against fewer steps on
the trained proxy is ``python -m benchmarks.forecast_multistep``).
"""

from __future__ import annotations

import pytest
import torch

from devkit.krea2_prompts import krea2_prompt, with_forecast
from helpers import latent_and_record
from record_checks import FORECAST_NOTHING, FORECAST_STEPS, check_attribution

pytestmark = pytest.mark.comfyui

# ComfyUI's samplers (comfy/k_diffusion/sampling.py) that make one model call per step and carry earlier steps'
# outputs into the next: res_multistep and its ancestral and CFG++ forms, DEIS, iPNDM (and its variable-step
# form), gradient estimation (and CFG++), LMS, DPM++ 2M.
MULTISTEP_SAMPLERS = ["res_multistep", "res_multistep_ancestral", "res_multistep_cfg_pp",
                      "res_multistep_ancestral_cfg_pp", "deis", "ipndm", "ipndm_v", "gradient_estimation",
                      "gradient_estimation_cfg_pp", "lms", "dpmpp_2m"]
STEPS, BLOCKS = 8, 4   # the tiny Krea-2's blocks


def graph(sampler: str, prefix: str, preset: str | None = None, **custom) -> dict:
    prompt = krea2_prompt(cfg=1.0, steps=STEPS, sampler=sampler, seed=71, cache=None if preset is None else {},
                          prefix=prefix)
    return with_forecast(prompt, preset, **custom) if preset is not None else prompt


def check_counted(record: dict, computed: list[int]):
    """One call a step, at the step's sigma; the planned steps computed with every block, the rest with none."""
    check_attribution(record)
    log = record["call_log"]
    assert [call[0] for call in log] == list(range(STEPS)) and all(call[2] for call in log)
    assert [call[3] for call in log] == [BLOCKS if step in computed else 0 for step in range(STEPS)]
    assert record["forecast_steps"] == [step for step in range(STEPS) if step not in computed]
    assert (record["calls"], record["full_calls"], record["equal_cost_steps"]) == (STEPS, len(computed),
                                                                                  len(computed))


@pytest.mark.parametrize("sampler", MULTISTEP_SAMPLERS)
def test_a_multistep_sampler_is_forecast_as_planned_and_nothing_forecast_is_no_node(comfy_server, sampler):
    plain, _ = latent_and_record(comfy_server, graph(sampler, f"ms_{sampler}_plain"))

    nothing, record = latent_and_record(comfy_server, graph(sampler, f"ms_{sampler}_nothing", "custom",
                                                            **FORECAST_NOTHING))
    check_counted(record, computed=list(range(STEPS)))
    assert torch.equal(nothing, plain), "forecasting nothing: the image without the node"

    preset, record = latent_and_record(comfy_server, graph(sampler, f"ms_{sampler}_preset", "turbo_5_of_8"))
    check_counted(record, computed=[s for s in range(STEPS) if s not in FORECAST_STEPS])
    assert torch.isfinite(preset).all() and not torch.equal(preset, plain)

    auto, record = latent_and_record(comfy_server, graph(sampler, f"ms_{sampler}_auto", "auto", speedup=2.0))
    computed = record["method"]["computed_steps"]
    assert len(computed) == STEPS // 2 and computed[0] == 0, computed
    check_counted(record, computed=computed)
    assert torch.isfinite(auto).all() and not torch.equal(auto, plain)
