"""Forecasting the final layer's output (``Forecaster.target`` "output"): its seam and its contract.

The seam is a forward hook on the final layer: on a computed call it keeps what the layer returned,
on a forecast call (the blocks skipped, as for the feature) it returns the forecast in its place, so
the rest of the model's code (Krea-2: the text tokens cut off, the patches folded into the latent)
runs on the forecast as it would on a computed output. Those steps are linear in the output, so a
linear forecast of the layer's output is the same forecast of the model's prediction.

It relies on less of the loop than the feature's seam: nothing of how the final layer is called, only
that it returns one tensor, checked on the run's first computed call.
"""

from __future__ import annotations

import torch

from ..families.registry import ResolvedTransformer
from ..sampling.loop_drift import drift_warning
from .layer_seam import LayerSeam


class FinalLayerOutputSeam(LayerSeam):
    """A forward hook on the final layer: keeps its output, or returns a forecast of it instead."""

    def _register(self):
        return self.module.register_forward_hook(self._after)

    @torch.compiler.disable
    def _after(self, module, args, output):
        self.ran += 1
        if self._forecast is None:
            self.seen = output   # the contract's verdict says whether it is one tensor
            return None
        if not torch.is_tensor(output) or tuple(output.shape) != tuple(self._forecast.shape):
            found = tuple(output.shape) if torch.is_tensor(output) else type(output).__name__
            raise RuntimeError(f"The forecast output has the shape {tuple(self._forecast.shape)}, the final layer "
                               f"returned {found}: this call's stream changed shape within a cache context.")
        return self._forecast


class FinalOutputContract:
    """The output forecast's part of the registry for ``target``: the final layer returns one tensor."""

    def __init__(self, target: ResolvedTransformer):
        self.target = target
        self.layer = getattr(target.module, target.family.final_layer)
        self.watching = False

    def signature_mismatch(self) -> str | None:
        return None   # the output is read where the layer returns it, whatever its parameters

    def watch(self) -> None:
        self.watching = True

    def unwatch(self) -> None:
        self.watching = False

    def verdict(self, output) -> str | None:
        """After a computed call: the warning when the final layer returned something other than one tensor."""
        self.unwatch()
        if output is None or torch.is_tensor(output):
            return None   # None: the call ran no final layer (not one the forecast decides on)
        where = f"{type(self.layer).__name__}.forward (the final layer '{self.target.family.final_layer}')"
        return drift_warning(self.target.family.name, where, "one tensor as its output",
                             f"a {type(output).__name__}")
