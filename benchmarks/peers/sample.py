"""One peer-benchmark case on one image through the ComfyUI server: its graph, and what the run measured.

The node's runs are read from its stats record; a peer's skipped steps from the summary line it logs
when sampling ends; an uncached run skips nothing.
"""

from __future__ import annotations

import dataclasses
import math
import re

from benchmarks.speedup import run_prompt
from devkit.comfy_harness import ComfyServer
from devkit.krea2_prompts import proxy_prompt, with_forecast
from .cases import PeerCase

PEER_NODE = "20"  # the EasyCache / LazyCache node, between the loader and the KSampler
OWN_INPUT_NODE = "21"  # Krea2TestOwnModelInput, before the peer node
FULL_TEXT_NODE = "22"  # the pass-through model_function_wrapper before the node (CACHING_OFF_FULL_TEXT)


def case_prompt(case: PeerCase, label: int, seed: int) -> dict:
    """The proxy prompt on the regime's model with the case's sampler, with the node (``case.cache``) or a
    peer node (``case.peer``) on the model."""
    prompt = proxy_prompt(label=label, cfg=case.cfg, steps=case.steps, cache=case.cache, seed=seed, model=case.model,
                          prefix=f"peers_{case.name.replace(' ', '_').replace(',', '')}")
    prompt["6"]["inputs"]["sampler_name"] = case.sampler
    if case.peer is not None:
        inputs = {k: v for k, v in case.peer.items() if k != "class_type"}
        model = ["1", 0]
        if case.own_input:
            prompt[OWN_INPUT_NODE] = {"class_type": "Krea2TestOwnModelInput", "inputs": {"model": model}}
            model = [OWN_INPUT_NODE, 0]
        prompt[PEER_NODE] = {"class_type": case.peer["class_type"], "inputs": {"model": model, **inputs}}
        prompt["6"]["inputs"]["model"] = [PEER_NODE, 0]
    if case.forecast is not None:
        prompt = with_forecast(prompt, **case.forecast)
    if case.full_text:
        prompt[FULL_TEXT_NODE] = {"class_type": "Krea2TestModelFunctionWrapper", "inputs": {"model": ["1", 0]}}
        prompt["5"]["inputs"]["model"] = [FULL_TEXT_NODE, 0]
    return prompt


# What EasyCache and LazyCache log when a sampling run ends (easycache_sample_wrapper).
PEER_SUMMARY = re.compile(r"(EasyCache|LazyCache) - skipped (\d+)/(\d+) steps")


def peer_skipped(log: str, peer: str) -> tuple[int, int]:
    """Skipped and total steps from the log a prompt wrote: exactly one sampling run, of ``peer``."""
    found = PEER_SUMMARY.findall(log)
    if len(found) != 1 or found[0][0] != peer:
        raise RuntimeError(f"expected one {peer} summary line in this prompt's log, found {found}:\n{log[-3000:]}")
    return int(found[0][1]), int(found[0][2])


@dataclasses.dataclass
class Sample:
    seconds: float
    latent: object   # torch.Tensor
    skipped: int     # steps the node served from its cache, or the peer skipped
    steps: int
    ideal: float
    # What the projection to Krea-2's size needs (projection.py): model calls, those the node's cache
    # served (its always-computed blocks only), text path computations, always-computed blocks.
    calls: int = 0
    cached_calls: int = 0
    text_computed: int = 0
    always_blocks: int = 0


def node_sample(seconds: float, latent, stats: dict) -> Sample:
    blocks = stats["block_evals_uncached"] // max(stats["calls"], 1)
    text = stats.get("text_path") or {"computed": stats["calls"]}
    settings = stats["settings"]
    return Sample(seconds, latent, len(stats["skipped_steps"]), stats["steps"], stats["ideal_speedup"],
                  calls=stats["calls"], cached_calls=sum(1 for call in stats["call_log"] if call[3] < blocks),
                  text_computed=text["computed"],
                  # A forecast call runs no block (whole-call forecasting's settings have no Fn / Bn).
                  always_blocks=settings.get("Fn_compute_blocks", 0) + settings.get("Bn_compute_blocks", 0))


def run_case(server: ComfyServer, case: PeerCase, image: tuple[int, int]) -> Sample:
    label, seed = image
    log_start = server.log_path.stat().st_size if server.log_path.exists() else 0
    run = run_prompt(server, case_prompt(case, label, seed))
    if run.stats is not None:
        if run.stats["status"] != "ok":
            raise RuntimeError(f"{case.name}: the node did not cache this run: {run.stats}")
        return node_sample(run.seconds, run.latent, run.stats)
    if case.peer is not None:
        with open(server.log_path, "rb") as log:
            log.seek(log_start)
            skipped, steps = peer_skipped(log.read().decode(errors="replace"), case.peer["class_type"])
        if steps != case.steps:
            raise RuntimeError(f"{case.name}: {case.peer['class_type']} reports {steps} steps, the prompt has "
                               f"{case.steps}")
        return Sample(run.seconds, run.latent, skipped, steps, steps / (steps - skipped) if steps > skipped else math.inf,
                      calls=steps, text_computed=steps - skipped)
    # Without a node: one model call per step (cond and uncond batched), as euler and the multistep
    # samplers the cases use make (tests/benchmarks/test_peers_benchmark.py counts them).
    return Sample(run.seconds, run.latent, 0, case.steps, 1.0, calls=case.steps, text_computed=case.steps)
