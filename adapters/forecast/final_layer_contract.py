"""What the forecast relies on in a family's loop, checked for each run (see ``sampling.loop_drift``).

A forecast call runs none of the blocks and hands the final layer a forecast of the feature the last
block would have produced. That is right only where:

- the final layer takes the feature as the parameter the registry names (``final_feature``): the
  forecast reads and replaces it by that name, wherever the loop passes it (by position or keyword);
- what it takes there is the last block's output (or a view of it, as Flux's image tokens are):
  checked on the run's first computed call, which runs the blocks as they are.

The forecast needs nothing else of the blocks: how the loop calls them, or what they return, does not
reach a forecast call.
"""

from __future__ import annotations

import inspect

import torch

from ..families.registry import ResolvedTransformer
from ..sampling.loop_drift import describe, drift_warning, parameters_of, takes_any

_POSITIONAL = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)


class FeatureArgument:
    """Where a call of the final layer holds its feature: the keyword ``name``, or the position the forward gives
    that name. A forward that takes anything (``*args, **kwargs``, a wrapper's) takes it first or by name."""

    def __init__(self, module: torch.nn.Module, name: str):
        self.name = name
        self.parameters = parameters_of(module)
        self.position: int | None = 0
        if self.parameters is not None and not takes_any(self.parameters):
            positional = [p.name for p in self.parameters if p.kind in _POSITIONAL]
            self.position = positional.index(name) if name in positional else None

    @property
    def known(self) -> bool:
        """Whether the forward has the parameter at all (a forward that takes anything may)."""
        return (self.parameters is None or takes_any(self.parameters)
                or any(p.name == self.name for p in self.parameters))

    def get(self, args: tuple, kwargs: dict):
        if self.name in kwargs:
            return kwargs[self.name]
        if self.position is not None and self.position < len(args):
            return args[self.position]
        return None

    def replace(self, args: tuple, kwargs: dict, value) -> tuple[tuple, dict]:
        if self.name in kwargs:
            return args, {**kwargs, self.name: value}
        return (*args[:self.position], value, *args[self.position + 1:]), kwargs


class FinalLayerContract:
    """The forecast's part of the registry for ``target``: checked at run open and on the first computed call."""

    def __init__(self, target: ResolvedTransformer):
        self.target = target
        self.layer = getattr(target.module, target.family.final_layer)
        self.feature = FeatureArgument(self.layer, target.family.final_feature)
        self._last_block = target.block_modules[-1][-1]
        self._hook = None
        self._last_output: torch.Tensor | None = None

    def signature_mismatch(self) -> str | None:
        if self.feature.known:
            return None
        return self._warning(f"the feature as its parameter '{self.feature.name}'", describe(self.feature.parameters))

    # --- the first computed call ------------------------------------------------------
    def watch(self) -> None:
        """Keep what the last block returns, until ``verdict``."""
        self._hook = self._last_block.register_forward_hook(self._keep)

    def unwatch(self) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None
        self._last_output = None

    @property
    def watching(self) -> bool:
        return self._hook is not None

    def verdict(self, feature: torch.Tensor | None) -> str | None:
        """After a computed call: the warning when the final layer did not get the last block's output."""
        last = self._last_output
        self.unwatch()
        if last is None or feature is None:
            return None   # the call ran no block or no final layer (not one the forecast decides on)
        if _same_memory(feature, last):
            return None
        return self._warning(f"the last block's output as '{self.feature.name}'",
                             f"a tensor {tuple(feature.shape)} that is not the last block's output "
                             f"{tuple(last.shape)} or a view of it")

    @torch.compiler.disable
    def _keep(self, module, args, output):
        self._last_output = output if torch.is_tensor(output) else None

    def _warning(self, expected: str, found: str) -> str:
        where = f"{type(self.layer).__name__}.forward (the final layer '{self.target.family.final_layer}')"
        return drift_warning(self.target.family.name, where, expected, found)


def _same_memory(feature: torch.Tensor, output: torch.Tensor) -> bool:
    """Whether ``feature`` is ``output`` or a view into its memory (a slice of its tokens)."""
    if feature is output:
        return True
    try:
        return feature.untyped_storage().data_ptr() == output.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):   # a tensor without storage (e.g. a subclass): cannot tell
        return True
