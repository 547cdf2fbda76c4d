"""ComfyUI sampling hooks: where a run of the Cache-DiT node starts, routes calls and ends.

Modelled on ComfyUI's EasyCache: the node puts a ``CacheDiTHolder`` into the
MODEL clone's ``model_options`` and registers two wrappers under one key.
- OUTER_SAMPLE: per run, reads the sampler's sigmas, callback and guider, has the
  holder's method open its run (``Method.open_run``: DBCache's enables cache-dit) and
  closes it in ``finally``, also on interrupt or error, so the shared transformer is
  never left cached.
- DIFFUSION_MODEL: per model call, hands the call to the run (``SamplingRun.model_call``),
  with ``cond_or_uncond`` and ``sigmas``, or computes it in full around the run.

The nodes themselves only translate their inputs into a method's settings and call
``patched_model``, the one path by which every node checks them and installs the holder.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import logging

import torch

import comfy.model_patcher
import comfy.patcher_extension

from ..adapters.families.registry import (ANY_SCOPE, NodeScope, ResolvedTransformer, loop_patches_in, resolve,
                                          skip_lists_in)
from ..adapters.methods import DBCACHE, Method
from ..adapters.record.run_record import RunMeta, record_or_none, skipped_record
from ..adapters.sampling.loop_drift import LoopDrift
from ..adapters.sampling.seam import CallRoute, Run
from ..adapters.sampling.step_clock import StepClock, churned_start_sigmas
from . import conditioning_identity, multi_gpu, routes
from .guidance import read_guidance
from .plain_errors import plain_errors
from .step_cache_conflicts import other_step_cache, refusal as step_cache_refusal

KEY = "krea2_cachedit"
# The run now sampling each transformer, by the id of the module the sampler calls. Runs are not
# put into transformer_options: under torch.compile, a graph break rebuilds that dict from its
# sources, and ComfyUI's compile node filters out the guards that check its keys, so a later
# compiled run without this node would fail on the missing key.
# Under multi-GPU sampling, each device's copy of the model has its own entry (read from its thread).
_active_runs: dict[int, CallRoute] = {}   # a method's run (a SamplingRun) or one device's DeviceRun
WrappersMP = comfy.patcher_extension.WrappersMP
logger = logging.getLogger(__name__)


@dataclasses.dataclass(frozen=True)
class CacheDiTHolder:
    """What one Cache-DiT node asked for; immutable, shared by every run of its MODEL."""

    settings: object                 # the method's settings (DBCacheSettings for DBCache)
    node_id: str
    # The name of the node the user placed, which the log and warnings speak for (its scope's).
    node_name: str
    method: Method = DBCACHE
    # Upstream Cache-DiT nodes on the same model whose settings this one replaces: (node id, node name).
    superseded: tuple[tuple[str, str], ...] = ()


def patched_model(model: comfy.model_patcher.ModelPatcher, scope: NodeScope, method: Method, settings,
                  node_id: str) -> comfy.model_patcher.ModelPatcher:
    """A clone of ``model`` that samples with ``method``, after the method refused at the node (a ValueError
    naming the input) what can never run on this model; the input model is never changed."""
    target = resolve(model.model.diffusion_model, scope)
    method.check(settings, target, scope.node_name)
    patched = model.clone()
    install(patched, CacheDiTHolder(settings=settings, node_id=node_id, node_name=scope.node_name, method=method),
            routes_its_own_calls=not target.family.forward_runs_wrappers)
    return patched


def install(model: comfy.model_patcher.ModelPatcher, holder: CacheDiTHolder, routes_its_own_calls: bool = False):
    """Attach the holder and wrappers to a MODEL clone (replacing an upstream Cache-DiT node's);
    ``routes_its_own_calls``: the model's forward runs no DIFFUSION_MODEL wrappers (the registry's
    ``forward_runs_wrappers``), so its calls are routed to them around each call (``apply_model_wrapper``)."""
    upstream = model.model_options.get(KEY)
    if isinstance(upstream, CacheDiTHolder) and upstream.node_id != holder.node_id:
        holder = dataclasses.replace(holder, superseded=(*upstream.superseded, (upstream.node_id, upstream.node_name)))
    for wrapper_type in (WrappersMP.OUTER_SAMPLE, WrappersMP.DIFFUSION_MODEL, WrappersMP.APPLY_MODEL):
        model.remove_wrappers_with_key(wrapper_type, KEY)
    model.model_options[KEY] = holder  # beside transformer_options, not in it: see _active_runs
    model.add_wrapper_with_key(WrappersMP.OUTER_SAMPLE, KEY, outer_sample_wrapper)
    model.add_wrapper_with_key(WrappersMP.DIFFUSION_MODEL, KEY, diffusion_model_wrapper)
    if routes_its_own_calls:
        model.add_wrapper_with_key(WrappersMP.APPLY_MODEL, KEY, apply_model_wrapper)


def apply_model_wrapper(executor, *args, **kwargs):
    """Around a model call of a family whose forward runs no DIFFUSION_MODEL wrappers: for this call its forward (its
    own, or cache-dit's in its place while a run caches) runs this pack's first, as other models' forward does."""
    module = executor.class_obj.diffusion_model
    module = getattr(module, "_orig_mod", module)   # the model itself under TorchCompileModel
    previous = vars(module).get("forward")
    if getattr(previous, "runs_wrappers", False):   # routed already, by an outer node's wrapper
        return executor(*args, **kwargs)
    module.forward = _forward_through_wrappers(module, module.forward)
    try:
        return executor(*args, **kwargs)
    finally:
        if previous is None:
            del module.forward
        else:
            module.forward = previous


def _forward_through_wrappers(module: torch.nn.Module, forward):
    def current(*args, **kwargs):
        # The module's forward as it is now: a call computed beside the cache puts the class's own in this one's place.
        now = vars(module).get("forward", routed)
        return (forward if now is routed else now)(*args, **kwargs)

    def routed(*args, **kwargs):
        # This pack's wrapper alone: another node's (EasyCache's) runs as it does without this node, not at all.
        return comfy.patcher_extension.WrapperExecutor.new_class_executor(
            current, module, [diffusion_model_wrapper]).execute(*args, **kwargs)
    routed.runs_wrappers = True
    return routed


def _prompt_id() -> str:
    try:
        from comfy_execution.utils import get_executing_context

        context = get_executing_context()
        return context.prompt_id if context else ""
    except ImportError:
        return ""


def outer_sample_wrapper(executor, *args, **kwargs):
    guider = executor.class_obj
    holder = guider.model_options.get(KEY)
    if not isinstance(holder, CacheDiTHolder):
        return executor(*args, **kwargs)
    with plain_errors():
        return _sample_with_cache(executor, guider, holder, list(args), kwargs)


def _sample_with_cache(executor, guider, holder: CacheDiTHolder, args: list, kwargs: dict):
    # outer_sample(noise, latent, sampler, sigmas, denoise_mask, callback, ...)
    sigmas = args[3] if len(args) > 3 else kwargs["sigmas"]
    if torch.as_tensor(sigmas).numel() < 2:
        # One sigma (e.g. SplitSigmas at the last step): the sampler samples nothing; neither do we.
        return executor(*args, **kwargs)
    host = guider.model_patcher.model.diffusion_model
    target = resolve(host, ANY_SCOPE)
    sampler = args[2] if len(args) > 2 else kwargs.get("sampler")
    clock = StepClock(sigmas, sampler_reports=True, corrector=_is_corrector(sampler),
                      start_sigmas=_start_sigmas(sampler, sigmas),
                      single_evaluation=_sampler_name(sampler) in SINGLE_EVALUATION_SAMPLERS)
    guidance = read_guidance(guider)
    plan = holder.method.plan(holder.settings, clock.steps, target, holder.node_name, sigmas=clock.sigmas,
                              guided=guidance.conds_per_step > 1)
    meta = RunMeta(node_name=holder.node_name, node_id=holder.node_id, prompt_id=_prompt_id(), cfg=guidance.cfg,
                   guidance=guidance.as_dict(), warnings=tuple(_superseding_warnings(holder)))
    run, refusal = _open_run(guider, holder, target, host, plan, clock, guidance.conds_per_step)
    hosts = run.routes() if run is not None else {}
    try:
        if run is None:
            logger.warning("%s [node %s]: %s", holder.node_name, holder.node_id, refusal)
            return executor(*args, **kwargs)
        for warning in plan.warnings:
            logger.warning("%s [node %s]: %s", holder.node_name, holder.node_id, warning)
        _report_steps_to(run.clock, args, kwargs)
        _active_runs.update(hosts)
        with run:
            return executor(*args, **kwargs)
    finally:
        for host_id in hosts:
            _active_runs.pop(host_id, None)
        # Built here, after cache-dit is off: a failure to build it never hides the run's own error.
        _publish(holder, meta, clock, run, refusal)


def _open_run(guider, holder: CacheDiTHolder, target: ResolvedTransformer, host, plan, clock,
              conds_per_step: int) -> tuple[Run | None, str | None]:
    """The method's run for this sampling (one device or several), or None and why it runs uncached."""
    devices, refusal = [], None
    on_devices = multi_gpu.sampling_devices(guider.model_patcher)
    if on_devices:
        devices, refusal = multi_gpu.device_models(on_devices, conds_per_step, host, target)
    other = other_step_cache(guider.model_options.get("transformer_options"), _wrapper_keys(guider.model_patcher))
    refusal = refusal or (step_cache_refusal(other) if other is not None else None)
    if refusal:
        return None, refusal
    return holder.method.open_run(plan, clock, target=target, host=host, conds_per_step=conds_per_step,
                                  devices=devices, node_name=holder.node_name,
                                  text_reuse_off=conditioning_identity.run_refusal(guider),
                                  offers={"tell_block_index": lambda: block_index_teller(target)}), None


def _publish(holder: CacheDiTHolder, meta: RunMeta, clock: StepClock, run: Run | None, refusal: str | None):
    """Every record of this sampling run, at its end: the nodes this one replaces, then its own."""
    for node_id, node_name in holder.superseded:
        reason = (f"{holder.node_name} node {holder.node_id} after this one on the same model replaces this node's "
                  f"settings: this node did nothing in this run. Remove one of the two nodes.")
        logger.warning("%s [node %s]: %s", node_name, node_id, reason)
        upstream = dataclasses.replace(meta, node_id=node_id, node_name=node_name, warnings=())
        routes.publish(skipped_record(clock.steps, upstream, reason), node_name)
    if run is not None and run.stepped_aside is not None:   # the model's code is not what the method relies on
        refusal, run = run.stepped_aside, None
        logger.warning("%s [node %s]: %s", holder.node_name, holder.node_id, refusal)
    if run is None:
        record = skipped_record(clock.steps, dataclasses.replace(meta, warnings=()), refusal)
    else:
        record = record_or_none(run.outcome(), meta)
        if record is not None:
            _log_warnings(holder.node_name, record, meta.warnings + tuple(clock.warnings()))
    if record is not None:
        routes.publish(record, holder.node_name)


def block_index_teller(target: ResolvedTransformer):
    """How a block of this family learns its true place while cache-dit wraps the block list.

    ComfyUI's own block loops pass ``transformer_options`` to each block, with ``block_index``
    and ``total_blocks`` (and, where a model has several block lists, ``block_type``) for attention
    patches; under cache-dit the loop sees one wrapper per list, so the run writes the true values
    before each block. None for blocks that take no such options.
    """
    option_name = target.family.block_options_kwarg
    if option_name is None:
        return None

    def tell(index: int, total: int, kwargs: dict, block_type: str | None) -> None:
        options = kwargs.get(option_name)
        if isinstance(options, dict):
            options["block_index"] = index
            options["total_blocks"] = total
            if block_type is not None:
                options["block_type"] = block_type

    return tell


def _log_warnings(node_name: str, record, warnings) -> None:
    for warning in warnings:
        logger.warning("%s [node %s]: %s", node_name, record.node_id, warning)


def _wrapper_keys(model_patcher) -> list[str]:
    """Every key a wrapper is registered under on this model (any wrapper type)."""
    wrappers = getattr(model_patcher, "wrappers", None) or {}
    return [key for by_key in wrappers.values() if isinstance(by_key, dict) for key in by_key]


def _superseding_warnings(holder: CacheDiTHolder) -> list[str]:
    if not holder.superseded:
        return []
    names = dict.fromkeys(name for _, name in holder.superseded)
    nodes = ", ".join(node_id for node_id, _ in holder.superseded)
    return [f"This node replaces the settings of the {' / '.join(names)} node(s) {nodes} before it on the same "
            f"model (only the last one applies); remove the one you do not want."]


# Samplers that evaluate step i's corrector at sigma[i+1] before step i+1 evaluates there (see
# step_clock). Another sampler that does so is recognised by the clock after its first step.
CORRECTOR_SAMPLERS = {"sample_heun", "sample_heunpp2", "sample_exp_heun_2_x0", "sample_exp_heun_2_x0_sde"}


# Samplers that call the model once per cond and step, before reporting the step: the clock
# needs no sigma for them (reading it from the GPU would wait for the device on every call).
SINGLE_EVALUATION_SAMPLERS = {"sample_euler", "sample_euler_ancestral", "sample_dpmpp_2m", "sample_dpmpp_2m_sde",
                              "sample_dpmpp_3m_sde", "sample_lcm"}


def _sampler_name(sampler) -> str:
    return getattr(getattr(sampler, "sampler_function", None), "__name__", "")


def _is_corrector(sampler) -> bool:
    return _sampler_name(sampler) in CORRECTOR_SAMPLERS


def _start_sigmas(sampler, sigmas) -> list[float] | None:
    """Each step's first-evaluation sigma when the sampler churns (``s_churn > 0``), else None."""
    options = getattr(sampler, "extra_options", None)
    if not isinstance(options, dict) or not float(options.get("s_churn", 0.0) or 0.0) > 0.0:
        return None
    return churned_start_sigmas(sigmas, float(options["s_churn"]), float(options.get("s_tmin", 0.0)),
                                float(options.get("s_tmax", float("inf"))))


def _report_steps_to(clock, args: list, kwargs: dict):
    """Wrap the sampler's callback so the clock hears the sampler's own step index (see step_clock)."""
    def on_step(step, *rest, **more):
        clock.step_reported(step)
        if original is not None:
            return original(step, *rest, **more)

    if len(args) > 5:
        original, args[5] = args[5], on_step
    else:
        original, kwargs["callback"] = kwargs.get("callback"), on_step


def _transformer_options(executor, args, kwargs) -> dict:
    """The call's transformer options: by keyword, last in ``args`` (most models), or at their place in the
    model's signature (LTXV passes them positionally, before ``keyframe_idxs``)."""
    options = kwargs.get("transformer_options")
    if isinstance(options, dict):
        return options
    if args and isinstance(args[-1], dict):
        return args[-1]
    options = _call_arguments(executor, args, kwargs).get("transformer_options")
    return options if isinstance(options, dict) else {}


def _call_arguments(executor, args, kwargs) -> dict:
    """The model call's arguments by name (ComfyUI's models pass e.g. Flux's ``control`` positionally)."""
    method = executor.original
    try:
        # The plain function's signature, cached: a cache of the bound method would keep the model alive.
        function = getattr(method, "__func__", None)
        if function is not None:
            return _signature(function).bind_partial(method.__self__, *args, **kwargs).arguments
        return inspect.signature(method).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):
        return dict(kwargs)


@functools.lru_cache(maxsize=64)
def _signature(function) -> inspect.Signature:
    return inspect.signature(function)


# Routing is Python bookkeeping: torch.compile skips this frame (and never guards on the run's
# state), and compiles the model call it makes.
@torch.compiler.disable(recursive=False)
def diffusion_model_wrapper(executor, *args, **kwargs):
    options = _transformer_options(executor, args, kwargs)
    run = _active_runs.get(id(executor.class_obj))
    if run is None:  # not sampling with this node, or another copy of the model (keyed by module)
        return executor(*args, **kwargs)
    latents = _latents(args[0]) if args else None
    if options.get("sigmas") is None or latents is None:
        with run.uncached():  # a caller outside a sampler step: nothing to cache against
            return executor(*args, **kwargs)
    family = run.target.family
    # Binding the call to the model's signature costs microseconds: only for families that need it.
    call_arguments = _call_arguments(executor, args, kwargs) if family.call_patches else None
    patched = loop_patches_in(family, options, call_arguments)
    if patched:  # the model's loop applies them by block index: only its own loop can
        run.warn_once(f"Calls with {' and '.join(patched)} (patches such as a ControlNet's, or options naming "
                      f"blocks) were computed in full: the model applies them by block index, and the cache "
                      f"runs its blocks as one.")
        with run.uncached():
            return executor(*args, **kwargs)
    skipping = skip_lists_in(family, run.target.module)
    if skipping:  # the model's loop skips those blocks: cache-dit's wrapper would run them
        run.warn_once(f"Calls while the model's {' and '.join(skipping)} name blocks to skip were computed in "
                      f"full: the model skips them in its own loop, which the cache replaces.")
        with run.uncached():
            return executor(*args, **kwargs)
    x = latents[0]
    branches = options.get("cond_or_uncond") or [0] * x.shape[0]
    # Every latent's shape (an audio-video model's video and audio), then the timestep's and context's.
    shapes = [tuple(a.shape) for a in (*latents, *args[1:3]) if torch.is_tensor(a)]
    text = conditioning_identity.call_identity(options, args)
    try:
        with run.model_call(options["sigmas"], branches, shapes, device=x.device, text=text):
            return executor(*args, **kwargs)
    except LoopDrift:   # the run's first decided call found ComfyUI's model code changed: the run stepped aside
        with run.uncached():
            return executor(*args, **kwargs)


def _latents(x) -> list[torch.Tensor] | None:
    """The latents of a model call: one tensor, or the list ComfyUI hands a model that samples several at
    once (its ``latent_shapes``: MiniMax H3's [video, audio]); None when the input is neither."""
    if torch.is_tensor(x):
        return [x]
    if isinstance(x, (list, tuple)) and x and all(torch.is_tensor(item) for item in x):
        return list(x)
    return None
