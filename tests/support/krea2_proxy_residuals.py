"""What drives the proxy's residual changes (devkit/krea2_proxy.py): the latent being drawn, or the timestep.

The cache decides from the first block's relative residual change between steps. On a model that has
learned content that change follows the image being drawn; on one that has not, it follows the
timestep path, nearly the same for every prompt. ``residual_changes`` splits each step's change into
the two parts by re-running the block with the latent held fixed and only the timestep moved.

The runs follow ComfyUI's own 8-step ``simple`` schedule for Krea-2 (the sigmas the server samples, and
the only ones the Turbo proxy was distilled at). Either model: the trained proxy (``--proxy base``, the
52-step regime's) or the Turbo proxy distilled from it (``--proxy turbo``, the 8-step regime's).

Run with ComfyUI's interpreter and the repository root on the path (it imports ``devkit``):
``PYTHONPATH=. python tests/support/krea2_proxy_residuals.py --cases 0:0,4:0 [--proxy turbo]`` prints JSON.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

HERE = Path(__file__).resolve()


def residual_changes(comfy_root: Path, proxy, cases: list[tuple[int, int]], steps: int = 8) -> list[dict]:
    """Per (class, seed): the first block's relative residual change between consecutive steps of an
    uncached Euler run at CFG 1 (``mean|r_i - r_i-1| / mean|r_i-1|``, as the cache compares them), and
    its two parts, both relative to ``mean|r_i-1|``: the latent moving (``r(x_i, s_i) - r(x_i-1, s_i)``)
    and the timestep alone (``r(x_i-1, s_i) - r(x_i-1, s_i-1)``)."""
    from safetensors.torch import load_file

    from devkit.krea2_proxy import _import_comfy, build_model, class_conditioning
    from devkit.krea2_turbo_proxy import comfy_sigmas

    settings = proxy.settings
    torch.set_num_threads(settings.threads)
    model = build_model(_import_comfy(comfy_root), settings).eval()
    model.load_state_dict(load_file(str(proxy.checkpoint)))
    captured = {}

    def keep_image_residual(module, args, output):  # the text tokens come first in the joint sequence
        captured["residual"] = (output - args[0])[:, settings.tokens:]

    model.blocks[0].register_forward_hook(keep_image_residual)

    def residual_and_velocity(x, sigma, context):
        velocity = model(x, sigma.expand(x.shape[0]), context)
        return captured["residual"], velocity

    sigmas = comfy_sigmas(steps)
    size = settings.latent_size
    rows = []
    with torch.no_grad():
        for label, seed in cases:
            context = class_conditioning(label, settings)
            x = torch.randn((1, settings.channels, size, size), generator=torch.Generator().manual_seed(seed))
            previous, velocity = residual_and_velocity(x, sigmas[0], context)
            changes, latent_parts, timestep_parts = [], [], []
            for i in range(1, steps):
                x_next = x + (sigmas[i] - sigmas[i - 1]) * velocity
                held, _ = residual_and_velocity(x, sigmas[i], context)
                current, velocity = residual_and_velocity(x_next, sigmas[i], context)
                norm = previous.abs().mean()
                changes.append(float((current - previous).abs().mean() / norm))
                latent_parts.append(float((current - held).abs().mean() / norm))
                timestep_parts.append(float((held - previous).abs().mean() / norm))
                previous, x = current, x_next
            rows.append({"label": label, "seed": seed, "changes": changes, "latent": latent_parts,
                         "timestep": timestep_parts})
    return rows


def ensure_model(name: str, comfy_root: Path):
    """The proxy ``name`` names (base or turbo), from its cache."""
    from devkit.krea2_proxy import ensure_proxy
    from devkit.krea2_turbo_proxy import ensure_turbo_proxy

    return (ensure_turbo_proxy if name == "turbo" else ensure_proxy)(comfy_root, quiet=True)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="The proxy's residual changes, split into latent and timestep parts.")
    parser.add_argument("--comfyui", type=Path, help="the ComfyUI checkout whose model code runs it")
    parser.add_argument("--cases", default="0:0,4:0", help="label:seed pairs, comma-separated")
    parser.add_argument("--proxy", choices=("base", "turbo"), default="base",
                        help="the trained proxy (base) or the Turbo proxy distilled from it (turbo)")
    args = parser.parse_args(argv)
    from devkit.comfy_harness import find_comfyui

    comfy_root = args.comfyui or find_comfyui()
    cases = [tuple(int(v) for v in case.split(":")) for case in args.cases.split(",")]
    print(json.dumps(residual_changes(comfy_root, ensure_model(args.proxy, comfy_root), cases)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
