"""ERNIE-Image through the Forecast node in the real server: what is ERNIE-Image's own.

ERNIE-Image (and ERNIE-Image-Turbo, the same class) runs the family scenario set
(tests/families/test_family_scenarios_comfyui.py, its harness in tests/support/family_harness.py: a 128-wide stand-in
of ComfyUI's own ``ErnieImageModel``, which ComfyUI builds only at 8B, loaded at its size by the test node pack's
``Krea2TestSizedUNETLoader``; the checkpoint written only when a test asks for ``ernie_image_server``).

Its own: the registry lets ``auto`` forecast ``final_norm``'s output though ``final_linear`` follows it
(``final_output_forecast``). What follows is affine, and a held forecast is the last computed output, so ``auto``
holding every gap must be exactly fewer steps on the same sigmas, as where the final layer gives the prediction.
"""

from __future__ import annotations

import pytest
import torch

from devkit.krea2_prompts import with_forecast
from family_harness import HARNESSES

pytestmark = pytest.mark.comfyui

HARNESS = HARNESSES["ernie_image"]


def test_auto_holding_every_gap_is_fewer_steps_on_the_same_sigmas(ernie_image_server):
    """8 steps at speedup 4 with CFG (ERNIE-Image's recipe runs CFG 4; cond and uncond batched): steps 0 and 4
    computed, both gaps held (the first has no trend, the second spans more of the sigma range than a guided run
    follows a trend over); the run lands where 2 plain steps land."""
    graph = with_forecast(HARNESS.prompt("batched", cache={}, prefix="auto_held"), "auto", speedup=4.0)
    held, record = HARNESS.run(ernie_image_server, graph)
    method = record["method"]
    assert (method["target"], method["computed_steps"], method["gap_shares"]) == ("output", [0, 4], [0.0, 0.0])
    assert record["forecast_steps"] == [1, 2, 3, 5, 6, 7]
    fewer, _ = HARNESS.run(ernie_image_server, HARNESS.prompt("batched", steps=2, prefix="two_steps"), node_id=None)
    for output, other in zip(held, fewer, strict=True):
        torch.testing.assert_close(output, other, rtol=1e-5, atol=1e-5)
