"""A simple classifier of the proxies' images (the data set of devkit/krea2_proxy.py, which the Flux proxy
shares): which class a decoded sample shows.

It reads the object (the saturated pixels) and describes it by a few shape measures and its hue,
then picks the nearest class centre, fitted on the data set's own images. It lives apart from the
generator: the generator's hash (the proxy's cache key) covers what trains the proxy, not how its
samples are judged.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

from devkit.krea2_proxy import CLASSES, dataset

# A hole counts once it holds this share of the object's filled area: a ring's hole holds a quarter,
# colour noise leaves pinholes of well under 1%.
HOLE_SHARE = 0.05


def object_mask(images: torch.Tensor) -> torch.Tensor:
    """(B, H, W): the saturated (object) pixels. Saturation is read on a 5x5 local mean, the mask
    opened (eroded, then dilated, 5x5), and only its largest connected part kept: a generated
    image's colour noise and stray specks would otherwise widen the object's bounding box, and a
    recognisable shape would read as another."""
    smooth = F.avg_pool2d(images.float(), 5, stride=1, padding=2, count_include_pad=False)
    mask = ((smooth.amax(1) - smooth.amin(1)) > 0.3).float()[:, None]
    mask = -F.max_pool2d(-mask, 5, stride=1, padding=2)
    mask = F.max_pool2d(mask, 5, stride=1, padding=2)[:, 0]
    return torch.stack([largest_part(m) for m in mask])


def largest_part(mask: torch.Tensor) -> torch.Tensor:
    """(H, W) 0/1 -> the same with only its largest 4-connected part."""
    parts, count = ndimage.label(mask.numpy() > 0)
    if count <= 1:
        return mask
    largest = 1 + np.bincount(parts.ravel())[1:].argmax()
    return torch.from_numpy(parts == largest).to(mask.dtype)


def enclosed_background(mask: torch.Tensor) -> torch.Tensor:
    """(B, H, W): background pixels the object encloses (not 8-connected to the image's border): its holes."""
    objects = mask.numpy() > 0
    filled = np.stack([ndimage.binary_fill_holes(m, structure=np.ones((3, 3))) for m in objects])
    return torch.from_numpy(filled & ~objects).to(mask.dtype)


def image_features(images: torch.Tensor) -> torch.Tensor:
    """Per image, of its object (``object_mask``): fill of its bounding box, centroid height in it,
    fill of the box's top corners and of its bottom corners, whether it has a hole (its holes'
    share of its filled area, as a fraction of ``HOLE_SHARE``, at most 1), the box's aspect (log of
    width over height: a bar's is log 2, the other shapes' near 0), and warm-vs-cool hue.
    (B, 7); NaN-free."""
    mask = object_mask(images)                                          # (B, H, W)
    holes = enclosed_background(mask)
    hole = (holes.sum((1, 2)) / (holes + mask).sum((1, 2)).clamp(min=1) / HOLE_SHARE).clamp(0, 1)
    b, h, w = mask.shape
    ys = torch.arange(h, dtype=torch.float32)[None, :, None].expand(b, h, w)
    xs = torch.arange(w, dtype=torch.float32)[None, None, :].expand(b, h, w)
    features = []
    for i in range(b):
        m = mask[i] > 0
        if m.sum() < 16:
            features.append(torch.zeros(7))
            continue
        y, x = ys[i][m], xs[i][m]
        y0, y1 = torch.quantile(y, 0.01), torch.quantile(y, 0.99) + 1
        x0, x1 = torch.quantile(x, 0.01), torch.quantile(x, 0.99) + 1
        box = mask[i, int(y0):int(y1), int(x0):int(x1)]
        bh, bw = box.shape
        fill = box.mean()
        centroid = (y.mean() - y0) / max(float(y1 - y0), 1.0)
        top = box[: bh // 3, : bw // 3].mean() / 2 + box[: bh // 3, -(bw // 3):].mean() / 2 if bh >= 3 and bw >= 3 else fill
        bottom = box[-(bh // 3):, : bw // 3].mean() / 2 + box[-(bh // 3):, -(bw // 3):].mean() / 2 if bh >= 3 and bw >= 3 else fill
        warm = (images[i, 0][m] - images[i, 2][m]).mean()
        aspect = torch.log((x1 - x0) / (y1 - y0))
        features.append(torch.stack([fill, centroid, top, bottom, hole[i], aspect, warm]).float())
    return torch.nan_to_num(torch.stack(features))


@dataclasses.dataclass
class NearestCentroid:
    centroids: torch.Tensor  # (classes, features), standardised
    mean: torch.Tensor
    std: torch.Tensor

    @classmethod
    def fit(cls, images: torch.Tensor, labels: torch.Tensor) -> "NearestCentroid":
        features = image_features(images)
        mean, std = features.mean(0), features.std(0) + 1e-6
        z = (features - mean) / std
        centroids = torch.stack([z[labels == k].mean(0) for k in range(len(CLASSES))])
        return cls(centroids, mean, std)

    def predict(self, images: torch.Tensor) -> torch.Tensor:
        z = (image_features(images) - self.mean) / self.std
        return torch.cdist(z, self.centroids).argmin(1)

    def class_distance(self, images: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        """(B,): each image's distance to its own class's centre, in standardised features."""
        z = (image_features(images) - self.mean) / self.std
        return (z - self.centroids[labels]).norm(dim=1)


def fitted_classifier(seed: int = 7, count: int = 400) -> NearestCentroid:
    images, labels = dataset(count, seed)
    return NearestCentroid.fit(images, labels)
