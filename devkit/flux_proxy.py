"""A small trained Flux ("the Flux proxy"): evidence for the families that share Flux's architecture.

ComfyUI's own ``comfy.ldm.flux.model.Flux`` at a small size (width 256, 2 heads of 128, 2 double-stream
and 4 single-stream blocks, a pooled vector ``y`` beside the text tokens), trained with rectified flow
on the Krea-2 proxy's data set (``krea2_proxy``: the same procedural images, classes, class
conditionings and 8x8-patch codec), so its figures stand beside the Krea-2 proxy's on the same images:

- its conditioning is what the test node ``Krea2TestConditioning`` makes for class k with
  ``seed = class_seed(k)``, 8 tokens of 120 features and a pooled vector of 64 (Flux.1's CLIP-L
  ``pooled_output``, here part of the class's identity); 10% of training samples get both zeroed
  (what ``ConditioningZeroOut`` gives), so classifier-free guidance works;
- no guidance embedding: ComfyUI detects it as Flux.1 without ``guidance_in`` (its ``FluxSchnell``
  config: shift 1.0). It is a base model sampled with CFG (3.5, 20-28 steps), as Chroma, Flux.2
  Klein base and de-distilled Flux.1 fine-tunes are run; not a guidance-distilled Flux.1 dev;
- its latents in ComfyUI's Flux latent space: ``decode_comfy`` undoes Flux's shift and scale first.

Flux's blocks add into their inputs in place (``img += ...``), which autograd refuses once a norm
has saved them: training keeps a copy of each saved tensor (``saved_tensors_hooks``), the same
gradients at the cost of some memory.

After training, the build samples held-out images (noise seeds no benchmark or test uses) at the
recipe's step count and at very few steps, and writes what the proxy classifier reads into the
build record (``held_out``).

This is dynamics, not Flux quality. ``python -m devkit.flux_proxy build`` trains it;
``ensure_flux_proxy()`` returns the cached build, taking the pinned one or training it first.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from pathlib import Path

import torch

from devkit import krea2_proxy as data

HERE = Path(__file__).resolve()
CHECKPOINT_NAME = "flux_proxy.safetensors"
CODEC_NAME = "flux_proxy_codec.safetensors"
BUILD_INFO_NAME = "build.json"


@dataclasses.dataclass(frozen=True)
class FluxProxySettings:
    # The model: ComfyUI reads the heads as width // 128 (Flux.1's rotary axes) and the block counts
    # from the keys.
    features: int = 256
    double_blocks: int = 2
    single_blocks: int = 4
    tokens: int = 8
    context_features: int = 120   # the Krea-2 proxy's text width: the same class conditionings
    pooled_features: int = 64
    # The images and the codec (the Krea-2 proxy's).
    image_size: int = 128
    codec_patch: int = 8
    channels: int = 16
    codec_images: int = 512
    seed: int = 1
    iterations: int = 1100
    batch: int = 16
    lr: float = 2e-3
    lr_final: float = 5e-5
    warmup: int = 30
    dropout: float = 0.1
    threads: int = 1  # one thread: the same weights on any machine, and no stalls on a busy CPU


SETTINGS = FluxProxySettings()


@dataclasses.dataclass(frozen=True)
class HeldOutCheck:
    """The build's check of what it learned, on noise seeds of their own: its samples at the recipe's step
    count (the first) and at fewer, down to a single step (one prediction: the blurred mean of what the
    class may become). It judges the weights and does not make them (not part of the build id)."""

    steps: tuple = (20, 4, 2, 1)
    cfg: float = 3.5
    seeds: tuple = (900, 901, 902, 903)


HELD_OUT = HeldOutCheck()


def class_conditioning(k: int, settings: FluxProxySettings = SETTINGS) -> tuple[torch.Tensor, torch.Tensor]:
    """Class ``k``'s text tokens and pooled vector, exactly as ``Krea2TestConditioning(seed=class_seed(k),
    pooled_features=...)`` makes them (the same generator, tokens first)."""
    generator = torch.Generator().manual_seed(data.class_seed(k))
    context = torch.randn((1, settings.tokens, settings.context_features), generator=generator)
    pooled = torch.randn((1, settings.pooled_features), generator=generator)
    return context, pooled


# What is not the recipe (proxy_build.recipe_source): the cache and CLI plumbing, file names, the
# held-out check (it judges the weights, it does not make them), this list.
NOT_RECIPE = ("HERE", "CHECKPOINT_NAME", "CODEC_NAME", "BUILD_INFO_NAME", "NOT_RECIPE", "KIND", "build_id",
              "cache_dir", "FluxProxy", "EXPECTED_BUILD_MINUTES", "is_built", "ensure_flux_proxy", "summary", "main",
              "HeldOutCheck", "HELD_OUT", "comfy_sigmas", "sample", "held_out_figures")
KIND = "flux-proxy"


def build_id(settings: FluxProxySettings = SETTINGS) -> str:
    """This recipe's build id (see proxy_build): it covers the Krea-2 proxy's recipe too, whose data
    set and codec this one trains on."""
    from devkit import proxy_build

    shared = proxy_build.recipe_source(Path(data.__file__), data.NOT_RECIPE)
    return proxy_build.build_id(KIND, proxy_build.recipe_hash(HERE, NOT_RECIPE, dataclasses.asdict(settings), shared))


def cache_dir(settings: FluxProxySettings = SETTINGS) -> Path:
    from devkit import proxy_build

    return proxy_build.cache_root() / f"{KIND}-{build_id(settings)}"


def _import_flux(comfy_root: Path):
    data._import_comfy(comfy_root)   # CPU, PyTorch attention, ``in_training`` (the rotary kernel has no backward)
    import comfy.ldm.flux.model

    return comfy.ldm.flux.model


def build_model(flux, settings: FluxProxySettings):
    s = settings
    model = flux.Flux(in_channels=s.channels, out_channels=s.channels, vec_in_dim=s.pooled_features,
                      context_in_dim=s.context_features, hidden_size=s.features, mlp_ratio=4.0,
                      num_heads=s.features // 128, depth=s.double_blocks, depth_single_blocks=s.single_blocks,
                      axes_dim=[16, 56, 56], theta=10000, patch_size=2, qkv_bias=True, guidance_embed=False,
                      txt_ids_dims=[], dtype=torch.float32, device="cpu", operations=torch.nn)
    with torch.no_grad():
        # adaLN-zero: every block's modulation (shift, scale and gate) and the output layer start at
        # zero, so every block starts as the identity and the output at zero.
        for name, parameter in model.named_parameters():
            if ".lin." in name or "adaLN_modulation" in name:
                parameter.zero_()
        model.final_layer.linear.weight.zero_()
        model.final_layer.linear.bias.zero_()
    return model


def comfy_latent_format():
    """(mean, std) per channel that take the model's latents to ComfyUI's Flux latent space and back
    (``process_in``: ``(latent - shift) * scale``)."""
    from comfy.latent_formats import Flux

    flux = Flux()
    channels = flux.latent_channels
    return torch.full((channels,), flux.shift_factor), torch.full((channels,), 1.0 / flux.scale_factor)


def train(comfy_root: Path, out_dir: Path, settings: FluxProxySettings = SETTINGS, progress: bool = True) -> dict:
    from safetensors.torch import save_file
    from tqdm import tqdm

    s = settings
    flux = _import_flux(comfy_root)
    torch.set_num_threads(s.threads)
    torch.manual_seed(s.seed)
    started, cpu_started = time.perf_counter(), time.process_time()

    codec_images, _ = data.dataset(s.codec_images, seed=s.seed + 1)
    codec = data.PatchCodec.fit(codec_images, s.channels, s.codec_patch)
    codec.comfy_mean, codec.comfy_std = comfy_latent_format()
    model = build_model(flux, s).train()
    conditions = [class_conditioning(k, s) for k in range(len(data.CLASSES))]
    contexts = torch.cat([context for context, _ in conditions])
    pooled = torch.cat([vector for _, vector in conditions])
    optimizer = torch.optim.AdamW(model.parameters(), lr=s.lr, betas=(0.9, 0.99), weight_decay=0.0)

    def lr_at(i):
        if i < s.warmup:
            return s.lr * (i + 1) / s.warmup
        progress_ = (i - s.warmup) / max(1, s.iterations - s.warmup)
        return s.lr_final + (s.lr - s.lr_final) * 0.5 * (1 + math.cos(math.pi * progress_))

    generator = torch.Generator().manual_seed(s.seed + 2)
    losses = []
    bar = tqdm(range(s.iterations), desc="Training the Flux proxy", unit="it", disable=not progress,
               mininterval=2.0, file=sys.stderr)
    for i in bar:
        labels = torch.randint(0, len(data.CLASSES), (s.batch,), generator=generator)
        x0 = codec.encode(data.sample_images(labels, generator, s.image_size))
        noise = torch.randn(x0.shape, generator=generator)
        sigma = data.training_sigmas(s.batch, generator)
        keep = (torch.rand(s.batch, generator=generator) >= s.dropout).float()
        x_t = sigma[:, None, None, None] * noise + (1 - sigma[:, None, None, None]) * x0
        # A copy of each tensor autograd saves: Flux's blocks add into their inputs in place.
        with torch.autograd.graph.saved_tensors_hooks(torch.clone, lambda saved: saved):
            prediction = model(x_t, sigma, contexts[labels] * keep[:, None, None], y=pooled[labels] * keep[:, None])
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
    train_s = time.perf_counter() - started

    out_dir.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in model.state_dict().items()}
    save_file(state, str(out_dir / CHECKPOINT_NAME))
    save_file(codec.tensors(), str(out_dir / CODEC_NAME))
    from devkit import proxy_build

    info = {"generator_hash": build_id(s), "settings": dataclasses.asdict(s),
            "train_wall_s": round(train_s, 1),
            "final_loss": sum(losses[-50:]) / len(losses[-50:]), "first_loss": sum(losses[:10]) / 10,
            "held_out": held_out_figures(model.eval(), codec, s, HELD_OUT),
            "weights_sha256": proxy_build.weights_sha256(out_dir / CHECKPOINT_NAME), "torch": torch.__version__}
    info["wall_s"] = round(time.perf_counter() - started, 1)
    info["cpu_s"] = round(time.process_time() - cpu_started, 1)
    (out_dir / BUILD_INFO_NAME).write_text(json.dumps(info, indent=2))
    return info


# --- the held-out check ------------------------------------------------------------------------------

def comfy_sigmas(steps: int) -> torch.Tensor:
    """ComfyUI's ``simple`` schedule of ``steps`` steps for the config it detects this model as
    (``FluxSchnell``: no guidance embedding, flow sampling at shift 1.0)."""
    import comfy.model_base
    import comfy.samplers
    import comfy.supported_models

    config = comfy.supported_models.FluxSchnell({"image_model": "flux", "guidance_embed": False})
    sampling = comfy.model_base.model_sampling(config, comfy.model_base.ModelType.FLOW)
    return comfy.samplers.calculate_sigmas(sampling, "simple", steps).float()


@torch.no_grad()
def sample(model, labels: torch.Tensor, seed: int, steps: int, cfg: float, settings: FluxProxySettings) -> torch.Tensor:
    """Latents (B, C, h, w) of the given classes by Euler with classifier-free guidance, from ``seed``'s noise."""
    conditions = [class_conditioning(int(k), settings) for k in labels]
    context = torch.cat([c for c, _ in conditions])
    pooled = torch.cat([p for _, p in conditions])
    size = settings.image_size // settings.codec_patch
    x = torch.randn((len(labels), settings.channels, size, size), generator=torch.Generator().manual_seed(seed))
    sigmas = comfy_sigmas(steps)
    for sigma, sigma_next in zip(sigmas[:-1], sigmas[1:]):
        t = sigma.expand(len(labels))
        cond = model(x, t, context, y=pooled)
        uncond = model(x, t, torch.zeros_like(context), y=torch.zeros_like(pooled))
        x = x + (sigma_next - sigma) * (uncond + cfg * (cond - uncond))
    return x


def held_out_figures(model, codec, settings: FluxProxySettings, check: HeldOutCheck) -> dict:
    """What the proxy classifier reads in held-out samples, one per class and seed, at each of the check's
    step counts: the share read as their class and the mean distance to their class's centre."""
    from devkit.proxy_classifier import fitted_classifier

    classifier = fitted_classifier()
    labels = torch.arange(len(data.CLASSES))
    every = labels.repeat(len(check.seeds))
    figures = {"cfg": check.cfg, "seeds": list(check.seeds), "samples": len(every), "recipe_steps": check.steps[0],
               "by_steps": {}}
    for steps in check.steps:
        images = torch.cat([codec.decode(sample(model, labels, seed, steps, check.cfg, settings)) for seed in check.seeds])
        figures["by_steps"][str(steps)] = {
            "accuracy": float((classifier.predict(images) == every).float().mean()),
            "class_distance": float(classifier.class_distance(images, every).mean())}
    return figures


# --- the cached build ---------------------------------------------------------------------------------

@dataclasses.dataclass
class FluxProxy:
    checkpoint: Path
    codec: data.PatchCodec
    info: dict
    settings: FluxProxySettings = SETTINGS

    def decode(self, samples: torch.Tensor) -> torch.Tensor:
        """A ComfyUI LATENT's samples -> images (B, 3, H, W) in [0, 1]."""
        return self.codec.decode_comfy(samples)


# Rough cost of a build, for the message before one starts (measured on a quiet 2-core machine).
EXPECTED_BUILD_MINUTES = 13


def is_built(settings: FluxProxySettings = SETTINGS) -> bool:
    return (cache_dir(settings) / BUILD_INFO_NAME).is_file()


def ensure_flux_proxy(comfy_root: Path | None = None, settings: FluxProxySettings = SETTINGS,
                      quiet: bool = False) -> FluxProxy:
    """The Flux proxy: its checkpoint path (ComfyUI's native Flux format), codec and build record; taken
    from the pinned build or, when there is none, trained first (in ComfyUI's interpreter, with a
    progress bar) when the cache has no build of this recipe."""
    from devkit import proxy_build

    folder = cache_dir(settings)
    info = proxy_build.ensure_built(folder, CHECKPOINT_NAME, "devkit.flux_proxy",
                                    f"Training a small Flux proxy once (about {EXPECTED_BUILD_MINUTES} minutes of one "
                                    f"CPU core)", comfy_root, quiet)
    return FluxProxy(folder / CHECKPOINT_NAME, data.PatchCodec.load(folder / CODEC_NAME), info, settings)


def summary(info: dict) -> str:
    read = ", ".join(f"{figures['accuracy']:.0%} at {steps} steps" for steps, figures in info["held_out"]["by_steps"].items())
    return f"loss {info['first_loss']:.3f} -> {info['final_loss']:.4f}; held out, read as their class: {read}"


def main(argv: list[str]) -> int:
    from devkit import proxy_build

    return proxy_build.build_main(argv, "Flux proxy", SETTINGS, cache_dir, ensure_flux_proxy, train, summary)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
