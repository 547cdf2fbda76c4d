"""What the two methods see on a trained proxy, step by step: each block list's first-block residual change
(what DBCache compares with its threshold) and the final layer's input moving (what the Forecast node
forecasts), along an uncached Euler run of ComfyUI's ``simple`` schedule.

The lists and the final layer are the ones the pack's registry names for the model's class, so the same
measure reads the Krea-2 proxies (one list) and the Flux proxy (double- and single-stream lists). Changes
are relative, as cache-dit compares them: ``mean|r_i - r_i-1| / mean|r_i-1|`` of the cond pass, at the
model's CFG (cond and uncond computed, combined as ComfyUI does).

Run with ComfyUI's interpreter and the repository root on the path (it imports ``devkit``):
``PYTHONPATH=. python tests/support/proxy_step_changes.py --proxy flux --steps 20 --cfg 3.5`` prints JSON.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

import torch

PROXIES = ("base", "turbo", "flux")


def load(name: str, comfy_root: Path):
    """(model in eval mode, its class conditioning, the sigmas of a ``steps`` run, the proxy's call) for a proxy name."""
    from safetensors.torch import load_file

    if name == "flux":
        from devkit import flux_proxy

        proxy = flux_proxy.ensure_flux_proxy(comfy_root, quiet=True)
        model = flux_proxy.build_model(flux_proxy._import_flux(comfy_root), proxy.settings)
        condition = lambda label: flux_proxy.class_conditioning(label, proxy.settings)  # noqa: E731
        call = lambda x, t, cond: model(x, t, cond[0], y=cond[1])  # noqa: E731
        zero = lambda cond: tuple(torch.zeros_like(part) for part in cond)  # noqa: E731
        sigmas, size = flux_proxy.comfy_sigmas, proxy.settings.image_size // proxy.settings.codec_patch
    else:
        from devkit import krea2_proxy, krea2_turbo_proxy

        proxy = (krea2_turbo_proxy.ensure_turbo_proxy if name == "turbo" else krea2_proxy.ensure_proxy)(
            comfy_root, quiet=True)
        settings = krea2_proxy.SETTINGS
        model = krea2_proxy.build_model(krea2_proxy._import_comfy(comfy_root), settings)
        condition = lambda label: krea2_proxy.class_conditioning(label, settings)  # noqa: E731
        call = lambda x, t, cond: model(x, t, cond)  # noqa: E731
        zero = torch.zeros_like
        sigmas, size = krea2_turbo_proxy.comfy_sigmas, settings.latent_size
    model.load_state_dict(load_file(str(proxy.checkpoint)))
    return model.eval(), condition, zero, call, sigmas, size


def watch(model) -> tuple[dict, list[str]]:
    """Hooks that keep, per call, each registry list's first-block residual and the final layer's input."""
    from krea2_cachedit.adapters.families.registry import family_of

    family = family_of(model)
    seen, names = {}, [entry.attr for entry in family.block_lists]
    for name in names:
        first = getattr(model, name)[0]

        def before(module, args, kwargs, name=name):   # a copy: Flux's blocks add into their inputs in place
            hidden = kwargs.get("img", args[0] if args else None)
            seen[f"{name} in"] = hidden.clone()

        def after(module, args, kwargs, output, name=name):
            hidden = output[0] if isinstance(output, tuple) else output
            seen[name] = hidden - seen.pop(f"{name} in")

        first.register_forward_pre_hook(before, with_kwargs=True)
        first.register_forward_hook(after, with_kwargs=True)
    getattr(model, family.final_layer).register_forward_pre_hook(
        lambda module, args, kwargs: seen.__setitem__("final layer input", (args[0] if args else kwargs["x"]).clone()),
        with_kwargs=True)
    return seen, names + ["final layer input"]


def step_changes(comfy_root: Path, proxy: str, cases: list[tuple[int, int]], steps: int, cfg: float) -> dict:
    model, condition, zero, call, sigmas_of, size = load(proxy, comfy_root)
    torch.set_num_threads(1)
    seen, names = watch(model)
    sigmas = sigmas_of(steps)
    rows = []
    with torch.no_grad():
        for label, seed in cases:
            cond = condition(label)
            x = torch.randn((1, 16, size, size), generator=torch.Generator().manual_seed(seed))
            previous, changes = None, {name: [] for name in names}
            for sigma, sigma_next in zip(sigmas[:-1], sigmas[1:]):
                t = sigma.expand(1)
                velocity = call(x, t, cond)
                current = {name: seen[name] for name in names}
                if cfg != 1.0:
                    uncond = call(x, t, zero(cond))
                    velocity = uncond + cfg * (velocity - uncond)
                if previous is not None:
                    for name in names:
                        changes[name].append(float((current[name] - previous[name]).abs().mean()
                                                   / previous[name].abs().mean()))
                previous, x = current, x + (sigma_next - sigma) * velocity
            rows.append({"label": label, "seed": seed, "changes": changes})
    summary = {name: {"median": statistics.median(c for row in rows for c in row["changes"][name]),
                      "min": min(c for row in rows for c in row["changes"][name]),
                      "max": max(c for row in rows for c in row["changes"][name])} for name in names}
    return {"proxy": proxy, "steps": steps, "cfg": cfg, "summary": summary, "rows": rows}


RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "results" / "proxy_step_changes.json"
PROXY_NAMES = {"base": "Krea-2 proxy", "turbo": "Krea-2 Turbo proxy", "flux": "Flux proxy"}


def markdown_table(results: dict) -> str:
    """docs/proxy.md's table of the results file: per run, each list's and the final layer's median change per
    step (and its range)."""
    lines = ["| proxy | steps, CFG | first block's residual, per list | final layer's input |", "|---|---|---|---|"]
    for run in results["runs"]:
        summary = dict(run["summary"])
        final = summary.pop("final layer input")
        lists = "; ".join(f"`{name}` {s['median']:.3f} ({s['min']:.3f}-{s['max']:.3f})" for name, s in summary.items())
        lines.append(f"| {PROXY_NAMES[run['proxy']]} | {run['steps']}, {run['cfg']:g} | {lists} | "
                     f"{final['median']:.3f} ({final['min']:.3f}-{final['max']:.3f}) |")
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    import argparse

    parser = argparse.ArgumentParser(description="A proxy's per-step residual changes and final-layer moves.")
    parser.add_argument("--comfyui", type=Path, help="the ComfyUI checkout whose model code runs it")
    parser.add_argument("--proxy", choices=PROXIES, default="flux")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--cfg", type=float, default=3.5)
    parser.add_argument("--cases", default="0:0,4:0,2:0,0:1", help="label:seed pairs, comma-separated")
    args = parser.parse_args(argv)
    from devkit.comfy_harness import find_comfyui, load_pack

    load_pack()
    comfy_root = args.comfyui or find_comfyui()
    cases = [tuple(int(v) for v in case.split(":")) for case in args.cases.split(",")]
    print(json.dumps(step_changes(comfy_root, args.proxy, cases, args.steps, args.cfg)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
