"""A transformer's text path computed once per batch of conds in a run, then reused bit-identical.

Krea-2 runs its text tokens through two modules (``txtfusion``, then ``txtmlp``) on every
model call, although their output depends only on the conditioning and the weights, which
do not change within a sampling run. On a cached step that is a large part of what is
still computed (about a fifth at Krea-2's size); on a computed step it is pure repetition.

For one run, ``TextPathReuse`` replaces the two modules' ``forward`` on the instance (as
cache-dit does for the transformer's) and restores them after. A call may reuse only when
the host vouches for it: ``call(identity, text_input)`` names what makes this call's
conditioning the same as an earlier call's (for ComfyUI: the conds in the batch, which
keep their tensors for the whole run) and the tensor it arrives in. The first module then
reuses only if what it is given *is* that tensor (not a copy some other code made) and
everything else about it matches: shape, dtype, device, layout, and the other arguments.
Anything else computes, exactly as without this module.

Bit-identical because the reused result *is* the result of the same computation on the
same input and weights: the call layout (which conds share a batch) is part of the key,
so a batch of two never reuses what a batch of one computed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import weakref
from collections.abc import Callable, Hashable

import torch


@dataclasses.dataclass
class _Entry:
    first_out: torch.Tensor
    second_out: torch.Tensor | None = None


@dataclasses.dataclass(frozen=True)
class TextPathCounts:
    """What the text path did in a run, for the record."""

    computed: int          # calls that ran the text path
    reused: int            # calls that reused an earlier call's result
    off: str | None        # why reuse was off for the whole run (None: it was on)


class TextPathReuse:
    """Reuse of ``module``'s text path (``attrs``: the first and the second module) for one run."""

    def __init__(self, module: torch.nn.Module, attrs: tuple[str, str], off: str | None = None):
        self._first, self._second = (getattr(module, name) for name in attrs)
        self.off = off
        self._entries: dict[Hashable, _Entry] = {}
        self._call: tuple[Hashable, torch.Tensor] | None = None
        self._current: _Entry | None = None   # the entry the first module just answered from
        self.computed = 0
        self.reused = 0

    # --- lifetime -------------------------------------------------------------------
    def __enter__(self) -> TextPathReuse:
        # Also when reuse is off: then every call computes, and is counted.
        for module, forward in ((self._first, _first_forward), (self._second, _second_forward)):
            _ACTIVE[id(module)] = self
            module.forward = _stable_patch(module, forward)
        return self

    def __exit__(self, exc_type, exc, tb):
        for module in (self._first, self._second):
            module.__dict__.pop("forward", None)
            _ACTIVE.pop(id(module), None)
        self._entries.clear()   # the results hold device memory
        self._current = None
        return False

    def counts(self) -> TextPathCounts:
        return TextPathCounts(self.computed, self.reused, self.off)

    # --- per call -------------------------------------------------------------------
    @contextlib.contextmanager
    def call(self, identity: Hashable | None, text_input: torch.Tensor | None):
        """One model call; ``identity`` None (or no ``text_input``) means: compute, reuse nothing."""
        vouched = self.off is None and identity is not None and text_input is not None
        self._call = (identity, text_input) if vouched else None
        self._current = None
        try:
            yield
        finally:
            self._call, self._current = None, None

    def _key(self, x, args, kwargs) -> Hashable | None:
        if self._call is None or not torch.is_tensor(x):
            return None
        identity, text_input = self._call
        # The same storage and the same view of it: the host's tensor, not something made from it.
        if x.data_ptr() != text_input.data_ptr() or x.numel() != text_input.numel():
            return None
        if args or any(v is not None and not isinstance(v, dict) for v in kwargs.values()):
            return None   # a mask or another tensor argument: not part of what the host vouched for
        return identity, tuple(x.shape), x.stride(), x.dtype, x.device

    def first(self, forward, module, x, *args, **kwargs):
        key = self._key(x, args, kwargs)
        entry = self._entries.get(key) if key is not None else None
        if entry is not None:
            self.reused += 1
        else:
            self.computed += 1
            entry = _Entry(forward(module, x, *args, **kwargs))
            if key is not None:
                self._entries[key] = entry
        self._current = entry if key is not None else None
        return entry.first_out

    def second(self, forward, module, x, *args, **kwargs):
        entry = self._current
        if entry is None or x is not entry.first_out or args or kwargs:
            return forward(module, x, *args, **kwargs)
        if entry.second_out is None:
            entry.second_out = forward(module, x)
        return entry.second_out


# The run using each module now, by id(module): looked up per call, so that the forward put on
# the module is one object for all its runs (torch.compile guards on that object; a new one per
# run would make a compiled model compile again on every run).
_ACTIVE: dict[int, TextPathReuse] = {}
# That one forward per module. It holds its module only weakly: a bound method (or anything holding
# the module) as a value here would keep every model that ever ran through the node alive, with its
# weights, after ComfyUI drops it (a weak key does not help when the value holds the key).
_PATCHES: weakref.WeakKeyDictionary[torch.nn.Module, Callable] = weakref.WeakKeyDictionary()


def _stable_patch(module: torch.nn.Module, function) -> Callable:
    patch = _PATCHES.get(module)
    if patch is None:
        patch = _PATCHES[module] = _weakly_bound(function, weakref.ref(module))
    return patch


def _weakly_bound(function, module_ref: weakref.ref) -> Callable:
    """``function`` with its first argument the module behind ``module_ref``: a method that does not
    hold its module (put on the instance, it is called without ``self``)."""

    def forward(x, *args, **kwargs):
        return function(module_ref(), x, *args, **kwargs)

    return forward


def _forward_through(step: str):
    """The forward put on a module of the text path: through the run using it now, if any."""

    # Python bookkeeping that torch.compile must not trace (it would guard on this run's objects and
    # compile again on the next run). The text path itself then runs eagerly under a compiled model:
    # once per batch of conds and run, not on every call, so compiling it would save little.
    @torch.compiler.disable
    def forward(module, x, *args, **kwargs):
        reuse, own = _ACTIVE.get(id(module)), type(module).forward
        if reuse is None:
            return own(module, x, *args, **kwargs)
        return getattr(reuse, step)(own, module, x, *args, **kwargs)

    return forward


_first_forward, _second_forward = _forward_through("first"), _forward_through("second")
