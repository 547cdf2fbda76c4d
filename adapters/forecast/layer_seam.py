"""What both forecast seams share: a hook on the final layer, armed for one call at a time.

Per call (``begin`` .. ``end``) the hook either keeps what it sees at its side of the layer (``seen``: the
feature going in, or the output coming out) or serves the forecast ``begin`` gave it, and counts how often
the layer ran. Each seam registers its own hook (``_register``) on the side it forecasts.
"""

from __future__ import annotations

import torch
from torch.utils.hooks import RemovableHandle


class LayerSeam:
    def __init__(self, module: torch.nn.Module):
        self.module = module
        self._hook: RemovableHandle | None = None
        self._forecast: torch.Tensor | None = None
        self.seen = None
        self.ran = 0

    def _register(self) -> RemovableHandle:
        raise NotImplementedError

    def install(self) -> None:
        self._hook = self._register()

    def remove(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None

    def begin(self, forecast: torch.Tensor | None) -> None:
        self._forecast, self.seen, self.ran = forecast, None, 0

    def end(self) -> tuple[int, object]:
        seen, ran = self.seen, self.ran
        self._forecast, self.seen = None, None
        return ran, seen
