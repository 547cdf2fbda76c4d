"""The peer benchmark's table: one row per case, from its samples over the repeats and images.

Per case: cached (the node) or skipped (a peer) steps, the ideal speedup (the node: transformer block
evaluations without the cache / with it, counting the blocks cache-dit always computes; a peer: model
calls without it / with it; fewer steps: the uncached run's steps over its own), the wall-clock
speedup (median uncached time / median time) with the spread of its per-repeat ratios (spread.py),
and MAE/255 and PSNR of the decoded image against the regime's uncached image of the same seed, at
the regime's full steps whatever steps the case ran.
"""

from __future__ import annotations

import dataclasses
import math
import statistics

from .cases import UNCACHED, PeerCase  # first: its speedup import loads the pack
from benchmarks.spread import paired_ratios, spread

from krea2_cachedit.adapters.image_compare import mae_255_and_mse, psnr_from_mse


def reference_of(cases: list[PeerCase], regime: str) -> PeerCase:
    (reference,) = [c for c in cases if c.regime == regime and c.method == UNCACHED]
    return reference


def decoder(decode, model: str):
    """``decode``: one decoder for every case, or one per model file name (the Krea-2 proxies' latents are in
    Wan 2.1's latent space, the Flux proxy's in Flux's, each with its own codec)."""
    return decode[model] if isinstance(decode, dict) else decode


def summarize(cases: list[PeerCase], times: dict, samples: dict, decode) -> list[dict]:
    import torch

    rows = []
    for c in cases:
        reference = reference_of(cases, c.regime)
        maes, mses, finite = [], [], True
        decode_case = decoder(decode, c.model)   # the reference samples the same model
        for image, runs in samples[c.name].items():
            picture, target = decode_case(runs[-1].latent), decode_case(samples[reference.name][image][-1].latent)
            finite = finite and bool(torch.isfinite(picture).all())
            mae, mse = mae_255_and_mse(picture, target)
            maes.append(mae)
            mses.append(mse)
        every_run = [s for runs in samples[c.name].values() for s in runs]
        mean_mse = statistics.mean(mses)
        rows.append({
            "case": c.name, "regime": c.regime, "method": c.method, "setting": c.setting,
            "steps": c.steps, "cfg": c.cfg, "sampler": c.sampler, "model": c.model, "inputs": c.peer or c.cache,
            "skipped": [runs[-1].skipped for runs in samples[c.name].values()],
            "skipped_range": [min(s.skipped for s in every_run), max(s.skipped for s in every_run)],
            # Against the uncached run at the regime's full steps: a case at fewer steps saves the rest.
            "ideal": statistics.mean(s.ideal for s in every_run) * reference.steps / c.steps,
            # Model calls without / with: the node's cached step still runs its Fn blocks and the model's
            # embeddings and final layer, a peer's skipped step runs nothing.
            "step_ideal": statistics.mean(reference.steps / (s.steps - s.skipped) for s in every_run),
            "seconds": statistics.median(times[c.name]),
            "times": times[c.name],  # one per run, each repeat's images in turn: what the checks pair
            "wall": statistics.median(times[reference.name]) / statistics.median(times[c.name]),
            # Per-repeat ratios against the uncached run of the same repeat and image: median and
            # interquartile range (benchmarks/spread.py), how sure the wall figure is.
            "wall_spread": dataclasses.astuple(spread(paired_ratios(times[reference.name], times[c.name]))),
            "mae_255": statistics.mean(maes), "mae_255_per_image": maes,
            # PSNR of the mean squared error over the images; None when every image is identical.
            "psnr_db": psnr_from_mse(mean_mse, cap=math.inf) if mean_mse > 0 else None,
            "finite": finite, "runs": len(times[c.name]), "images": [list(i) for i in samples[c.name]],
            "calls": statistics.mean(s.calls for s in every_run),
            "cached_calls": statistics.mean(s.cached_calls for s in every_run),
            "text_computed": statistics.mean(s.text_computed for s in every_run),
            "always_blocks": max(s.always_blocks for s in every_run),
        })
    return rows
