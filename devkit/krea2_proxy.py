"""A small trained Krea-2 ("the proxy"): a model whose caching behaviour means something.

Seeded-random weights change a lot between steps, so threshold caching never triggers on them
and their images carry no content to lose. The proxy is ComfyUI's own Krea-2 (``SingleStreamDiT``
at a small size) trained with rectified flow, in ComfyUI's convention, on procedural images:

- the data set: 128x128 images of one shape (disc, ring, triangle, bar) of a random size, placed
  at random near the centre, in one of two colour schemes (warm or cool hues), on a grey gradient
  background. A class is (shape, scheme): 8 classes. The shapes differ over several of the
  model's tokens (16x16 pixels each): a ring's hole spans about three, a bar is twice as wide as
  high, where a square would differ from a disc only in its corner tokens, which a model this
  small draws round, and a cross's arms are two tokens wide, which it draws as a blob. The objects
  are large (radius 36-40% of the image: about six tokens across). A class's
  conditioning is one fixed seeded tensor, the one the test
  node ``Krea2TestConditioning`` makes with ``seed = class_seed(k)``; 10% of training samples get
  zero conditioning (what ``ConditioningZeroOut`` gives), so classifier-free guidance works;
- the latent codec: a fixed linear map of 8x8x3 pixel patches to 16 channels (PCA of the data
  set's patches, each component scaled to unit variance), so 128x128 pixels are 16x16 latents like
  Krea-2's VAE. ComfyUI keeps Krea-2 latents in the Wan 2.1 latent space: ``decode_comfy`` undoes
  that scaling first;
- training: ``x_t = sigma * noise + (1 - sigma) * x0``, target ``noise - x0``, timestep = sigma,
  with sigma drawn logit-normally, as rectified-flow image models are trained (most weight on the
  middle sigmas, where a sample's content is decided); adaLN-zero initialisation (every block
  starts as the identity).

This is dynamics, not Krea-2 quality: figures measured on it say how caching behaves on a model
that has learned something, never what real Krea-2 images lose.

``python -m devkit.krea2_proxy build`` (with ComfyUI's interpreter, from the repository root) trains
it; ``ensure_proxy()`` returns the cached build, taking the pinned build or training it first when the
cache has none. The cache lives outside the repository, in a folder named by the build id: the hash of
what decides the weights (``proxy_build``), so a changed setting, data set or training loop builds a
new proxy and a docstring or CLI edit does not.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve()
CHECKPOINT_NAME = "krea2_proxy.safetensors"
CODEC_NAME = "krea2_proxy_codec.safetensors"
BUILD_INFO_NAME = "build.json"

SHAPES = ("disc", "ring", "triangle", "bar")
SCHEMES = ("warm", "cool")
CLASSES = [f"{scheme} {shape}" for scheme in SCHEMES for shape in SHAPES]
CLASS_SEED_BASE = 1000  # class k's conditioning: Krea2TestConditioning(seed=CLASS_SEED_BASE + k)


@dataclasses.dataclass(frozen=True)
class ProxySettings:
    # The model: ComfyUI's head size is fixed at 128, so width 256 means 2 heads.
    features: int = 256
    layers: int = 8
    heads: int = 2
    kvheads: int = 1
    txtdim: int = 40
    txtlayers: int = 3
    tokens: int = 8
    # The images and the codec.
    image_size: int = 128
    codec_patch: int = 8
    channels: int = 16
    codec_images: int = 512
    # Training. How well a build learns the shapes depends on its seed: of seeds 0 and 1, both
    # trained, seed 1 drew them better on validation samples (uncached, 52 steps at CFG 3.5, noise
    # seeds 700-763, none of them the proxy tier's: 63 of 64 read as their class against 57).
    seed: int = 1
    # The objects: radius as a share of the image (base + span * u) and how far the centre strays
    # from the image's centre (a share of the image, either way).
    radius: tuple = (0.36, 0.04)
    placement: float = 0.06
    iterations: int = 1100
    batch: int = 16
    lr: float = 2e-3
    lr_final: float = 5e-5
    warmup: int = 30
    dropout: float = 0.1
    shift: float = 1.15   # Krea-2's time shift, as the ``simple`` schedule applies it when sampling
    threads: int = 1  # one thread: the same weights on any machine, and no stalls on a busy CPU

    @property
    def context_features(self) -> int:
        return self.txtlayers * self.txtdim

    @property
    def latent_size(self) -> int:
        return self.image_size // self.codec_patch

    def shape_kwargs(self) -> dict:
        """The architecture as ``krea2_synthetic.Krea2Shape`` arguments (for random weights of this shape)."""
        return dict(features=self.features, layers=self.layers, heads=self.heads, kvheads=self.kvheads,
                    txtdim=self.txtdim, txtlayers=self.txtlayers, channels=self.channels)


SETTINGS = ProxySettings()


def class_seed(k: int) -> int:
    return CLASS_SEED_BASE + k


def class_conditioning(k: int, settings: ProxySettings = SETTINGS) -> torch.Tensor:
    """Class ``k``'s conditioning, exactly as ``Krea2TestConditioning(seed=class_seed(k))`` makes it."""
    generator = torch.Generator().manual_seed(class_seed(k))
    return torch.randn((1, settings.tokens, settings.context_features), generator=generator)


# --- the data set --------------------------------------------------------------------------------

def _hsv_to_rgb(h: torch.Tensor, s: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """(B,) hue in [0, 1), saturation, value -> (B, 3) RGB."""
    k = torch.stack([(5 + h * 6) % 6, (3 + h * 6) % 6, (1 + h * 6) % 6], dim=1)
    return v[:, None] - v[:, None] * s[:, None] * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def _signed_distance(shape: int, dx: torch.Tensor, dy: torch.Tensor, r: torch.Tensor) -> torch.Tensor:
    """Approximate signed distance (pixels, negative inside) of each pixel to a shape of radius r."""
    if SHAPES[shape] == "disc":
        return torch.sqrt(dx * dx + dy * dy) - r
    if SHAPES[shape] == "ring":  # a disc with a hole of half its radius
        return (torch.sqrt(dx * dx + dy * dy) - 0.75 * r).abs() - 0.25 * r
    if SHAPES[shape] == "triangle":  # apex up: the two slanted edges and the base as half-planes
        half_height = 0.9 * r
        edge = (dx.abs() * 2 * half_height - r * (dy + half_height)) / torch.sqrt(4 * half_height ** 2 + r ** 2)
        return torch.maximum(edge, dy - half_height)
    return torch.maximum(dx.abs() - r, dy.abs() - r / 2)  # bar: a rectangle twice as wide as high


def sample_images(labels: torch.Tensor, generator: torch.Generator, size: int = SETTINGS.image_size,
                  settings: ProxySettings = SETTINGS) -> torch.Tensor:
    """Images (B, 3, size, size) in [0, 1] of the given classes, drawn from ``generator``."""
    b = labels.shape[0]
    u = torch.rand((b, 12), generator=generator)
    coords = torch.arange(size, dtype=torch.float32) + 0.5
    ys, xs = coords[:, None], coords[None, :]
    # Background: a grey gradient in a random direction between two random levels.
    angle = u[:, 0] * 2 * math.pi
    ramp = ((xs - size / 2) * torch.cos(angle)[:, None, None] + (ys - size / 2) * torch.sin(angle)[:, None, None]) / size + 0.5
    low, high = 0.15 + 0.35 * u[:, 1], 0.5 + 0.35 * u[:, 2]
    background = (low[:, None, None] + (high - low)[:, None, None] * ramp.clamp(0, 1))[:, None].expand(b, 3, size, size)
    # The object: size, place (fully inside), hue by scheme.
    base, span = settings.radius
    r = size * (base + span * u[:, 3])
    cx = size * (0.5 + settings.placement * (2 * u[:, 4] - 1))
    cy = size * (0.5 + settings.placement * (2 * u[:, 5] - 1))
    schemes = labels // len(SHAPES)
    hue = torch.where(schemes == 0, 0.0 + 0.1 * u[:, 6], 0.53 + 0.12 * u[:, 6])
    colour = _hsv_to_rgb(hue, 0.75 + 0.25 * u[:, 7], 0.75 + 0.25 * u[:, 8])
    dx, dy = xs - cx[:, None, None], ys - cy[:, None, None]
    radius = r[:, None, None]
    distance = torch.stack([_signed_distance(k, dx, dy, radius) for k in range(len(SHAPES))], dim=1)
    distance = distance.gather(1, (labels % len(SHAPES))[:, None, None, None].expand(b, 1, size, size))
    mask = (0.5 - distance).clamp(0, 1)  # one pixel of anti-aliased edge
    images = background * (1 - mask) + colour[:, :, None, None] * mask
    return images


def dataset(count: int, seed: int, settings: ProxySettings = SETTINGS) -> tuple[torch.Tensor, torch.Tensor]:
    """``count`` labelled images, balanced over the classes, from ``seed``."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % len(CLASSES)
    return sample_images(labels, generator, settings.image_size, settings), labels


# --- the latent codec ------------------------------------------------------------------------------

@dataclasses.dataclass
class PatchCodec:
    """Linear 8x8x3-patch codec: ``latent = (patch - mean) @ basis / scale`` per patch."""

    mean: torch.Tensor    # (P,)   P = 3 * patch * patch
    basis: torch.Tensor   # (P, C)
    scale: torch.Tensor   # (C,)
    patch: int
    comfy_mean: torch.Tensor | None = None  # (C,) ComfyUI's latent format for Krea-2 (Wan 2.1)
    comfy_std: torch.Tensor | None = None

    @classmethod
    def fit(cls, images: torch.Tensor, channels: int, patch: int) -> "PatchCodec":
        patches = _to_patches(images.double(), patch).reshape(-1, 3 * patch * patch)
        mean = patches.mean(0)
        covariance = (patches - mean).T @ (patches - mean) / patches.shape[0]
        values, vectors = torch.linalg.eigh(covariance)
        order = torch.argsort(values, descending=True)[:channels]
        basis = vectors[:, order]
        basis = basis * torch.sign(basis.sum(0, keepdim=True) + 1e-12)  # a fixed sign per component
        return cls(mean.float(), basis.float(), values[order].sqrt().float(), patch)

    def encode(self, images: torch.Tensor) -> torch.Tensor:
        """(B, 3, H, W) in [0, 1] -> (B, C, H/patch, W/patch), unit variance per channel."""
        patches = _to_patches(images.float(), self.patch)  # (B, h, w, P)
        latent = (patches - self.mean) @ self.basis / self.scale
        return latent.permute(0, 3, 1, 2).contiguous()

    def decode(self, latent: torch.Tensor) -> torch.Tensor:
        """(B, C, h, w) -> (B, 3, h*patch, w*patch), clamped to [0, 1]."""
        latent = latent.float().permute(0, 2, 3, 1)
        patches = (latent * self.scale) @ self.basis.T + self.mean
        b, h, w, _ = patches.shape
        p = self.patch
        images = patches.reshape(b, h, w, 3, p, p).permute(0, 3, 1, 4, 2, 5).reshape(b, 3, h * p, w * p)
        return images.clamp(0, 1)

    def decode_comfy(self, samples: torch.Tensor) -> torch.Tensor:
        """Decode a ComfyUI Krea-2 LATENT: the sampler returns latents in the Wan 2.1 latent space
        (``comfy.latent_formats.Wan21.process_out``); its per-channel mean and std, stored with the
        codec at build time, take them back to the model's space first."""
        if samples.ndim == 5:  # (B, C, T, H, W) with T = 1
            samples = samples[:, :, 0]
        model_space = (samples.float() - self.comfy_mean[:, None, None]) / self.comfy_std[:, None, None]
        return self.decode(model_space)

    def tensors(self) -> dict:
        return {"mean": self.mean, "basis": self.basis, "scale": self.scale, "patch": torch.tensor(self.patch),
                "comfy_mean": self.comfy_mean, "comfy_std": self.comfy_std}

    @classmethod
    def from_tensors(cls, tensors: dict) -> "PatchCodec":
        return cls(tensors["mean"], tensors["basis"], tensors["scale"], int(tensors["patch"]),
                   tensors["comfy_mean"], tensors["comfy_std"])

    @classmethod
    def load(cls, path) -> "PatchCodec":
        from safetensors.torch import load_file

        return cls.from_tensors(load_file(str(path)))


def _to_patches(images: torch.Tensor, patch: int) -> torch.Tensor:
    b, c, h, w = images.shape
    return images.reshape(b, c, h // patch, patch, w // patch, patch).permute(0, 2, 4, 1, 3, 5).reshape(
        b, h // patch, w // patch, c * patch * patch)


# --- the model and its training ----------------------------------------------------------------------

# What is not the recipe (proxy_build.recipe_source): the cache and CLI plumbing, file names, this list.
NOT_RECIPE = ("HERE", "CACHE_ENV", "CHECKPOINT_NAME", "CODEC_NAME", "BUILD_INFO_NAME", "NOT_RECIPE", "KIND",
              "build_id", "cache_dir", "Proxy", "EXPECTED_BUILD_MINUTES", "is_built", "ensure_proxy", "main")
KIND = "proxy"


def build_id(settings: ProxySettings = SETTINGS) -> str:
    """This recipe's build id (see proxy_build): the name of its cache folder and its pinned build."""
    from devkit import proxy_build

    return proxy_build.build_id(KIND, proxy_build.recipe_hash(HERE, NOT_RECIPE, dataclasses.asdict(settings)))


def cache_dir(settings: ProxySettings = SETTINGS) -> Path:
    from devkit import proxy_build

    return proxy_build.cache_root() / f"{KIND}-{build_id(settings)}"


def _import_comfy(comfy_root: Path):
    """ComfyUI's model code, set up for training on the CPU: PyTorch attention, and ``in_training``
    (its fused RoPE kernel has no backward)."""
    from devkit.comfy_harness import put_comfyui_on_path

    put_comfyui_on_path(comfy_root)
    import comfy.options

    comfy.options.enable_args_parsing(False)
    import comfy.cli_args

    comfy.cli_args.args.cpu = True
    comfy.cli_args.args.use_pytorch_cross_attention = True
    import comfy.model_management

    comfy.model_management.in_training = True
    import comfy.ldm.krea2.model

    return comfy.ldm.krea2.model


def build_model(krea2, settings: ProxySettings):
    s = settings
    model = krea2.SingleStreamDiT(features=s.features, heads=s.heads, kvheads=s.kvheads, layers=s.layers,
                                  txtdim=s.txtdim, txtlayers=s.txtlayers, channels=s.channels, patch=2,
                                  dtype=torch.float32, device="cpu", operations=torch.nn)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith(".scale"):         # RMSNorm, stored zero-centred: identity
                parameter.zero_()
            elif name.endswith("mod.lin") or name.endswith("modulation.lin"):
                parameter.zero_()
        # adaLN-zero: every block's modulation (shift, scale and gate) and the output layer start at
        # zero, and the timestep reaches the modulation through a zero projection at first.
        model.tproj[1].weight.zero_()
        model.tproj[1].bias.zero_()
        model.last.linear.weight.zero_()
        model.last.linear.bias.zero_()
    return model


def training_sigmas(batch: int, generator: torch.Generator) -> torch.Tensor:
    """Logit-normal sigmas (the logit of sigma is a standard normal): the middle of the schedule,
    where the shape and its place are decided, gets the most training."""
    return torch.sigmoid(torch.randn(batch, generator=generator)).clamp(1e-3, 1.0)


def train(comfy_root: Path, out_dir: Path, settings: ProxySettings = SETTINGS, progress: bool = True) -> dict:
    from safetensors.torch import save_file
    from tqdm import tqdm

    s = settings
    krea2 = _import_comfy(comfy_root)
    torch.set_num_threads(s.threads)
    torch.manual_seed(s.seed)
    started, cpu_started = time.perf_counter(), time.process_time()

    codec_images, _ = dataset(s.codec_images, seed=s.seed + 1, settings=s)  # the images it trains on
    codec = PatchCodec.fit(codec_images, s.channels, s.codec_patch)
    from comfy.latent_formats import Wan21

    codec.comfy_mean, codec.comfy_std = Wan21().latents_mean.flatten().float(), Wan21().latents_std.flatten().float()
    model = build_model(krea2, s).train()
    conditions = torch.cat([class_conditioning(k, s) for k in range(len(CLASSES))])
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.99), weight_decay=0.0)

    def lr_at(i):
        if i < s.warmup:
            return s.lr * (i + 1) / s.warmup
        progress_ = (i - s.warmup) / max(1, s.iterations - s.warmup)
        return s.lr_final + (s.lr - s.lr_final) * 0.5 * (1 + math.cos(math.pi * progress_))

    data = torch.Generator().manual_seed(s.seed + 2)
    losses = []
    bar = tqdm(range(s.iterations), desc="Training the Krea-2 proxy", unit="it", disable=not progress,
               mininterval=2.0, file=sys.stderr)
    for i in bar:
        labels = torch.randint(0, len(CLASSES), (s.batch,), generator=data)
        x0 = codec.encode(sample_images(labels, data, s.image_size, s))
        noise = torch.randn(x0.shape, generator=data)
        sigma = training_sigmas(s.batch, data)
        keep = (torch.rand(s.batch, generator=data) >= s.dropout).float()[:, None, None]
        context = conditions[labels] * keep
        x_t = sigma[:, None, None, None] * noise + (1 - sigma[:, None, None, None]) * x0
        prediction = model(x_t, sigma, context)
        loss = torch.nn.functional.mse_loss(prediction, noise - x0)
        for group in optimizer.param_groups:
            group["lr"] = lr_at(i)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        losses.append(float(loss.detach()))
        if i % 10 == 0:
            bar.set_postfix(loss=f"{sum(losses[-50:]) / len(losses[-50:]):.4f}")
    bar.close()

    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out_dir / CHECKPOINT_NAME))
    save_file(codec.tensors(), str(out_dir / CODEC_NAME))
    info = {"generator_hash": build_id(s), "settings": dataclasses.asdict(s),
            "wall_s": round(time.perf_counter() - started, 1), "cpu_s": round(time.process_time() - cpu_started, 1),
            "final_loss": sum(losses[-50:]) / len(losses[-50:]), "first_loss": sum(losses[:10]) / 10,
            "weights_sha256": hashlib.sha256((out_dir / CHECKPOINT_NAME).read_bytes()).hexdigest(),
            "torch": torch.__version__}
    (out_dir / BUILD_INFO_NAME).write_text(json.dumps(info, indent=2))
    return info


# --- the cached build ---------------------------------------------------------------------------------

@dataclasses.dataclass
class Proxy:
    checkpoint: Path
    codec: PatchCodec
    info: dict
    settings: ProxySettings = SETTINGS

    def decode(self, samples: torch.Tensor) -> torch.Tensor:
        """A ComfyUI LATENT's samples -> images (B, 3, H, W) in [0, 1]."""
        return self.codec.decode_comfy(samples)


# Rough cost of a build, for the message before one starts (measured on a quiet 2-core machine).
EXPECTED_BUILD_MINUTES = 13


def is_built(settings: ProxySettings = SETTINGS) -> bool:
    return (cache_dir(settings) / BUILD_INFO_NAME).is_file()


def ensure_proxy(comfy_root: Path | None = None, settings: ProxySettings = SETTINGS, quiet: bool = False) -> Proxy:
    """The proxy: its checkpoint path (ComfyUI's native format), codec and build record; taken from
    the pinned build or, when there is none, trained first (in ComfyUI's interpreter, with a progress
    bar) when the cache has no build of this recipe."""
    from devkit import proxy_build

    folder = cache_dir(settings)
    info = proxy_build.ensure_built(folder, CHECKPOINT_NAME, "devkit.krea2_proxy",
                                    f"Training a small Krea-2 proxy once (about {EXPECTED_BUILD_MINUTES} minutes on "
                                    f"2 CPU cores)", comfy_root, quiet)
    return Proxy(folder / CHECKPOINT_NAME, PatchCodec.load(folder / CODEC_NAME), info, settings)


def main(argv: list[str]) -> int:
    from devkit import proxy_build

    return proxy_build.build_main(argv, "Krea-2 proxy", SETTINGS, cache_dir, ensure_proxy, train,
                                  lambda info: f"loss {info['first_loss']:.3f} -> {info['final_loss']:.4f}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
