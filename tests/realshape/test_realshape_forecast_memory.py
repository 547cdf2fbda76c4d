"""The Forecast node's per-stream feature history at Krea-2's real shapes, on tensors of the real size.

The feature a Krea-2 call hands its final layer is (batch, text + image tokens, 6144): 1 x 4224 x 6144
= 26M values for one 1024x1024 image with 128 text tokens. Split CFG keeps a history per stream (cond,
uncond), a batched call one of batch 2: either way twice one stream's. On a GPU the feature is bf16
(bf16 or fp8 weights alike: ComfyUI computes fp8 weights in bf16), on a CPU float32. What one stream
holds is bounded per preset in docs/nodes.md ("Memory"): these tests run each preset's schedule on
real-size features and hold the history to that bound.
"""

from __future__ import annotations

import re

import pytest
import torch

from devkit.comfy_harness import REPO_ROOT
from krea2_cachedit.adapters.forecast.feature_forecast import FeatureHistory, Forecaster, history_bytes
from krea2_cachedit.adapters.forecast.forecast_settings import PRESETS

pytestmark = pytest.mark.tier("realshape")

WIDTH, TEXT_TOKENS = 6144, 128
FEATURE = (1, (1024 // 16) ** 2 + TEXT_TOKENS, WIDTH)   # one stream's feature at 1024x1024
# What the final layer returns there (target ``output``): every token, its 2x2 patch of 16 latent channels.
OUTPUT = (1, (1024 // 16) ** 2 + TEXT_TOKENS, 2 * 2 * 16)
# The steps each preset is made for (docs/nodes.md's preset table).
STEPS = {"turbo_5_of_8": 8, "turbo_4_of_8": 8, "raw_1_in_4": 52, "raw_1_in_5": 52, "raw_8_of_52": 52, "spectrum_paper": 50,
         "spectrum_paper_fast": 50}
NODES_DOC = REPO_ROOT / "docs" / "nodes.md"


def documented_bounds() -> dict[str, tuple[float, float]]:
    """docs/nodes.md's memory table: per preset, MB per stream with bf16 and with float32 features."""
    text = NODES_DOC.read_text()
    rows = re.findall(r"^\| `(\w+)` \| ([\d.]+) MB \| ([\d.]+) MB \|", text, flags=re.MULTILINE)
    return {name: (float(bf16), float(fp32)) for name, bf16, fp32 in rows}


def test_every_preset_has_a_documented_bound():
    assert set(documented_bounds()) == set(PRESETS) == set(STEPS)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=["bf16", "fp32"])
@pytest.mark.parametrize("preset", list(STEPS))
def test_a_streams_history_at_real_size_stays_within_its_documented_bound(preset, dtype):
    settings, steps = PRESETS[preset], STEPS[preset]
    computed = settings.schedule.computed(steps)
    shape = OUTPUT if settings.forecast.target == "output" else FEATURE
    history, held = FeatureHistory(settings.forecast, steps), 0
    for step in range(steps):
        if computed[step] or not history.ready:
            # A feature moving linearly with the step: the local forecasts are exact on it.
            history.add(step, torch.full(shape, 1.0 + step / 8, dtype=dtype))
            held = max(held, history.held_bytes())
        elif step == computed.index(False) and settings.forecast.forecast == "linear":
            forecast = history.forecast(step)
            assert forecast.dtype == dtype and forecast.shape == shape
            # Its share of the way from the last computed step along the line (one computed step: held).
            last = history.computed_steps[-1]
            share = settings.forecast.extrapolation if len(history.computed_steps) > 1 else 0.0
            expected = 1.0 + last / 8 + share * (step - last) / 8
            tolerance = 2.0 ** -7 if dtype == torch.bfloat16 else 1e-6
            assert float(forecast[0, -1, -1]) == pytest.approx(expected, rel=tolerance), \
                "the last value of the tensor is forecast too"
    bound = history_bytes(settings.forecast, shape, dtype)
    assert held == bound, "the history holds what history_bytes says"
    documented_mb = documented_bounds()[preset][0 if dtype == torch.bfloat16 else 1]
    assert bound / 1e6 <= documented_mb, f"{preset}: {bound / 1e6:.1f} MB per stream, documented {documented_mb} MB"


@pytest.mark.parametrize("forecaster, bf16_mb", [(Forecaster("quadratic"), 155.7),
                                                 (Forecaster("spectrum", 4, 0.1, 0.5), 415.2)],
                         ids=["quadratic", "spectrum_w0.5"])
def test_custom_forecasters_hold_what_docs_say(forecaster, bf16_mb):
    assert history_bytes(forecaster, FEATURE, torch.bfloat16) / 1e6 == pytest.approx(bf16_mb, abs=0.05)
    assert f"{bf16_mb:g} MB" in NODES_DOC.read_text()
