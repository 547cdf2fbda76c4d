"""When ComfyUI guarantees that two model calls carry the same conditioning (for text-path reuse).

Within one sampling run, ComfyUI gives every cond a ``uuid`` and builds each call's text
context from those conds' own tensors, batched in the order of ``transformer_options
["uuids"]``: the same uuids in the same order (and shape) mean the same context, bit for
bit. That holds unless something changes the conditioning or the weights between calls;
then the text path is computed on every call, as without the node:
- hooks (LoRA hooks, scheduled strengths) patch weights per cond and step;
- a ``model_function_wrapper`` may hand the model a different context on any call;
- ``post_input`` patches receive the text tokens and may change them in place.
"""

from __future__ import annotations

from collections.abc import Hashable

import torch


def run_refusal(guider) -> str | None:
    """Why this run must compute the text path on every call, or None when it may reuse it."""
    conds = getattr(guider, "conds", None) or {}
    if any(isinstance(c, dict) and c.get("hooks") is not None for group in conds.values() for c in group):
        return "hooks on the conditioning can change the weights between steps"
    patcher = guider.model_patcher
    if getattr(patcher, "hook_patches", None) or getattr(patcher, "forced_hooks", None) is not None:
        return "hooks on the model can change the weights between steps"
    if "model_function_wrapper" in guider.model_options:
        return "a model function wrapper can change the conditioning of any call"
    return None


def call_identity(options: dict, args: tuple) -> tuple[Hashable, torch.Tensor] | None:
    """(identity, context tensor) of a diffusion model call, or None when it cannot be vouched for."""
    uuids = options.get("uuids")
    context = args[2] if len(args) > 2 else None
    if not uuids or not torch.is_tensor(context):
        return None
    if (options.get("patches") or {}).get("post_input"):
        return None
    # The attention function the text path's attention runs with (a patch node may replace it).
    override = options.get("optimized_attention_override")
    return (tuple(uuids), tuple(options.get("cond_or_uncond") or ()), id(override)), context
