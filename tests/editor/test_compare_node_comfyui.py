"""The Krea2CompareImages node in the real ComfyUI server, on stock EmptyImage colours."""

from __future__ import annotations

import math

import pytest

import helpers
from devkit.comfy_harness import prompt_error
from compare_prompts import compare_prompt, saved_pngs

pytestmark = pytest.mark.comfyui

PSNR_10_APART = 20 * math.log10(255 / 10)  # 28.13 dB
PSNR_CAP_DB = 100.0  # the README's convention for identical images
SIZE = 32


def run_ok(server, prompt) -> dict:
    return helpers.run_ok(server, prompt, timeout=120)


def float_outputs(entry: dict) -> tuple[float, float]:
    """mae_255 and psnr_db as the node returned them (PreviewAny shows a FLOAT as its str)."""
    return tuple(float(entry["outputs"][node]["text"][0]) for node in ("4", "5"))


def test_uniform_colours_10_apart(comfy_server):
    entry = run_ok(comfy_server, compare_prompt((20, SIZE, SIZE, 1), (30, SIZE, SIZE, 1), "ten_apart"))
    mae, psnr = float_outputs(entry)
    assert mae == pytest.approx(10.0, abs=1e-4)
    assert psnr == pytest.approx(PSNR_10_APART, abs=1e-4) and round(psnr, 2) == 28.13

    shown = entry["outputs"]["3"]
    (metrics,) = shown["metrics"]
    assert (metrics["mae_255"], metrics["psnr_db"]) == (mae, psnr)
    (text,) = shown["text"]
    assert "MAE 10.000 / 255 · PSNR 28.13 dB" in text, text
    # The node previews its heatmap; the difference output carries the same image.
    (preview,) = saved_pngs(comfy_server, entry, "3", "temp")
    (saved,) = saved_pngs(comfy_server, entry, "6", "output")
    for heatmap in (preview, saved):
        assert heatmap.size == (SIZE, SIZE)
        assert heatmap.getextrema() == ((255, 255),) * 3  # every pixel is the largest difference: white


def test_identical_images(comfy_server):
    entry = run_ok(comfy_server, compare_prompt((77, SIZE, SIZE, 1), (77, SIZE, SIZE, 1), "identical"))
    assert float_outputs(entry) == (0.0, PSNR_CAP_DB)
    assert "(identical)" in entry["outputs"]["3"]["text"][0]
    (heatmap,) = saved_pngs(comfy_server, entry, "6", "output")
    assert heatmap.getextrema() == ((0, 0),) * 3  # black = identical


def test_batch_of_two_pairs(comfy_server):
    entry = run_ok(comfy_server, compare_prompt((40, SIZE, 24, 2), (50, SIZE, 24, 2), "batch"))
    mae, psnr = float_outputs(entry)
    assert mae == pytest.approx(10.0, abs=1e-4) and psnr == pytest.approx(PSNR_10_APART, abs=1e-4)
    (metrics,) = entry["outputs"]["3"]["metrics"]
    assert len(metrics["pairs"]) == 2
    for pair in metrics["pairs"]:
        assert pair["mae_255"] == pytest.approx(10.0, abs=1e-4)
    text = entry["outputs"]["3"]["text"][0]
    assert "Mean of 2 pairs" in text and "pair 0: MAE 10.000 · PSNR 28.13 dB" in text, text
    assert "pair 1: MAE 10.000 · PSNR 28.13 dB" in text, text
    heatmaps = saved_pngs(comfy_server, entry, "6", "output")
    assert [h.size for h in heatmaps] == [(SIZE, 24)] * 2


def test_size_mismatch_fails_clearly_and_the_server_recovers(comfy_server):
    entry = comfy_server.run(compare_prompt((10, 512, 512, 1), (10, 256, 256, 1), "mismatch"), timeout=120)
    error = prompt_error(entry)
    assert error is not None, "a size mismatch must fail"
    assert error.startswith("ValueError: "), "the editor shows a plain type name, not the pack's folder path"
    assert ("reference is 1x512x512x3, candidate is 1x256x256x3: compare images of the same size and batch; "
            "upscale or crop one first") in error, error
    # The next prompt runs (with new colours, so nothing is served from ComfyUI's cache).
    entry = run_ok(comfy_server, compare_prompt((3, SIZE, SIZE, 1), (13, SIZE, SIZE, 1), "after_mismatch"))
    assert float_outputs(entry)[0] == pytest.approx(10.0, abs=1e-4)


def test_batch_mismatch_fails_clearly(comfy_server):
    entry = comfy_server.run(compare_prompt((10, SIZE, SIZE, 2), (10, SIZE, SIZE, 1), "batch_mismatch"), timeout=120)
    assert f"reference is 2x{SIZE}x{SIZE}x3, candidate is 1x{SIZE}x{SIZE}x3: compare batches" in prompt_error(entry)
