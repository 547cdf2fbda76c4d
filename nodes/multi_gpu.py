"""ComfyUI's multi-GPU sampling, as the cache sees it: which copy of the model runs on which device.

``MultiGPU CFG Split`` attaches per-device deep clones of the model as its "multigpu" models.
When sampling starts, ComfyUI keeps those flagged ``is_multigpu_base_clone``, maps each device
(``load_device``) to one model, the main model's device first, and in every step sends the conds
to the devices in that order, an even share each, in a thread per device. The same mapping is
read here, before sampling starts, so every device's copy gets its own cache for the run.
"""

from __future__ import annotations

from ..adapters.multi_device import DeviceModel, conds_per_device
from ..adapters.registry import UnsupportedModelError, resolve


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


def device_models(devices: list[tuple[str, object]], conds_per_step: int, num_blocks: int) \
        -> tuple[list[DeviceModel], str | None]:
    """Each device's copy as a ``DeviceModel``, or the reason a device cannot join the cache."""
    models, seen = [], {}
    shares = conds_per_device(conds_per_step, len(devices))
    for (label, patcher), share in zip(devices, shares):
        host = patcher.model.diffusion_model
        try:
            target = resolve(host)
        except UnsupportedModelError:
            return [], (f"Multi-GPU sampling: the model on {label} ({type(host).__name__}) is not a transformer "
                        f"this pack caches, so it cannot be cached: this run was not cached.")
        if len(target.family.block_lists) > 1:
            # The devices agree per step where cache-dit asks once per call; with several block
            # lists it asks once per list, which that agreement does not cover.
            return [], (f"Multi-GPU sampling of {target.family.name} (several block lists) is not supported by the "
                        f"cache: this run was not cached.")
        if id(target.module) in seen:
            return [], (f"Multi-GPU sampling: {label} and {seen[id(target.module)]} share one copy of the model, "
                        f"and cache-dit keeps its state in the model: this run was not cached. Give every "
                        f"device its own copy (MultiGPU CFG Split does).")
        if target.num_blocks != num_blocks:
            return [], (f"Multi-GPU sampling: the model on {label} has {target.num_blocks} blocks, the main one "
                        f"{num_blocks}: this run was not cached.")
        seen[id(target.module)] = label
        models.append(DeviceModel(label=label, target=target, host=host, conds_per_step=max(share, 1)))
    return models, None
