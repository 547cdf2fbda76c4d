"""The image comparison metrics (adapters/image_compare.py) on images with known values."""

import math

import pytest
import torch

from krea2_cachedit.adapters.image_compare import (
    PSNR_CAP_DB, ImageShapeMismatch, compare_images, difference_heatmap, hot_colormap, pair_metrics, psnr_from_mse)


def uniform(value_255: float, batch=1, height=8, width=8, channels=3) -> torch.Tensor:
    return torch.full((batch, height, width, channels), value_255 / 255.0)


def test_uniform_colours_10_apart():
    result = compare_images(uniform(20), uniform(30))
    assert result.mae_255 == pytest.approx(10.0, abs=1e-5)
    assert result.psnr_db == pytest.approx(20 * math.log10(255 / 10), abs=1e-5)
    assert result.psnr_db == pytest.approx(28.13, abs=0.005)


def test_mae_is_over_pixels_and_channels():
    reference = uniform(0)
    candidate = reference.clone()
    candidate[0, :4, :, 0] = 255 / 255.0  # half the rows of one of three channels, full range
    metrics = pair_metrics(reference[0], candidate[0])
    assert metrics.mae_255 == pytest.approx(255 / 6)
    assert metrics.psnr_db == pytest.approx(10 * math.log10(6))


def test_identical_images_give_zero_mae_and_the_psnr_cap():
    image = torch.rand(2, 8, 8, 3, generator=torch.Generator().manual_seed(0))
    result = compare_images(image, image.clone())
    assert (result.mae_255, result.psnr_db) == (0.0, PSNR_CAP_DB)
    assert math.isfinite(result.psnr_db)
    assert torch.count_nonzero(result.heatmap) == 0 and result.heatmap_scale_255 == 0.0
    assert "(identical)" in result.summary()


def test_psnr_is_capped_not_infinite():
    assert psnr_from_mse(0.0) == PSNR_CAP_DB
    assert psnr_from_mse(1e-30) == PSNR_CAP_DB
    assert psnr_from_mse(1e-4) == pytest.approx(40.0)


def test_batches_compare_pair_by_pair_and_report_the_mean():
    reference = torch.cat([uniform(100), uniform(100)])
    candidate = torch.cat([uniform(110), uniform(100)])  # pair 0: 10 apart, pair 1: identical
    result = compare_images(reference, candidate)
    assert [p.mae_255 for p in result.pairs] == pytest.approx([10.0, 0.0], abs=1e-5)
    assert [p.psnr_db for p in result.pairs] == pytest.approx([28.1308, PSNR_CAP_DB], abs=1e-4)
    assert result.mae_255 == pytest.approx(5.0, abs=1e-5)
    assert result.psnr_db == pytest.approx((28.1308 + PSNR_CAP_DB) / 2, abs=1e-4)
    summary = result.summary()
    assert "Mean of 2 pairs" in summary and "pair 0: MAE 10.000" in summary and "pair 1: MAE 0.000" in summary


def test_heatmap_is_black_where_identical_and_white_at_the_largest_difference():
    reference = uniform(0, height=2, width=2)
    candidate = reference.clone()
    candidate[0, 0, 0] = 60 / 255.0   # the largest difference
    candidate[0, 0, 1] = 30 / 255.0   # half of it
    heatmap, scale = difference_heatmap(reference, candidate)
    assert heatmap.shape == (1, 2, 2, 3)
    assert scale == pytest.approx(60.0, abs=1e-4)
    assert torch.allclose(heatmap[0, 0, 0], torch.ones(3))
    assert torch.allclose(heatmap[0, 0, 1], hot_colormap(torch.tensor(0.5)))
    assert torch.count_nonzero(heatmap[0, 1]) == 0


def test_heatmap_averages_the_channels():
    reference = uniform(0, height=1, width=2)
    candidate = reference.clone()
    candidate[0, 0, 0] = 30 / 255.0          # every channel 30 apart: mean 30, the largest
    candidate[0, 0, 1, 0] = 30 / 255.0       # one channel 30 apart: mean 10
    heatmap, scale = difference_heatmap(reference, candidate)
    assert scale == pytest.approx(30.0, abs=1e-4)
    assert torch.allclose(heatmap[0, 0, 1], hot_colormap(torch.tensor(1 / 3)))


def test_hot_colormap_gets_brighter_with_the_value():
    values = torch.linspace(0, 1, 11)
    colours = hot_colormap(values)
    assert torch.equal(colours[0], torch.zeros(3)) and torch.equal(colours[-1], torch.ones(3))
    brightness = colours.sum(dim=-1)
    assert torch.all(brightness[1:] > brightness[:-1])


def test_heatmap_scale_is_shared_by_the_pairs():
    reference = uniform(0, batch=2)
    candidate = torch.cat([uniform(40), uniform(20)])
    result = compare_images(reference, candidate)
    assert result.heatmap_scale_255 == pytest.approx(40.0, abs=1e-4)
    assert torch.allclose(result.heatmap[0], torch.ones(8, 8, 3))
    assert torch.allclose(result.heatmap[1], hot_colormap(torch.full((8, 8), 0.5)))  # half as far: darker


@pytest.mark.parametrize("reference, candidate, expected", [
    ((1, 512, 512, 3), (1, 256, 256, 3),
     "reference is 1x512x512x3, candidate is 1x256x256x3: compare images of the same size and batch; "
     "upscale or crop one first"),
    ((2, 64, 64, 3), (1, 64, 64, 3), "reference is 2x64x64x3, candidate is 1x64x64x3: compare batches of the same"),
    ((1, 64, 64, 4), (1, 64, 64, 3), "reference is 1x64x64x4, candidate is 1x64x64x3: compare images with the same "
                                     "channels; drop the alpha channel"),
    ((64, 64, 3), (1, 64, 64, 3), "reference is 64x64x3, candidate is 1x64x64x3: both must be IMAGE batches"),
    ((0, 64, 64, 3), (0, 64, 64, 3), "reference is 0x64x64x3, candidate is 0x64x64x3: both batches are empty"),
])
def test_mismatched_images_name_both_shapes_and_the_fix(reference, candidate, expected):
    with pytest.raises(ImageShapeMismatch) as error:
        compare_images(torch.zeros(reference), torch.zeros(candidate))
    assert str(error.value).startswith(expected), str(error.value)


@pytest.mark.parametrize("bad", [math.nan, math.inf], ids=["nan", "inf"])
def test_non_finite_pixels_are_counted_never_perfect_and_marked_blue(bad):
    reference, candidate = uniform(20, batch=2), uniform(30, batch=2)
    candidate[1, 2, 5, 0] = bad
    result = compare_images(reference, candidate)
    broken = result.pairs[1]
    assert broken.nonfinite_pixels == 1 and math.isnan(broken.mae_255) and math.isnan(broken.psnr_db)
    assert result.pairs[0].nonfinite_pixels == 0 and result.pairs[0].mae_255 == pytest.approx(10.0)
    assert result.nonfinite_pixels == 1 and math.isnan(result.psnr_db)
    text = result.summary()
    assert "PSNR n/a" in text and "(identical)" not in text and "1 non-finite pixels" in text
    assert "pair 1: MAE n/a · PSNR n/a · 1 non-finite pixels" in text, text
    assert "white = 10.00 / 255 (the largest per-pixel difference), blue = non-finite" in text, text
    assert torch.equal(result.heatmap[1, 2, 5], torch.tensor([0.0, 0.0, 1.0]))
    assert torch.allclose(result.heatmap[0], torch.ones(8, 8, 3)), "the scale comes from the finite pixels"


def test_a_non_finite_mse_is_not_the_cap():
    assert math.isnan(psnr_from_mse(math.nan)) and math.isnan(psnr_from_mse(math.inf))
