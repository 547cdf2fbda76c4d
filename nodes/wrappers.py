"""ComfyUI sampling hooks: where a run of the Cache-DiT node starts, routes calls and ends.

Modelled on ComfyUI's EasyCache: the node puts a ``CacheDiTHolder`` into the
MODEL clone's ``transformer_options`` and registers two wrappers under one key.
- OUTER_SAMPLE: per run, reads the sampler's sigmas and CFG, opens a
  ``CacheRun`` (cache-dit enabled) and closes it in ``finally``, also on
  interrupt or error, so the shared transformer is never left cached.
- DIFFUSION_MODEL: per model call, lets the run route the call through
  cache-dit or around it, using ``cond_or_uncond`` and ``sigmas``.
"""

from __future__ import annotations

import dataclasses
import logging
import math

import torch

import comfy.model_patcher
import comfy.patcher_extension

from ..adapters.cache_run import CacheRun
from ..adapters.registry import resolve
from ..adapters.settings import CacheSettings, plan_run
from ..adapters.step_clock import StepClock
from . import routes

KEY = "krea2_cachedit"
WrappersMP = comfy.patcher_extension.WrappersMP
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CacheDiTHolder:
    """What one Krea2CacheDiT node asked for; immutable, shared by every run of its MODEL."""

    settings: CacheSettings
    node_id: str


def install(model: comfy.model_patcher.ModelPatcher, holder: CacheDiTHolder):
    """Attach the holder and wrappers to a MODEL clone (replacing an upstream Cache-DiT node's)."""
    for wrapper_type in (WrappersMP.OUTER_SAMPLE, WrappersMP.DIFFUSION_MODEL):
        model.remove_wrappers_with_key(wrapper_type, KEY)
    model.model_options.setdefault("transformer_options", {})[KEY] = holder
    model.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, KEY, outer_sample_wrapper)
    model.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, KEY, diffusion_model_wrapper)


def _guider_cfg(guider) -> float:
    # CFGGuider has .cfg; guiders without CFG (BasicGuider) run cond only.
    for name in ("cfg", "cfg1"):
        value = getattr(guider, name, None)
        if isinstance(value, (int, float)):
            return float(value)
    return 1.0


def _expects_uncond(guider, cfg: float) -> bool:
    """Whether the guider will evaluate an uncond branch besides cond (ComfyUI skips it at CFG 1)."""
    conds = getattr(guider, "original_conds", {}) or {}
    if len([name for name in conds if conds[name]]) < 2:
        return False
    return not math.isclose(cfg, 1.0) or bool(guider.model_options.get("disable_cfg1_optimization", False))


def _prompt_id() -> str:
    try:
        from comfy_execution.utils import get_executing_context

        context = get_executing_context()
        return context.prompt_id if context else ""
    except ImportError:
        return ""


def outer_sample_wrapper(executor, *args, **kwargs):
    guider = executor.class_obj
    holder = guider.model_options.get("transformer_options", {}).get(KEY)
    if not isinstance(holder, CacheDiTHolder):
        return executor(*args, **kwargs)
    sigmas = args[3] if len(args) > 3 else kwargs["sigmas"]  # outer_sample(noise, latent, sampler, sigmas, ...)
    target = resolve(guider.model_patcher.model.diffusion_model)
    clock = StepClock(sigmas)
    plan = plan_run(holder.settings, clock.steps, target.num_blocks)
    for warning in plan.warnings:
        logger.warning("Krea-2 Cache-DiT: %s", warning)
    cfg = _guider_cfg(guider)
    run = CacheRun(target, plan, clock, cfg=cfg, expects_uncond=_expects_uncond(guider, cfg),
                   node_id=holder.node_id, prompt_id=_prompt_id())
    original_options = guider.model_options
    guider.model_options = comfy.model_patcher.create_model_options_clone(original_options)
    guider.model_options["transformer_options"][KEY] = run
    try:
        with run:
            return executor(*args, **kwargs)
    finally:
        guider.model_options = original_options
        if run.record is not None:
            routes.publish(run.record)


def _transformer_options(args, kwargs) -> dict:
    options = kwargs.get("transformer_options")
    if isinstance(options, dict):
        return options
    return args[-1] if args and isinstance(args[-1], dict) else {}


def diffusion_model_wrapper(executor, *args, **kwargs):
    options = _transformer_options(args, kwargs)
    run = options.get(KEY)
    if not isinstance(run, CacheRun):
        return executor(*args, **kwargs)
    if options.get("sigmas") is None or not args or not torch.is_tensor(args[0]):
        with run.uncached():  # a caller outside a sampler step: nothing to cache against
            return executor(*args, **kwargs)
    x = args[0]
    branches = options.get("cond_or_uncond") or [0] * x.shape[0]
    shapes = [tuple(a.shape) for a in args[:3] if torch.is_tensor(a)]
    with run.model_call(options["sigmas"], branches, shapes):
        return executor(*args, **kwargs)
