"""ComfyUI's multi-GPU sampling, as the cache sees it: which copy of the model runs on which device.

``MultiGPU CFG Split`` attaches per-device deep clones of the model as its "multigpu" models.
When sampling starts, ComfyUI keeps those flagged ``is_multigpu_base_clone``, maps each device
(``load_device``) to one model, the main model's device first, and in every step sends the conds
to the devices in that order, an even share each, in a thread per device. The same mapping is
read here, before sampling starts, so every device's copy gets its own cache for the run.
"""

from __future__ import annotations

from ..adapters.families.registry import ResolvedTransformer, UnsupportedModelError, resolve
from ..adapters.sampling.multi_device import DeviceModel, conds_per_device, devices_refusal


def sampling_devices(patcher) -> list[tuple[str, object]]:
    """(device, model patcher) for each device ComfyUI will sample on; empty for one-device sampling."""
    clones = [m for m in patcher.get_additional_models_with_key("multigpu")
              if getattr(m, "is_multigpu_base_clone", False)]
    if not clones:
        return []
    by_device = {patcher.load_device: patcher}
    for clone in clones:
        by_device[clone.load_device] = clone  # as ComfyUI's own mapping: the last model for a device wins
    return [(str(device), model) for device, model in by_device.items()]


def device_models(devices: list[tuple[str, object]], conds_per_step: int, main_host,
                  main: ResolvedTransformer) -> tuple[list[DeviceModel], str | None]:
    """Each device's copy as a ``DeviceModel``, or the reason the devices cannot share the cache.

    ``main`` is the transformer already resolved in ``main_host``, the main model's diffusion model.
    """
    models = []
    shares = conds_per_device(conds_per_step, len(devices))
    for (label, patcher), share in zip(devices, shares):
        host = patcher.model.diffusion_model
        try:
            target = main if host is main_host else resolve(host)
        except UnsupportedModelError:
            return [], (f"Multi-GPU sampling: the model on {label} ({type(host).__name__}) is not a transformer "
                        f"this pack caches, so it cannot be cached: this run was not cached.")
        models.append(DeviceModel(label=label, target=target, host=host, conds_per_step=max(share, 1)))
    refusal = devices_refusal(models) if models else None
    return ([], refusal) if refusal else (models, None)
