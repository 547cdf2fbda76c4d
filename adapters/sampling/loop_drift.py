"""When ComfyUI's model code no longer matches what the registry says of a family's loop.

The registry (``families.registry``) says, per family, how its loop calls the blocks and the final
layer. A method relies on part of that: DBCache on how the blocks are called and what they return
(``dbcache.block_contract``), the forecast on where the final layer takes its feature
(``forecast.final_layer_contract``). Each checks its part when a run opens (the signatures) and on the
run's first call it decides (what the loop really passes); on a mismatch the run steps aside: the rest
of it is computed as if the node were not there, and the record and the log say why, naming the
family, the class, what the registry expected and what was found.
"""

from __future__ import annotations

import inspect

import torch

# The newest ComfyUI whose model code the registry was checked against (the tests run on it).
TESTED_COMFYUI = "0.33.0"


class LoopDrift(RuntimeError):
    """Raised within a call when the model's loop is not what the method relies on: the call's result is not to be
    used; the run steps aside, and the call is computed again as without the node. Its message is the warning."""


def drift_warning(family: str, where: str, expected: str, found: str) -> str:
    """The warning of a run that steps aside: what changed, what the image is, what to do."""
    return (f"{family}: {where} is not what this pack knows (expected {expected}; found {found}). ComfyUI's model "
            f"code changed under the pack, so this run was not cached: the image is the uncached one. Update the pack "
            f"(its model registry was checked with ComfyUI {TESTED_COMFYUI}).")


def parameters_of(module: torch.nn.Module) -> list[inspect.Parameter] | None:
    """The parameters of ``module.forward`` (bound: no ``self``); None when Python cannot tell them."""
    try:
        return list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None


def takes_any(parameters: list[inspect.Parameter]) -> bool:
    """A ``(*args, **kwargs)`` forward (a wrapper around another module): its signature says nothing."""
    kinds = {p.kind for p in parameters}
    return kinds <= {inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD}


def describe(parameters: list[inspect.Parameter]) -> str:
    return "forward" + str(inspect.Signature(parameters))


def same_argument(first, other) -> bool:
    """Whether a block got the same argument as the list's first block: the same object, or equal plain values.

    Tensors must be the same object or views of the same memory at the same place (a loop that hands every
    block one tensor); containers are compared item by item.
    """
    if first is other:
        return True
    if torch.is_tensor(first) or torch.is_tensor(other):
        return (torch.is_tensor(first) and torch.is_tensor(other) and first.shape == other.shape
                and first.stride() == other.stride() and first.dtype == other.dtype
                and first.data_ptr() == other.data_ptr())
    if isinstance(first, (list, tuple)) and isinstance(other, (list, tuple)):
        return type(first) is type(other) and len(first) == len(other) and all(map(same_argument, first, other))
    if isinstance(first, dict) and isinstance(other, dict):
        return first.keys() == other.keys() and all(same_argument(first[k], other[k]) for k in first)
    try:
        return type(first) is type(other) and bool(first == other)
    except Exception:   # a value without a plain equality (e.g. an object comparing elementwise)
        return False
