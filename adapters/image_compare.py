"""How far a candidate image is from a reference: MAE, PSNR and a difference heatmap.

Images are ComfyUI IMAGE tensors, ``[B, H, W, C]`` floats in 0..1. Pairs are compared
image by image along the batch; the two batches must have the same shape.

Conventions (also in the README):

- ``mae_255``: mean over all pixels and channels of ``|a - b| * 255`` (the 0-255 units
  image-diff reports usually quote);
- ``psnr_db``: ``10 * log10(1 / MSE)`` with peak 1.0 (the same as peak 255 on 0-255 values),
  capped at ``PSNR_CAP_DB``: identical images (MSE 0) give exactly the cap, so the value stays
  a finite number that JSON and the editor can carry;
- the heatmap: per-pixel mean of ``|a - b|`` over the channels, divided by the largest such
  value in the batch (one scale for every pair, so pairs can be compared with each other),
  through the "hot" colormap: black = identical, red, yellow, white = the largest difference.
  Identical batches give an all-black heatmap.
- non-finite pixels (NaN or infinity in any channel of either image, e.g. a VAE that
  overflowed in fp16) make a pair's MAE and PSNR undefined (NaN, ``null`` in JSON, "n/a" on
  the node), are counted (``nonfinite_pixels``), and are drawn blue in the heatmap, outside
  the hot colormap's range; the scale comes from the finite pixels.
"""

from __future__ import annotations

import dataclasses
import math

import torch

PSNR_CAP_DB = 100.0  # reached at an RMS difference of 1e-5 of the range: no visible difference
NONFINITE_COLOR = (0.0, 0.0, 1.0)  # blue: never produced by the hot colormap


class ImageShapeMismatch(ValueError):
    """The two images cannot be compared pair by pair; the message says what to do."""


@dataclasses.dataclass(frozen=True)
class PairMetrics:
    mae_255: float              # NaN when the pair has non-finite pixels
    psnr_db: float              # NaN when the pair has non-finite pixels
    nonfinite_pixels: int = 0   # pixels with NaN or infinity in any channel of either image


@dataclasses.dataclass(frozen=True)
class Comparison:
    pairs: list[PairMetrics]
    heatmap: torch.Tensor       # [B, H, W, 3] in 0..1
    heatmap_scale_255: float    # the per-pixel difference (0-255 units) drawn as white

    @property
    def mae_255(self) -> float:
        return sum(p.mae_255 for p in self.pairs) / len(self.pairs)

    @property
    def psnr_db(self) -> float:
        return sum(p.psnr_db for p in self.pairs) / len(self.pairs)

    @property
    def nonfinite_pixels(self) -> int:
        return sum(p.nonfinite_pixels for p in self.pairs)

    def summary(self) -> str:
        """Plain text for the node (the editor shows it as is): the means, each pair, the heatmap scale."""
        means = f"MAE {format_mae(self.mae_255)} / 255 · PSNR {format_psnr(self.psnr_db)}"
        lines = [means]
        if len(self.pairs) > 1:
            lines = [f"Mean of {len(self.pairs)} pairs: {means}"]
            lines += [f"pair {i}: MAE {format_mae(pair.mae_255)} · PSNR {format_psnr(pair.psnr_db)}"
                      + (f" · {pair.nonfinite_pixels} non-finite pixels" if pair.nonfinite_pixels else "")
                      for i, pair in enumerate(self.pairs)]
        if self.nonfinite_pixels:
            lines.append(f"{self.nonfinite_pixels} non-finite pixels (NaN or infinity): the images are broken "
                         "there, so MAE and PSNR are undefined (blue in the heatmap)")
        lines.append(f"Heatmap: black = identical, white = {self.heatmap_scale_255:.2f} / 255 "
                     "(the largest per-pixel difference)" + (", blue = non-finite" if self.nonfinite_pixels else ""))
        return "\n".join(lines)


def format_mae(mae_255: float) -> str:
    return f"{mae_255:.3f}" if math.isfinite(mae_255) else "n/a"


def format_psnr(psnr_db: float) -> str:
    if not math.isfinite(psnr_db):
        return "n/a"
    return f"{psnr_db:.2f} dB" + (" (identical)" if psnr_db >= PSNR_CAP_DB else "")


def shape_text(image: torch.Tensor) -> str:
    return "x".join(str(n) for n in image.shape)


def check_comparable(reference: torch.Tensor, candidate: torch.Tensor):
    """Raise ImageShapeMismatch naming both shapes unless both are [B, H, W, C] of one shape."""
    shapes = f"reference is {shape_text(reference)}, candidate is {shape_text(candidate)}"
    if reference.dim() != 4 or candidate.dim() != 4:
        raise ImageShapeMismatch(f"{shapes}: both must be IMAGE batches [batch, height, width, channels]")
    if reference.shape == candidate.shape:
        if reference.shape[0] == 0:
            raise ImageShapeMismatch(f"{shapes}: both batches are empty; connect images to compare")
        return
    if reference.shape[1:3] != candidate.shape[1:3]:
        fix = "compare images of the same size and batch; upscale or crop one first"
    elif reference.shape[0] != candidate.shape[0]:
        fix = "compare batches of the same length, pair by pair; pick matching images first (e.g. ImageFromBatch)"
    else:
        fix = "compare images with the same channels; drop the alpha channel of one first"
    raise ImageShapeMismatch(f"{shapes}: {fix}")


def nonfinite_mask(reference: torch.Tensor, candidate: torch.Tensor) -> torch.Tensor:
    """[..., H, W] True where any channel of either image is NaN or infinite."""
    candidate = candidate.to(reference.device)
    return ~(torch.isfinite(reference) & torch.isfinite(candidate)).all(dim=-1)


def pair_metrics(reference: torch.Tensor, candidate: torch.Tensor) -> PairMetrics:
    """MAE (0-255 units) and PSNR (peak 1.0, capped) of one pair of [H, W, C] images."""
    nonfinite = int(nonfinite_mask(reference, candidate).sum().item())
    if nonfinite:
        return PairMetrics(mae_255=math.nan, psnr_db=math.nan, nonfinite_pixels=nonfinite)
    mae_255, mse = mae_255_and_mse(reference.double(), candidate.double())
    return PairMetrics(mae_255=mae_255, psnr_db=psnr_from_mse(mse))


def mae_255_and_mse(reference: torch.Tensor, candidate: torch.Tensor) -> tuple[float, float]:
    """MAE (0-255 units) and MSE over every value of two same-shape images (any layout), in their dtype.

    The node's per-pair figures, and the benchmarks' and proxy tests' (whole decoded batches, float32).
    """
    diff = reference - candidate.to(reference.device)
    return (diff.abs().mean() * 255.0).item(), diff.square().mean().item()


def psnr_from_mse(mse: float, cap: float = PSNR_CAP_DB) -> float:
    """PSNR in dB (peak 1.0) of an MSE, at most ``cap`` (``math.inf``: identical images give inf)."""
    if not math.isfinite(mse):
        return math.nan  # min(cap, nan) would be the cap: a broken image would read as identical
    if mse <= 0.0:
        return cap
    return min(cap, 10.0 * math.log10(1.0 / mse))


def hot_colormap(values: torch.Tensor) -> torch.Tensor:
    """[..] in 0..1 -> [.., 3]: black -> red -> yellow -> white, brightness rising with the value."""
    channels = [(values * 3.0 - offset).clamp(0.0, 1.0) for offset in (0.0, 1.0, 2.0)]
    return torch.stack(channels, dim=-1)


def difference_heatmap(reference: torch.Tensor, candidate: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The hot-colormap heatmap of per-pixel mean |a - b| and the value (0-255 units) drawn as white.

    Non-finite pixels are drawn in ``NONFINITE_COLOR`` and left out of the scale.
    """
    nonfinite = nonfinite_mask(reference, candidate)
    per_pixel = (reference.float() - candidate.to(reference.device).float()).abs().mean(dim=-1)
    per_pixel = per_pixel.masked_fill(nonfinite, 0.0)
    largest = per_pixel.max().item() if per_pixel.numel() else 0.0
    scaled = per_pixel / largest if largest > 0.0 else torch.zeros_like(per_pixel)
    heatmap = hot_colormap(scaled)
    heatmap[nonfinite] = torch.tensor(NONFINITE_COLOR, dtype=heatmap.dtype, device=heatmap.device)
    return heatmap, largest * 255.0


def compare_images(reference: torch.Tensor, candidate: torch.Tensor) -> Comparison:
    """Compare two IMAGE batches pair by pair (same shape required)."""
    check_comparable(reference, candidate)
    pairs = [pair_metrics(ref, cand) for ref, cand in zip(reference, candidate)]
    heatmap, scale = difference_heatmap(reference, candidate)
    return Comparison(pairs=pairs, heatmap=heatmap, heatmap_scale_255=scale)
